"""The offline judge's explanation of a failing trace (`--explain` on the local backend).

It writes nothing a model would: it restates, for this trace, what the verdicts it is given say,
with quotes taken verbatim from the trace so the same check as for a model's reply holds them.
- a claim that is not supported: the response sentence that says it (the one sharing the most words
  with the claim), and for a contradicted or conflicting claim the chunk sentence closest to it;
- a sub-question not answered whose chunks are not sufficient: named as the missing fact.
The change to try follows from which of those it found (retrieval or corpus for a missing fact, the
generator's prompt when the chunks held the answer). Deterministic: the same trace, the same text.
"""

from __future__ import annotations

import re

from veralith.llm.tasks import ExplainInput, ExplainOutput, ExplainQuote, JudgedClaimIn
from veralith.llm.text import sentence_spans

__all__ = ["explain"]

_WORD = re.compile(r"[^\W_]{3,}", re.UNICODE)
_MAX_WORDS = 25        # the prompt's own limit for a quote
_BAD = ("unsupported", "contradicted", "conflicting")
_LEFT_OUT = ("partial", "unanswered", "declined")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _closest(text: str, claim: str, *, least: int) -> str | None:
    """The sentence of `text` sharing the most words with `claim` (at least `least`), cut to 25 words."""
    wanted = _words(claim)
    best, score = None, least - 1
    for start, end in sentence_spans(text):
        sentence = text[start:end].strip()
        shared = len(_words(sentence) & wanted)
        if shared > score:
            best, score = sentence, shared
    if best is None:
        return None
    # A prefix of whole words is still verbatim; cutting keeps the quote as short as the prompt's.
    return " ".join(best.split()[:_MAX_WORDS])


def _claim_quotes(payload: ExplainInput, claim: JudgedClaimIn) -> list[ExplainQuote]:
    quotes = []
    said = _closest(payload.response, claim.text, least=1)
    if said:
        quotes.append(ExplainQuote(source="response", chunk_id="", quote=said))
    if claim.relation in ("contradicted", "conflicting"):
        found = [(c.id, _closest(c.text, claim.text, least=2)) for c in payload.chunks]
        found = [(i, q) for i, q in found if q]
        if found:
            chunk_id, quote = max(found, key=lambda f: len(_words(f[1] or "") & _words(claim.text)))
            quotes.append(ExplainQuote(source="chunk", chunk_id=chunk_id, quote=quote or ""))
    return quotes


def explain(payload: ExplainInput) -> ExplainOutput:
    bad = [c for c in payload.claims if c.relation in _BAD]
    missing = [q for q in payload.sub_questions if q.coverage != "answered" and q.sufficient == "no"]
    # Left out although the chunks answer it (an answer that is there but ungrounded is the claims' story).
    skipped = [q for q in payload.sub_questions if q.coverage in _LEFT_OUT and q.sufficient == "yes"]
    quotes: list[ExplainQuote] = []
    wrong: list[str] = []
    for claim in bad:
        found = _claim_quotes(payload, claim)
        quotes += [q for q in found if q not in quotes]
        against = [q.chunk_id for q in found if q.source == "chunk"]
        wrong.append(f"{claim.id} is {claim.relation}" + (
            ": no chunk states it" if claim.relation == "unsupported"
            else f": chunk {against[0]} says otherwise" if against else ": a chunk says otherwise"))
    wrong += [f"{q.id} is {q.coverage} and no chunk holds its answer" for q in missing]
    wrong += [f"{q.id} is {q.coverage} although the chunks hold its answer" for q in skipped]
    change: list[str] = []
    if missing:
        change.append("Retrieve (or index) a document that answers " + "; ".join(f'"{q.text}"' for q in missing))
    if any(c.relation != "unsupported" for c in bad):
        change.append("have the generator take figures and facts only from the chunks and surface a chunk that "
                      "disagrees instead of overriding it")
    elif bad:
        change.append("have the generator answer only from the chunks and drop the sentences quoted above")
    if skipped:
        change.append("have the generator answer every part of the question: " + ", ".join(q.id for q in skipped))
    what = "; ".join(wrong) or f"the trace is {payload.cell} ({payload.suggestion})"
    todo = "; ".join(change) or payload.suggestion
    return ExplainOutput(quotes=quotes, missing_fact="; ".join(q.text for q in missing), what_went_wrong=what + ".",
                         change_to_try=todo[:1].upper() + todo[1:] + ".")
