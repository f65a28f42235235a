"""Cross-trace patterns: the failing traces of a scope (a knowledge base, a run, a time window) grouped
by what they share, each group with its count, examples and a fix.

Seven kinds of group, each its own section (SECTIONS, in the order shown):

- `source`: a document whose chunks contradict claims of failing traces;
- `topic`: words that the missed sub-questions of failing traces share (veralith.patterns.topics);
- `claim`: a kind of fact (number, date, name) that keeps coming out ungrounded
  (veralith.patterns.claims);
- `idle_source`: a document failing traces retrieve that grounds no claim anywhere in the scope;
- `transition`: the failing cell traces moved to between two runs (`against` → `run`, else the
  run before `run`, else the last two runs), matched as `veralith compare` matches them;
- `missed_chunk`, `missed_fact`: expected chunks and reference facts the retriever keeps missing, over
  every judged trace with a reference, failing or not (veralith.patterns.reference).

Ranking: within a section, groups are ordered by how many failing traces they explain (the
traces where the group's cause shows: the document contradicts one of its claims, one of its missed
sub-questions uses the topic's words, one of its ungrounded claims is of that kind, it retrieved the
idle document, it made that move), then by how often the cause shows (contradictions, retrievals,
sub-questions, claims), then by name. A group needs `min_traces` traces; each section says so
(`min_traces`) and what fell short of it (`below`: the documents, kinds or moves with fewer traces,
the failing traces left out of every topic), so an empty section is never a bare "none". A trace may
explain groups of several sections (a contradicted price is a source *and* a number); within the
topic section each trace counts once.

The counting is done by the store (veralith.store.patterns: a few aggregate queries), the
wording by veralith.patterns.fixes; examples, with their one-line reason
(veralith.compare.reasons, narrowed to the group's own cause), are read only for the groups shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from veralith.compare.reasons import failure_reason
from veralith.patterns import fixes
from veralith.patterns.claims import KINDS, claim_kinds
from veralith.patterns.reference import KINDS as REFERENCE_KINDS, reference_sections
from veralith.patterns.topics import cluster
from veralith.patterns.transitions import transitions
from veralith.store import ops
from veralith.store.patterns import PatternScope

if TYPE_CHECKING:
    from veralith.store.protocol import Store

__all__ = ["SECTIONS", "Example", "Group", "Patterns", "Section", "find_patterns"]

# The sections of failing traces, then the reference sections (veralith.patterns.reference), in the order shown.
_FAILING = ("source", "topic", "claim", "idle_source", "transition")
SECTIONS = (*_FAILING, *REFERENCE_KINDS)
SAMPLE = 20_000   # judged sub-questions read as the topics' baseline (the newest of the scope)
_TITLES = {"source": "Documents that contradict answers", "topic": "Topics retrieval keeps missing",
           "claim": "Kinds of fact that come out ungrounded", "idle_source": "Documents retrieved that never ground",
           "transition": "Moves into failing cells between runs"}
_RULES = {
    "source": "failing traces in which a chunk of the document contradicts a claim",
    "topic": "failing traces with a sub-question the context did not suffice for that uses the topic's words "
             "(each trace in one topic)",
    "claim": "failing traces with an unsupported, contradicted or conflicting claim of that kind",
    "idle_source": "failing traces that retrieved the document; it grounds no claim in the whole scope",
    "transition": "traces matched between the two runs that moved into a failing cell (or started failing in "
                  "the same cell)",
}
_PLURAL = {"number": "numbers", "date": "dates", "name": "names"}


@dataclass(frozen=True)
class Example:
    trace_id: int
    reason: str   # one line (untrusted text inside: escaped by whoever shows it)


@dataclass(frozen=True)
class Group:
    kind: str
    key: str                      # the document, the topic's words, the claim kind, "old → new"
    traces: int                   # failing traces it explains (the ranking figure)
    detail: str                   # its figures in words
    fix: str
    examples: list[Example] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    terms: tuple[str, ...] = ()   # a topic's words


@dataclass(frozen=True)
class Section:
    kind: str
    title: str
    rule: str                     # what counts a trace into a group of this section
    groups: list[Group]           # the first `limit`, ranked
    total_groups: int
    note: str | None = None
    min_traces: int = 2           # traces a group needs
    below: str | None = None      # what the cause showed in that fell short of min_traces, in words
    unit: str = "failing traces"  # what a group's count counts
    empty: str | None = None      # why nothing could be found at all (a reference section: none given, none missed)

    @property
    def none_found(self) -> str:
        """What the section says when it has no group (every view): why nothing could be found, else the
        minimum and what fell short of it."""
        if self.empty:
            return self.empty
        said = f"none found: a group needs at least {self.min_traces} {self.unit}"
        return f"{said}; {self.below}" if self.below else said


@dataclass(frozen=True)
class Patterns:
    scope: dict[str, Any]
    traces: int                   # traces with a result in the scope
    failing: int
    sections: list[Section]
    notes: list[str] = field(default_factory=list)

    def section(self, kind: str) -> Section:
        return next(s for s in self.sections if s.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Draft:
    group: Group
    rank: tuple[Any, ...]
    refs: list[tuple[int, Any]] = field(default_factory=list)   # (trace id, focus) for examples


def find_patterns(store: Store, *, kb: str | None = None, run: str | None = None, since: str | None = None,
                  until: str | None = None, against: str | None = None, limit: int = 5, examples: int = 3,
                  min_traces: int = 2) -> Patterns:
    """The patterns of the scope (see the module docstring). `run`/`against` are run ids or names
    (RunNotFound when unknown); `since`/`until` are UTC ISO text as stored (traces created at or
    after `since`, before `until`; the transitions compare whole runs); `limit` groups per section."""
    chosen = store.read(ops.resolve_run, run) if run is not None else None
    base = store.read(ops.resolve_run, against) if against is not None else None
    scope = PatternScope(knowledge_base=kb, run_id=chosen.id if chosen else None, since=since, until=until)
    counts = store.read(ops.pattern_counts, scope)
    drafts: dict[str, list[_Draft]] = {kind: [] for kind in _FAILING}
    short: dict[str, list[tuple[str, int]]] = {kind: [] for kind in _FAILING}   # (what, traces) under the minimum
    for doc in store.read(ops.document_figures, scope):
        figures = asdict(doc)
        if 0 < doc.contradicting < min_traces:
            short["source"].append((doc.document, doc.contradicting))
        if doc.grounding == 0 and 0 < doc.retrieved_failing < min_traces:
            short["idle_source"].append((doc.document, doc.retrieved_failing))
        if doc.contradicting >= min_traces:
            drafts["source"].append(_Draft(Group(
                "source", doc.document, doc.contradicting, fix=fixes.source_fix(doc.document), figures=figures,
                detail=f"contradicts {doc.contradictions} claim(s) in {doc.contradicting} failing trace(s); retrieved "
                       f"by {doc.retrieved} trace(s) ({doc.retrieved_failing} failing), grounds a claim in "
                       f"{doc.grounding}"), (-doc.contradicting, -doc.contradictions, doc.document)))
        if doc.grounding == 0 and doc.retrieved_failing >= min_traces:
            drafts["idle_source"].append(_Draft(Group(
                "idle_source", doc.document, doc.retrieved_failing, fix=fixes.idle_source_fix(doc.document),
                figures=figures, detail=f"retrieved by {doc.retrieved} trace(s) ({doc.retrieved_failing} failing); "
                "grounds no claim in any of them"), (-doc.retrieved_failing, -doc.retrieved, doc.document)))
    missed, judged = store.read(ops.question_rows, scope, sample=SAMPLE)
    topics = cluster(missed, judged, min_traces=min_traces)
    alone = len({trace_id for trace_id, _, _ in missed}) - sum(len(topic.trace_ids) for topic in topics)
    for topic in topics:
        label = " · ".join(topic.words)
        rate = "" if topic.miss_rate is None or topic.base_rate is None else (
            f"; retrieval misses {topic.miss_rate:.0%} of recent sub-questions with '{topic.words[0]}', "
            f"{topic.base_rate:.0%} of all")
        drafts["topic"].append(_Draft(Group(
            "topic", label, len(topic.trace_ids), fix=fixes.topic_fix(topic.words), terms=topic.words,
            figures={"words": list(topic.words), "sub_questions": topic.n_sub_questions, "miss_rate": topic.miss_rate,
                     "base_rate": topic.base_rate},
            detail=f"{topic.n_sub_questions} missed sub-question(s) in {len(topic.trace_ids)} failing trace(s){rate}"),
            (-len(topic.trace_ids), -topic.n_sub_questions, label),
            [(t, ("question", topic.sub_questions[t])) for t in topic.trace_ids]))
    drafts["claim"], short["claim"] = _claim_drafts(store, scope, min_traces)
    pair, note = _pair(store, chosen, base)
    if pair is not None:
        found = transitions(store, pair[0], pair[1], kb=kb)
        note = found.note
        for move in found.moves:
            if len(move.rows) < min_traces:
                short["transition"].append((move.key, len(move.rows)))
                continue
            suggestion = store.read(ops.common_suggestions, [r.id for r in move.rows[:500]])
            drafts["transition"].append(_Draft(Group(
                "transition", move.key, len(move.rows), detail=move.detail, figures=move.figures,
                fix=fixes.transition_fix(pair[0].label, pair[1].label, suggestion[0][:2] if suggestion else None)),
                (-len(move.rows), move.severity, move.key), [(r.id, r.reason) for r in move.rows]))
    below = {kind: _below(kind, found) for kind, found in short.items()}
    if alone:
        below["topic"] = f"{alone} failing trace(s) with a missed sub-question share no word that makes a topic"
    sections = _finish(store, scope, drafts, limit=limit, examples=examples, notes={"transition": note},
                       below=below, min_traces=min_traces)
    sections += reference_sections(store, scope, limit=limit, examples=examples, min_traces=min_traces, sample=SAMPLE)
    notes = []
    if counts.get("judged_since"):
        notes.append(f"{counts['judged_since']} trace(s) of this run were judged again by a later run; their latest "
                     "result is the one grouped")
    return Patterns(scope={"knowledge_base": kb, "run": chosen.label if chosen else None, "since": since,
                           "until": until, "against": pair[0].label if pair else None,
                           "compared": pair[1].label if pair else None},
                    traces=counts["traces"], failing=counts["failing"], sections=sections, notes=notes)


_SHORT = {"source": "document(s) contradict claims in fewer", "claim": "kind(s) of fact come out ungrounded in fewer",
          "idle_source": "document(s) that ground no claim were retrieved by fewer",
          "transition": "move(s) into failing cells have fewer"}
_LISTED = 3


def _below(kind: str, short: list[tuple[str, int]]) -> str | None:
    """What fell under `min_traces` in a section, in words: how many, and the first few with their counts."""
    if not short or kind not in _SHORT:
        return None
    ranked = sorted(short, key=lambda item: (-item[1], item[0]))
    listed = ", ".join(f"{what} ({n})" for what, n in ranked[:_LISTED])
    more = f" and {len(ranked) - _LISTED} more" if len(ranked) > _LISTED else ""
    return f"{len(ranked)} {_SHORT[kind]}: {listed}{more}"


def _claim_drafts(store: Store, scope: PatternScope, min_traces: int) -> tuple[list[_Draft], list[tuple[str, int]]]:
    traces: dict[str, dict[int, set[str]]] = {kind: {} for kind in KINDS}
    relations: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    for trace_id, claim_id, relation, text in store.read(ops.bad_claims, scope):
        for kind in claim_kinds(text):
            traces[kind].setdefault(trace_id, set()).add(claim_id)
            relations[kind][relation] += 1
    drafts, short = [], []
    for order, kind in enumerate(KINDS):
        found = traces[kind]
        if len(found) < min_traces:
            if found:
                short.append((_PLURAL[kind], len(found)))
            continue
        said = ", ".join(f"{n} {relation}" for relation, n in sorted(relations[kind].items(), key=lambda kv: -kv[1]))
        n_claims = sum(relations[kind].values())
        drafts.append(_Draft(Group(
            "claim", _PLURAL[kind], len(found), fix=fixes.claim_fix(kind),
            figures={"kind": kind, "claims": n_claims, **relations[kind]},
            detail=f"{n_claims} ungrounded claim(s) state {_PLURAL[kind]}: {said}"),
            (-len(found), -n_claims, order), [(t, ("claims", found[t])) for t in sorted(found, reverse=True)]))
    return drafts, short


def _pair(store: Store, chosen: Any, base: Any) -> tuple[tuple[Any, Any] | None, str]:
    """(earlier run, later run) whose transitions are shown, or None and why not."""
    if base is not None:
        later = chosen or next(iter(store.read(ops.list_runs, limit=1)), None)
        if later is None or later.id == base.id:
            return None, f"{base.label} is compared with itself: name a later run with --run"
        return (base, later), ""
    newest = store.read(ops.list_runs, limit=1000)
    if chosen is None:
        return ((newest[1], newest[0]), "") if len(newest) >= 2 else (None, "needs two runs (see `veralith runs`)")
    older = next((r for r in newest if r.id < chosen.id), None)
    if older is None:
        return None, f"no run before {chosen.label} to compare with (--against names one)"
    return (older, chosen), ""


def _finish(store: Store, scope: PatternScope, drafts: dict[str, list[_Draft]], *, limit: int,
            examples: int, notes: Mapping[str, str], below: Mapping[str, str | None], min_traces: int) -> list[Section]:
    """The sections, each cut to `limit` groups, with examples read for the groups kept."""
    shown = {kind: sorted(found, key=lambda d: d.rank)[:limit] for kind, found in drafts.items()}
    for kind, contradicting in (("source", True), ("idle_source", False)):
        refs = store.read(ops.document_examples, scope, [d.group.key for d in shown[kind]], contradicting=contradicting,
                                       per_document=examples)
        for d in shown[kind]:
            d.refs = [(trace_id, ("chunk", chunk) if contradicting else None) for trace_id, chunk in refs[d.group.key]]
    wanted = {t for found in shown.values() for d in found for t, focus in d.refs[:examples]
              if not isinstance(focus, str)}
    details = store.read(ops.failure_details, wanted) if wanted else {}
    sections = []
    for kind in _FAILING:
        groups = []
        for d in shown[kind]:
            said = [Example(t, focus if isinstance(focus, str) else _reason(details.get(t), focus))
                    for t, focus in d.refs[:examples]]
            groups.append(replace(d.group, examples=said))
        sections.append(Section(kind, _TITLES[kind], _RULES[kind], groups, len(drafts[kind]), notes.get(kind) or None,
                                min_traces=min_traces, below=below.get(kind)))
    return sections


def _reason(detail: Mapping[str, Any] | None, focus: Any) -> str:
    """The trace's one-line reason, about the group's own cause where the trace shows it."""
    if detail is None:
        return "no stored detail explains it"
    narrowed = dict(detail)
    if focus is not None:
        what, value = focus
        if what == "chunk":
            narrowed["bad_claims"] = [c for c in detail["bad_claims"] if value in c["contradicting_chunk_ids"]]
        elif what == "claims":
            narrowed["bad_claims"] = [c for c in detail["bad_claims"] if c["id"] in value]
        elif what == "question":
            narrowed["bad_claims"] = []
            narrowed["uncovered"] = [q for q in detail["uncovered"] if q["id"] == value]
            if not narrowed["uncovered"]:
                return failure_reason(detail)
        if what in ("chunk", "claims") and not narrowed["bad_claims"]:
            return failure_reason(detail)
    return failure_reason(narrowed)
