"""Local sufficiency: could a careful reader answer each sub-question from the chunks alone?

Only the query and the chunks are read, never the response. For each sub-question the judge takes
the two chunks that cover the question's content terms best, finds the sentence that covers them
best, and adds the one other sentence of the same chunk that covers most of what is still missing
(the "window"). Every choice depends on what sentences say, never on where they stand (ties go to
the partner holding the asked-for answer type, then to the text itself), so shuffling a chunk's
sentences changes nothing.

A logistic model (FEATURES, one line of reasoning each) turns the signals into the probability
that the chunks are insufficient: how much of the question the window covers, whether it states
the question's constraints and offers the asked-for answer type, whether the chunks mention the
question's names, and its other words, at all, whether some sentence is a statement *about* the question's subject, and
whether the query asks anything definite. One rule stands beside it: a question that asks for a
date or a number is insufficient when no sentence that mentions its words states any date or
number; that follows from the question itself, whatever the other signals say.

The model is the shipped one (coefficients.json, "sufficiency") when it was fitted on exactly
FEATURES. Each verdict's confidence is the probability that it is right, from the model's
p(insufficient) calibrated on out-of-fold scores: 1 - p for "yes", p for "no" (1.0 for an empty
context).
"""

from __future__ import annotations

from veralith.llm.local.answer_types import (
    asked_for,
    constraints_of,
    has_answer,
    has_constraint,
    kind_label,
    subject_norms,
)
from veralith.llm.local.evidence import ChunkIndex, Term, coverage, piece_of, sentences_of, terms_of
from veralith.llm.local.lexicon import WH_WORDS
from veralith.llm.local.model import Logistic, load
from veralith.llm.local.wordlists import words
from veralith.llm.tasks import Evidence, SubQuestionIn, SufficiencyInput, SufficiencyItem, SufficiencyOutput
from veralith.llm.text import clip_quote

__all__ = ["FEATURES", "active_model", "question_features", "sufficiency"]

FEATURES = [
    "cov_win",    # weighted share of the question's terms in the window: an answer states what was asked about
    "cons_miss",  # share of the question's constraints (a negation, first/last, before/after, a year) the window lacks
    "type_gap",   # asked-for answer type (name, date, number, place, definition) absent from the window: 1; only
                  # in its second sentence: 0.5; present, or the question names no type: 0
    "name_miss",  # share of the question's names and numbers that no chunk contains: the chunks are about another one
    "word_miss",  # weighted share of the question's other content words that no chunk contains: what it asks about
                  # ("a bonus", "a half-load programme") is never mentioned
    "subject",    # best share of a sentence's grammatical subject made of question words: a statement *about* it
    "asks",       # the query is worded as a question or request (wh-word, auxiliary or "describe..." first, "?"),
                  # not a bag of keywords whose ask a reader must guess
]

_QUOTE_MAX = 300
_QUOTE_MIN = 20      # a verbatim prefix shorter than this is no quote; the chunk's start is quoted instead
_LISTED = 8          # facts listed as required or missing
_SECOND_CHUNK = 0.05  # coverage a second chunk must add to be cited as supporting too
_AUX_FIRST = words("leading_auxiliaries")
_REQUESTS = words("request_verbs")
# Kinds whose absence a word's shape proves: no digits, month or time word (nor a span of time in words,
# answer_types) means no date, number or length of time.
_PROVABLE = ("date", "number", "duration", "frequency", "money")


def active_model() -> Logistic:
    """The shipped sufficiency model (coefficients.json, written by benchmarks/train_local.py).

    Fitted on exactly FEATURES; a mismatch means the features changed without a retrain, which the
    tests catch, so it fails loudly here rather than scoring with weights meant for other features.
    """
    model = load()["sufficiency"]
    if model.features != FEATURES:
        raise RuntimeError(f"the shipped sufficiency model was fitted on {model.features}, not {FEATURES}; "
                           "run benchmarks/train_local.py")
    return model


def _subject_share(sentence: str, norms: frozenset[str]) -> float:
    subject = subject_norms(sentence)
    return sum(1 for n in subject if n in norms) / len(subject) if subject else 0.0


def _asks(question: str) -> bool:
    """Worded as a question or a request: a wh-word ("what's" too), an auxiliary or a request verb first, or "?"."""
    words = [w.strip("?,.;:!\"'()").replace("’", "'").split("'")[0] for w in question.lower().split()]
    return bool(words) and (words[0] in _AUX_FIRST or words[0] in _REQUESTS or question.rstrip().endswith("?")
                            or any(w in WH_WORDS for w in words))


class _Reading:
    """What one sub-question found in the chunks: best sentence, window, chunks, and the features."""

    __slots__ = ("chunk", "chunks", "kind", "missing_cons", "missing_names", "second", "sentence", "terms",
                 "type_absent", "type_near", "type_where", "values")

    def __init__(self, question: str, index: ChunkIndex) -> None:
        kind, naming = asked_for(question)
        # The words that name the answer's type ("how long", "what time") are not content to find.
        terms = self.terms = [t for t in terms_of(question) if t.norm not in naming] or terms_of(question)
        self.kind = kind
        self.chunks = index.ranked(terms, limit=2)
        self.chunk, self.sentence, self.second = -1, "", ""
        self.type_where, self.type_absent, self.type_near = "none", False, False
        self.missing_cons: list[str] = []
        names = [t for t in terms if t.is_capital or t.is_number]
        self.missing_names = [t.text for t in names if not any(p.has(t) for p in index.pieces)]
        words = [t for t in terms if not (t.is_capital or t.is_number)]
        word_weight = sum(t.weight for t in words)
        absent_words = sum(t.weight for t in words if not any(p.has(t) for p in index.pieces))
        values = self.values = {name: 0.0 for name in FEATURES}
        values.update(type_gap=float(kind is not None), asks=float(_asks(question)),
                      name_miss=len(self.missing_names) / len(names) if names else 0.0,
                      word_miss=absent_words / word_weight if word_weight else 0.0)
        if not self.chunks:
            values["cons_miss"] = 1.0 if constraints_of(question) else 0.0
            return
        norms = frozenset(t.norm for t in terms)
        sents = [(c, s, piece_of(s)) for c in self.chunks for s in sentences_of(index.texts[c])]
        cov = {s: coverage(terms, [p]) for _, s, p in sents}
        c, s, p = max(sents, key=lambda x: (cov[x[1]], x[1]))
        self.chunk, self.sentence = c, s
        win = [p]
        # The partner must mention the question too; ties go to the one holding the answer type.
        partners = [(s2, p2) for c2, s2, p2 in sents if c2 == c and s2 != s and cov[s2] > 0]
        if partners:
            s2, p2 = max(partners, key=lambda x: (coverage(terms, [p, x[1]]),
                                                  kind is not None and has_answer(kind, x[0], norms), x[0]))
            if coverage(terms, [p, p2]) > cov[s]:
                self.second = s2
                win.append(p2)
        if kind is not None:
            if has_answer(kind, s, norms):
                self.type_where = "sentence"
            elif self.second and has_answer(kind, self.second, norms):
                self.type_where = "window"
            else:
                self.type_where = "absent"
            # Near the question's words: a sentence that mentions them, or the one right after it in its
            # chunk, which often gives the value without repeating the subject ("Absence policy, Acme.
            # Staff must call by 9:30.").
            near = [s3 for k, (c3, s3, _) in enumerate(sents)
                    if cov[s3] > 0 or (k > 0 and sents[k - 1][0] == c3 and cov[sents[k - 1][1]] > 0)]
            self.type_near = any(has_answer(kind, s3, norms) for s3 in near)
            self.type_absent = kind in _PROVABLE and not self.type_near
        window = [s] + ([self.second] if self.second else [])
        cons = constraints_of(question)
        self.missing_cons = [k for k in cons if not any(has_constraint(k, w) for w in window)]
        values.update(
            cov_win=coverage(terms, win),
            cons_miss=len(self.missing_cons) / len(cons) if cons else 0.0,
            type_gap={"none": 0.0, "sentence": 0.0, "window": 0.5, "absent": 1.0}[self.type_where],
            # A sentence without any question word has no question word in its subject either.
            subject=max((_subject_share(s3, norms) for _, s3, _ in sents if cov[s3] > 0), default=0.0),
        )


def question_features(question: str, index: ChunkIndex) -> tuple[dict[str, float], list[int], str, list[Term]]:
    """(feature values by FEATURES name, best chunk indices, best window text, the question's terms)."""
    r = _Reading(question, index)
    window = r.sentence + (" " + r.second if r.second else "")
    # Not a model input: the date/number rule's verdict, so a trainer can score the judge's full decision.
    values = dict(r.values, rule_insufficient=float(r.type_absent))
    return values, r.chunks, window, r.terms


def _quote(chunk_text: str, sentence: str) -> str:
    """`sentence` as a verbatim (whitespace-collapsed) substring of the chunk, at most _QUOTE_MAX chars."""
    flat = " ".join(chunk_text.split())
    quote = " ".join(sentence.split())[:_QUOTE_MAX]
    if quote not in flat:
        # Segmentation put a space between glued sentences ("hits.Bryan"): keep the longest prefix
        # that is verbatim (a prefix of a found prefix is found, so bisect on its length).
        lo, hi = 0, len(quote)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if quote[:mid] in flat else (lo, mid - 1)
        quote = quote[:lo] if lo >= _QUOTE_MIN else flat[:_QUOTE_MAX]
    return clip_quote(quote.rstrip())


def _listing(words: list[str], limit: int = 3) -> str:
    quoted = [f"'{w}'" for w in words[:limit]]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _reasons(r: _Reading, cid: str, sufficient: bool) -> tuple[str, list[str]]:
    """(a reasoning sentence a person would write, the facts the chunks lack)."""
    found = [t.text for t in r.terms if piece_of(r.sentence).has(t) or (r.second and piece_of(r.second).has(t))]
    lacking = [t.text for t in sorted(r.terms, key=lambda t: -t.weight) if t.text not in found]
    if sufficient:
        about = _listing(found) if found else "the question's words"
        if r.kind is not None and r.type_where in ("sentence", "window"):
            return f"Sufficient: chunk {cid} states {kind_label(r.kind)} next to {about}.", []
        return f"Sufficient: chunk {cid} speaks directly to {about}.", []
    if r.chunk < 0:
        words = [t.text for t in r.terms]
        if not words:
            return "Insufficient: the question has no content words to look for in the chunks.", []
        return f"Insufficient: no chunk mentions {_listing(words)}.", words[:_LISTED]
    if r.type_absent and r.kind is not None:
        about = _listing(found) if found else "the question's subject"
        return (f"Insufficient: no chunk gives {kind_label(r.kind)} anywhere near {about}.",
                [f"{kind_label(r.kind)} for {about}"])
    if r.missing_names:
        return (f"Insufficient: no chunk names {_listing(r.missing_names)}; chunk {cid} is about something else.",
                r.missing_names[:_LISTED])
    if r.kind is not None and r.type_where == "absent" and not r.type_near:
        # Said of the chunks only when no sentence near the question's words offers the type either.
        about = _listing(found) if found else "the question's subject"
        what = f"{kind_label(r.kind)} for {about}"
        return f"Insufficient: no chunk gives {what}.", [what] + lacking[:_LISTED - 1]
    if r.missing_cons:
        shown = ["a negation" if k == "not" else k for k in r.missing_cons]
        return (f"Insufficient: chunk {cid} is on topic but never states {_listing(shown)} as the question asks.",
                [f"'{k}'" for k in shown][:_LISTED])
    if lacking:
        head = f"chunk {cid} mentions {_listing(found)} but" if found else f"chunk {cid}"
        return f"Insufficient: {head} says nothing about {_listing(lacking)}.", lacking[:_LISTED]
    return (f"Insufficient: chunk {cid} uses the question's words, but no sentence there reads as an answer to it.",
            ["a sentence that answers the question"])


def judge_question(sq: SubQuestionIn, index: ChunkIndex, model: Logistic) -> tuple[SufficiencyItem, float]:
    """One sub-question's item and the confidence (in [0, 1]) that its verdict is right."""
    if all(not text or text.isspace() for text in index.texts):  # (no strip(): chunks can be long)
        required = [t.text for t in terms_of(sq.text)][:_LISTED]
        return SufficiencyItem(sub_question_id=sq.id, evidence=[], missing_facts=required or [sq.text],
                               reasoning="Insufficient: the context is empty, so nothing can answer this.",
                               sufficient="no", supporting_chunk_ids=[]), 1.0
    r = _Reading(sq.text, index)
    required = [t.text for t in r.terms][:_LISTED]
    p_insufficient = model.probability(r.values)
    sufficient = r.chunk >= 0 and not r.type_absent and p_insufficient < model.threshold
    p_insufficient = model.calibrated(p_insufficient)   # as a confidence: calibrated out of fold
    cid = index.ids[r.chunk] if r.chunk >= 0 else ""
    evidence = []
    if r.chunk >= 0:
        text = index.texts[r.chunk]
        evidence = [Evidence(chunk_id=cid, quote=_quote(text, r.sentence))]
        if r.second:
            evidence.append(Evidence(chunk_id=cid, quote=_quote(text, r.second)))
    reasoning, missing = _reasons(r, cid, sufficient)
    if sufficient:
        ids = [cid]
        other = [i for i in r.chunks if i != r.chunk]
        if other and coverage(r.terms, [index.pieces[r.chunk], index.pieces[other[0]]]) > \
                coverage(r.terms, [index.pieces[r.chunk]]) + _SECOND_CHUNK:
            ids.append(index.ids[other[0]])  # the second chunk supplies terms the first lacks
        item = SufficiencyItem(sub_question_id=sq.id, evidence=evidence, missing_facts=[],
                               reasoning=reasoning, sufficient="yes", supporting_chunk_ids=ids)
        return item, 1.0 - p_insufficient
    # A "no" quotes nothing (the contract asks evidence of a "yes" only): what is missing says it.
    item = SufficiencyItem(sub_question_id=sq.id, evidence=[], missing_facts=missing or required or [sq.text],
                           reasoning=reasoning, sufficient="no", supporting_chunk_ids=[])
    return item, p_insufficient


def sufficiency(payload: SufficiencyInput) -> tuple[SufficiencyOutput, dict[str, float]]:
    """The items (one per sub-question) and each verdict's confidence by sub-question id."""
    index = ChunkIndex([c.id for c in payload.chunks], [c.text for c in payload.chunks])
    model = active_model()
    items, confidence = [], {}
    for sq in payload.sub_questions:
        item, conf = judge_question(sq, index, model)
        items.append(item)
        confidence[sq.id] = conf
    return SufficiencyOutput(items=items), confidence
