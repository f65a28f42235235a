"""One vocabulary per trace: on the trace page (and in `veralith inspect`) the headline, the cell, the
sub-question rows, the Completeness section and the fix agree with the cell and with each other.

The golden traces (tests/golden) are judged through the oracle client of test_golden, one trace for
every combination of cell, gate reason, claim relations and sub-question coverage they hold, and each
one's page is read back as a person reads it. What is true of each trace is worked out here from the
oracle alone (which sub-question has a grounded answer, which claim is not grounded, which answers
nothing asked), never from the product's words; then every sentence on the page is held to it: a
phrase that says "not answered" needs a sub-question that has no answer at all, "invents" needs a
claim the context does not support or contradicts, "every sub-question has a grounded answer" needs
a complete row, and so on.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from test_golden import HELD_OUT, TRACES, oracle_client

pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")

from starlette.testclient import TestClient  # noqa: E402

# The labels a sub-question's "answered" column may carry, per coverage (the spec, restated).
LABEL = {"answered": "answered", "partial": "answered in part", "ungrounded_answer": "no grounded answer",
         "declined": "declined", "unanswered": "not answered"}

# A phrase (regex, case-insensitive) and what must be true of the trace for it to be said.
RULES = [
    (r"\bunanswered\b|\bnot answered\b|\bleft (some|part)\b|\bleaves? (some|part) of (it|the query) out\b"
     r"|\bleft .* out\b", "a_part_has_no_answer"),
    (r"\binvent|\bfabricat|from memory|filled the gap", "a_claim_is_made_up"),
    (r"contradict", "a_claim_is_contradicted"),
    (r"\bnot grounded\b|\bnot supported\b|does not support|does not ground|\bunsupported\b", "a_claim_is_ungrounded"),
    (r"no grounded answer|without a grounded answer", "a_part_is_uncovered"),
    (r"nothing that was asked|nobody asked|did not ask|\bunrequested\b|adds material", "a_claim_is_extra"),
    (r"every part of the query is answered|every sub-question has a grounded answer|response answers the query"
     r"|query is answered from", "every_part_is_covered"),
    (r"every claim is grounded", "every_claim_is_grounded"),
    (r"\bdeclin", "something_is_declined"),
]


def truth(trace: dict) -> dict[str, object]:
    """What holds of the trace, from its oracle (the semantics of docs/concepts.md, restated)."""
    o = trace["oracle"]
    relations = o["faithfulness"]
    grounded = [r == "supported" for r in relations]
    declined = {k for links in o["gap_links"] for k in links}
    coverage = {}
    for k in range(1, len(o["sub_questions"]) + 1):
        answering = [i for i, (role, sqs) in enumerate(o["roles"]) if role == "answers" and k in sqs]
        status = o["statuses"][k - 1]
        if answering and not any(grounded[i] for i in answering):
            coverage[f"q{k}"] = "ungrounded_answer"
        elif answering and status == "answered":
            coverage[f"q{k}"] = "answered"
        elif answering and status == "partial":
            coverage[f"q{k}"] = "partial"
        else:
            coverage[f"q{k}"] = "declined" if k in declined else "unanswered"
    how = set(coverage.values())
    return {
        "coverage": coverage,
        "a_part_has_no_answer": bool(how & {"unanswered", "partial", "declined"}),
        "a_part_is_uncovered": how != {"answered"},
        "every_part_is_covered": how == {"answered"},
        # A gap statement declines a sub-question, or a detail of one that is answered all the same.
        "something_is_declined": "declined" in how or any(o["gap_links"]),
        "a_claim_is_made_up": bool({"unsupported", "contradicted"} & set(relations)),
        "a_claim_is_contradicted": bool({"contradicted", "conflicting"} & set(relations)),
        "a_claim_is_ungrounded": not all(grounded),
        "every_claim_is_grounded": all(grounded),
        "a_claim_is_extra": any(role == "extra" for role, _ in o["roles"]),
        "bad_claims": [f"k{i + 1}" for i, g in enumerate(grounded) if not g],
    }


def combinations() -> list[dict]:
    """One golden trace per (cell, gate reason, relations, coverage) combination."""
    seen, out = set(), []
    for trace in TRACES + HELD_OUT:
        t = truth(trace)
        key = (trace["expected"]["cell"], trace["expected"]["reason"], tuple(sorted(set(trace["oracle"]["faithfulness"]))),
               tuple(sorted(set(t["coverage"].values()))))  # type: ignore[union-attr]
        if key not in seen:
            seen.add(key)
            out.append(trace)
    return out


COMBINATIONS = combinations()


class _Texts(HTMLParser):
    """The text of every element carrying one of `wanted` classes, per class, in document order."""

    VOID = {"br", "img", "input", "meta", "link", "hr", "col", "source", "wbr"}

    def __init__(self, wanted: set[str]) -> None:
        super().__init__()
        self.wanted, self.stack, self.found = wanted, [], {w: [] for w in wanted}

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = set((dict(attrs).get("class") or "").split()) & self.wanted
        self.stack.append((tag, classes, []))

    def handle_endtag(self, tag):
        while self.stack:
            open_tag, classes, text = self.stack.pop()
            joined = "".join(text)
            if self.stack:
                self.stack[-1][2].append(joined)
            for c in classes:
                self.found[c].append(" ".join(joined.split()))
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2].append(data)


def texts(html: str, *wanted: str) -> dict[str, list[str]]:
    parser = _Texts(set(wanted))
    parser.feed(html)
    return parser.found


def disagreements(said: dict[str, list[str]], t: dict, cell: str) -> list[str]:
    """Every way the page's sentences disagree with the truth `t` and the cell."""
    out = []
    checked = {name: said[name] for name in ("summary", "comp-line", "suggestion", "fix-summary", "q-why")}
    for name, sentences in checked.items():
        for sentence in sentences:
            for pattern, fact in RULES:
                if re.search(pattern, sentence, re.IGNORECASE) and not t[fact]:
                    out.append(f"{name} says {pattern!r} but not {fact}: {sentence!r}")
    labels = said["coverage"]
    want = [LABEL[c] for c in t["coverage"].values()]  # type: ignore[union-attr]
    if labels != want:
        out.append(f"sub-question labels {labels} != {want}")
    for q, label in zip(t["coverage"], want, strict=True):  # type: ignore[call-overload]
        if not any(line.startswith(f"{q}: {label} ") for line in said["comp-line"]):
            out.append(f"the Completeness section has no line '{q}: {label} …': {said['comp-line']}")
    badge = said["badge"][0] if said["badge"] else ""
    if badge != cell:
        out.append(f"cell badge {badge!r} != {cell!r}")
    return out


def headline_disagreements(headline: str, t: dict, cell: str, reason: str) -> list[str]:
    """The headline must say the cell's two halves when the gate's own reason does not say it all."""
    if reason != cell:   # a pass, a refusal judged by what it declines, nothing to assess: the policy's sentence
        return []
    row, _, column = cell.partition("_")
    out = []
    if row == "incomplete" and not re.search(r"no grounded answer|not answered|in part|declined", headline):
        out.append(f"an incomplete trace's headline names no uncovered sub-question: {headline!r}")
    if row == "extra" and "nothing that was asked" not in headline:
        out.append(f"an extra trace's headline names no extra claim: {headline!r}")
    if column == "ungrounded" and not any(k in headline for k in t["bad_claims"]):
        out.append(f"an ungrounded trace's headline names none of {t['bad_claims']}: {headline!r}")
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, str]:
    """Each combination's trace page, by golden id."""
    from veralith.config import settings
    from veralith.pipeline.evaluate import evaluate
    from veralith.web import create_app

    db = tmp_path_factory.mktemp("vocabulary") / "golden.db"
    ids = {}
    with settings.override(db_url=f"sqlite:///{db}"):
        for trace in COMBINATIONS:
            result = evaluate(trace["query"], trace["context"], trace["response"], client=oracle_client(trace),
                              metadata=trace.get("metadata"))
            ids[trace["id"]] = result.trace_id
    client = TestClient(create_app(db), base_url="http://127.0.0.1:8765")
    return {gid: client.get(f"/traces/{tid}").text for gid, tid in ids.items()}


def test_the_golden_traces_cover_every_cell_and_relation():
    cells = {t["expected"]["cell"] for t in COMBINATIONS}
    relations = {r for t in COMBINATIONS for r in t["oracle"]["faithfulness"]}
    assert len(cells) == 6 and relations == {"supported", "unsupported", "contradicted", "conflicting", "stale"}
    assert len(COMBINATIONS) >= 25


@pytest.mark.parametrize("trace", COMBINATIONS, ids=[t["id"] for t in COMBINATIONS])
def test_every_sentence_on_a_trace_page_agrees_with_its_cell(trace, pages):
    html = pages[trace["id"]]
    said = texts(html, "summary", "coverage", "q-why", "comp-line", "suggestion", "fix-summary", "badge")
    t = truth(trace)
    cell, reason = trace["expected"]["cell"], trace["expected"]["reason"]
    problems = disagreements(said, t, cell) + headline_disagreements(
        said["summary"][0] if said["summary"] else "", t, cell, reason)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("trace", COMBINATIONS, ids=[t["id"] for t in COMBINATIONS])
def test_inspect_says_what_the_page_says(trace):
    """`veralith inspect` shows the same headline, sub-question labels, Completeness lines and fix."""
    import io

    from rich.console import Console

    from veralith.cli.render import result_view
    from veralith.pipeline.describe import describe
    from veralith.pipeline.evaluate import evaluate

    result = evaluate(trace["query"], trace["context"], trace["response"], persist=False,
                      client=oracle_client(trace), metadata=trace.get("metadata"))
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(result_view(result))
    shown = " ".join(console.export_text().split())
    said = describe(result)
    for sentence in [said.headline, *said.completeness, said.fix.title, said.fix.summary,
                     *(q.label for q in said.questions), *(f"↳ {q.why}" for q in said.questions)]:
        assert " ".join(sentence.split()) in shown, sentence
    assert [q.label for q in said.questions] == [LABEL[c] for c in truth(trace)["coverage"].values()]
