"""What the offline judge takes on: English text of bounded size. Anything else it refuses.

A refusal is a JudgeCallError whose kind names the reason (`input_too_large`,
`unsupported_language`); the pipeline records it as the judge's error, and the trace's status is
`indeterminate` with that reason (veralith.policy), never a verdict made by word lists that do not
apply.

* Size: the characters one call reads (the query with the response, or the query with the context
  and the items judged) must not exceed `settings.local_max_chars`. The judges run in time about
  linear in their input, so the limit caps what one trace may cost.
* Language: a text is taken as English unless it shows another language: most of its letters are
  outside the Latin script, or it holds more function words of French, Spanish, German, Italian,
  Portuguese or Dutch than of English (words/foreign_markers.txt, words/english_markers.txt). The
  context is judged apart from the question and the response, so chunks in another language are
  refused even under an English question. A table or a list of names, with few function words of
  any language, stays English.
"""

from __future__ import annotations

import re
from functools import lru_cache

from pydantic import BaseModel

from veralith.config import settings
from veralith.errors import JudgeCallError
from veralith.llm.local.lexicon import fold
from veralith.llm.local.wordlists import words
from veralith.llm.tasks import ClaimsInput, CompletenessInput, FaithfulnessInput, QuestionsInput, SufficiencyInput

__all__ = ["check", "texts_read"]

_ENGLISH = words("english_markers")
_FOREIGN = words("foreign_markers")
_FOREIGN_MIN = 3         # function words of another language needed (and more than English ones) to be foreign
_SCRIPT_MIN = 5          # letters needed before the script of a text is judged
_SAMPLE = 600            # characters of each text read for its language (about a hundred words)
_WORD = re.compile(r"[^\W\d_]+")
# A capitalised word that opens the text or follows a sentence's end, an opening quote or bracket.
_INITIAL = re.compile(r"(?:^|[.!?:\"“(¿¡]\s*)([^\W\d_][^\W\d_A-Z]*)(?![^\W\d_])")
_BEYOND_LATIN = re.compile(r"[^\W\d_\x00-\u024f]")   # a letter beyond Latin Extended-B: another script


def texts_read(payload: BaseModel) -> tuple[list[str], list[list[str]]]:
    """(the texts one call of the offline judge reads, the groups of them whose language it judges).

    The language of the query with the response is judged by the decomposition calls, and the
    context's, apart from it, by the judges that read it; sub-questions, claims and gap statements
    restate the query and the response, so they count only for size. The response is read once,
    not again as its sentences."""
    if isinstance(payload, QuestionsInput):
        return [payload.query], [[payload.query]]
    if isinstance(payload, ClaimsInput):
        return [payload.query, payload.response], [[payload.query, payload.response]]
    if isinstance(payload, SufficiencyInput):
        chunks = [c.text for c in payload.chunks]
        return [payload.query, *(q.text for q in payload.sub_questions), *chunks], [chunks]
    if isinstance(payload, FaithfulnessInput):
        chunks = [c.text for c in payload.chunks]
        return [payload.query, *(c.text for c in payload.claims), *chunks], [chunks]
    if isinstance(payload, CompletenessInput):
        return [payload.query, *(q.text for q in payload.sub_questions), *(c.text for c in payload.claims),
                *(g.text for g in payload.gaps)], []
    return [], []


@lru_cache(maxsize=4096)
def _counts(text: str) -> tuple[int, int, int, int]:
    """(English function words, other languages' function words, Latin letters, other letters) in
    the first _SAMPLE characters of `text` (the start of a text shows its language)."""
    sample = fold(text[:_SAMPLE])
    words = _WORD.findall(sample)
    # A function word is written in lower case, or capitalised as a sentence's first word: "OS X",
    # "the UN" and "Le Monde" inside a sentence are names.
    plain = [w for w in words if w.islower()] + [w.lower() for w in _INITIAL.findall(sample)]
    letters = sum(map(len, words))
    other = 0 if sample.isascii() else len(_BEYOND_LATIN.findall(sample))
    return (len([w for w in plain if w in _ENGLISH]), len([w for w in plain if w in _FOREIGN]),
            letters - other, other)


@lru_cache(maxsize=1024)
def _language_problem(texts: tuple[str, ...]) -> str | None:
    """Why `texts`, read together, are not English, or None (cached: a call's batches share their chunks)."""
    english = foreign = latin = other = 0
    for text in texts:
        e, f, la, o = _counts(text)
        english, foreign, latin, other = english + e, foreign + f, latin + la, other + o
    if other >= _SCRIPT_MIN and other > latin:
        return "most of its letters are in a script other than Latin"
    if foreign >= _FOREIGN_MIN and foreign > english:
        return f"it has more function words of another language ({foreign}) than of English ({english})"
    return None


def check(task: str, payload: BaseModel) -> None:
    """Raise JudgeCallError when the offline judge should not judge `payload` (see the module docstring)."""
    texts, groups = texts_read(payload)
    size = sum(map(len, texts))
    limit = settings.local_max_chars
    if size > limit:
        raise JudgeCallError("input_too_large", f"the offline judge reads at most {limit:,} characters per call "
                             f"(VERALITH_LOCAL_MAX_CHARS) and the {task} call would read {size:,}; this trace is "
                             "not judged offline (an LLM judge, --backend openai, has its own limits)")
    for group in groups:
        why = _language_problem(tuple(group))
        if why:
            raise JudgeCallError("unsupported_language", f"the offline judge reads English only, and this text "
                                 f"does not look English: {why}; judge it with an LLM judge (--backend openai)")
