"""Every rule a judge's reply is checked against, each with the one prompt sentence that states it.

A rule is written once, here: `says` is the sentence the task's system prompt carries (veralith.llm.prompts
takes it from the task's contract, veralith.llm.contract), `wrong` and `fix` what a re-ask tells the model
when a reply breaks it: only what is wrong, and the fix the rule wants. The checks (veralith.llm.checks)
make problems only through these rules, so a check cannot say what no prompt told the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from veralith.llm.text import QUOTE_MAX_WORDS

__all__ = ["Problem", "Rule"]


@dataclass(frozen=True)
class Rule:
    name: str
    says: str      # the sentence of the prompt that states it
    wrong: str     # what is wrong, str.format'ed with the problem's values
    fix: str       # what the rule wants instead, formatted alike
    untimed: str = ""   # `says` for a call where time cannot matter (tasks.timed), when shorter there

    def __call__(self, owner: str | None, **values: object) -> Problem:
        """The problem of breaking this rule, owned by item `owner` (None: no single item)."""
        shown = {k: ", ".join(map(str, v)) if isinstance(v, list | tuple) else v for k, v in values.items()}
        wrong, fix = self.wrong.format(owner=owner, **shown), self.fix.format(owner=owner, **shown)
        return Problem(owner, self, f"{wrong}; {fix}")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a reply: the item it belongs to (None when none: an id nobody asked
    about), the rule it breaks, and what to tell the model."""

    owner: str | None
    rule: Rule = field(compare=False)
    text: str


# ---------------------------------------------------------------- ids, quotes and words (several tasks)

_ONE = "One item per id given; every id copied exactly as given, no others."
ITEM_MISSING = Rule("item_missing", _ONE, "no item for {label} {owner}", "give one")
ITEM_TWICE = Rule("item_twice", _ONE, "{label} {owner} is given more than once", "give it once")
ID_UNKNOWN = Rule("id_unknown", _ONE, "unknown {label} ids {ids}", "use only the ids given")
KNOWN_IDS = Rule("known_ids", _ONE,
                 "{what} of {owner} names {ids}, which do not exist", "use only the ids given")
_QUOTE = f"A quote: one verbatim span of its source, at most {QUOTE_MAX_WORDS} words, no \"...\" joins."
QUOTE_SPAN = Rule("quote_span", _QUOTE, "{what} is not one span of {source}",
                  "copy one contiguous passage of it verbatim, without \"...\"")
QUOTE_LONG = Rule("quote_long", _QUOTE, "{what} has {n} words",
                  f"quote at most {QUOTE_MAX_WORDS}: the shortest span that carries it")
HAS_WORDS = Rule("has_words", "No empty texts.", "{what} has no words",
                 "write it out, or drop the item")

# ---------------------------------------------------------------- questions and claims

_ASKED = "At least one sub-question if the query asks anything, each with its own id and words."
AT_LEAST_ONE = Rule("at_least_one", _ASKED, "the query asks something but no sub-question is listed",
                    "list what it asks")
QUESTION_IDS = Rule("question_ids", _ASKED, "{label} id {owner} is used more than once", "give each its own id")
QUESTION_WORDS = Rule("question_words", _ASKED, "{what} has no words", "write it out, or drop it")
_EXTRACTED = "Each claim, gap and remark has its own id and words, and cites its sentences by the ids given (S1, ...)."
UNIQUE_IDS = Rule("unique_ids", _EXTRACTED, "{label} id {owner} is used more than once", "give each item its own id")
CITES = Rule("cites", _EXTRACTED, "{label} {owner} cites no sentence", "give the ids of the sentences it comes from")
SENTENCE_IDS = Rule("sentence_ids", _EXTRACTED, "{what} of {owner} names {ids}, which do not exist",
                    "use only the sentence ids given")
ITEM_WORDS = Rule("item_words", _EXTRACTED, "{what} has no words", "write it out, or drop the item")
_NUMBERS = ("Numbers and units as written, never converted (\"2 years\" stays); cite every sentence a claim's "
            "numbers come from, an earlier sentence's year too.")
NUMBER_UNCITED = Rule("number_uncited", _NUMBERS,
                      "claim {owner} has {numbers} from {sentences}, which it does not cite",
                      "add {sentences} to its source_sentence_ids")
NUMBER_INVENTED = Rule("number_invented", _NUMBERS, "claim {owner} has {numbers}, which neither the response nor "
                       "the question holds", "write numbers and units as the response does, never converted or "
                       "computed")
EMPTY_RESPONSE = Rule("empty_response", "An empty response has no items.",
                      "the response is empty but the reply lists items", "list none")

# ---------------------------------------------------------------- sufficiency

_EVIDENCE = "evidence: for \"yes\", quotes of the fewest chunks that answer it; else empty."
EVIDENCE_FOR_YES = Rule("evidence_for_yes", _EVIDENCE, "{owner} is 'yes' but quotes nothing",
                        "quote what answers it from the chunks, or answer 'no'")
EVIDENCE_FOR_NO = Rule("evidence_for_no", _EVIDENCE, "{owner} is 'no' but quotes evidence",
                       "leave evidence empty for 'no' and say what is missing in missing_facts")
_MISSING = "missing_facts: for \"no\", what no chunk gives (a fact you cannot quote is missing); else empty."
MISSING_FOR_NO = Rule("missing_for_no", _MISSING, "{owner} is 'no' but names nothing missing",
                      "list the facts no chunk gives")
MISSING_FOR_YES = Rule("missing_for_yes", _MISSING, "{owner} is 'yes' but lists missing facts",
                       "'yes' means nothing is missing: answer 'no', or leave missing_facts empty")
CURRENT_SUPPORT = Rule("current_support", "A sub-question with a cutoff: \"yes\" needs a quoted chunk dated on or "
                       "after it, or undated.",
                       "{owner} asks about now (cutoff {cutoff}) but the chunks it rests on are dated before it "
                       "({dated})", "answer 'no' unless a chunk dated {cutoff} or later, or an undated one, "
                       "answers it")

# ---------------------------------------------------------------- faithfulness

_GROUNDING = "evidence: at least one quote of a chunk stating it for supported, conflicting, stale."
_GROUNDING_UNTIMED = "evidence: at least one quote of a chunk stating it for supported, conflicting."
GROUNDING_FOR_LABEL = Rule("grounding_for_label", _GROUNDING, "{owner} is '{relation}' but quotes no chunk that "
                           "states it", "quote the chunks that state it, or change the relation", _GROUNDING_UNTIMED)
_CONTRADICTING = ("contradicting_chunk_ids: chunks against it, at least one for contradicted, conflicting; for stale "
                  "the later chunks changing it; else empty.")
# Without time there is no "stale" label (schemas.UntimedItem), so its clause is not said.
_CONTRADICTING_UNTIMED = ("contradicting_chunk_ids: chunks against it, at least one for contradicted, conflicting; "
                          "else empty.")
CONTRADICTING_FOR_LABEL = Rule("contradicting_for_label", _CONTRADICTING,
                               "{owner} is '{relation}' but cites no contradicting chunk",
                               "cite the chunks against it, or change the relation", _CONTRADICTING_UNTIMED)
NO_CONTRADICTING = Rule("no_contradicting", _CONTRADICTING, "{owner} is '{relation}' but lists contradicting chunks",
                        "use 'contradicted' or 'conflicting', else leave contradicting_chunk_ids empty",
                        _CONTRADICTING_UNTIMED)
_DATES = ("dates: for stale only: each chunk it names, its date as precisely as given (YYYY, YYYY-Qn, YYYY-MM, "
          "YYYY-MM-DD), quote: the chunk's words holding it, or \"\" if from the date attribute.")
DATES_ONLY_STALE = Rule("dates_only_stale", _DATES, "{owner} is '{relation}' but lists dates",
                        "leave dates empty unless the claim is 'stale'")
DATE_ISO = Rule("date_iso", _DATES, "date {date!r} of {owner} is not written YYYY, YYYY-Qn, YYYY-MM or YYYY-MM-DD",
                "write it so (March 2022 is 2022-03)")
DATE_IN_QUOTE = Rule("date_in_quote", _DATES, "the date quote of {owner} for chunk {chunk} {says}",
                     "give the date its words hold at their precision, or quote the words that give {date}")
DATE_ATTRIBUTE = Rule("date_attribute", _DATES, "date {date} of {owner} for chunk {chunk} has no quote, and the "
                      "chunk's date attribute is {given}", "quote the chunk's words that give {date}, or give the "
                      "attribute's date")
_STALE = ("Stale: every named chunk dated; a later chunk wholly follows (2022 is not before 2022-11); without "
          "one, every grounding chunk predates the claim's cutoff or own time, and a claim with neither is never "
          "stale.")
STALE_UNDATED = Rule("stale_undated", _STALE, "{owner} is 'stale' but gives no date for {chunks}",
                     "date every chunk it names")
STALE_NOT_LATER = Rule("stale_not_later", _STALE, "{owner} is 'stale' but {newer} ({newer_date}) is not wholly after "
                       "{older} ({older_date})", "give finer dates if the chunks give them, else judge it "
                       "'conflicting'")
STALE_NOT_BEFORE_CUTOFF = Rule("stale_not_before_cutoff", _STALE, "{owner} is 'stale' but {chunk} ({date}) is not "
                               "before its cutoff {cutoff}", "a chunk dated on or after the cutoff is current: judge "
                               "the claim on what the chunks say")
STALE_NOT_BEFORE_TIME = Rule("stale_not_before_time", _STALE, "{owner} is 'stale' but {chunk} ({date}) is not before "
                             "{period}, the time the claim names", "judge the claim at that time on what the "
                             "chunks say")
STALE_TIMELESS = Rule("stale_timeless", _STALE, "{owner} is 'stale' but has no cutoff, names no time of its own, and "
                      "no later chunk changes it", "judge it on what the chunks say ('supported' when they state it)")

# ---------------------------------------------------------------- completeness

_NAMES = "sub_question_ids: what a claim answers or supports; none for extra."
EXTRA_NAMES_NONE = Rule("extra_names_none", _NAMES, "{owner} is 'extra' but lists sub-questions",
                        "an extra claim lists none; use 'answers' or 'supports' if it concerns them")
ROLE_NAMES_SOME = Rule("role_names_some", _NAMES, "{owner} is '{role}' but names no sub-question",
                       "name the sub-question it concerns, or use 'extra'")
_STATUS = ("answered or partial needs an \"answers\" claim (\"it depends\" without the asked case: answers, "
           "partial); unanswered has none.")
STATUS_NEEDS_ANSWER = Rule("status_needs_answer", _STATUS, "{owner} is '{status}' but no claim has role 'answers' "
                           "for it", "give the claim that (partly) answers it role 'answers', or make it "
                           "'unanswered'")
UNANSWERED_HAS_NONE = Rule("unanswered_has_none", _STATUS, "{owner} is 'unanswered' but {claims} answer it",
                           "use 'answered' or 'partial', or change those claims' roles")

# ---------------------------------------------------------------- explain

_SOURCES = "Quote only chunks (source \"chunk\", its id) or the response (chunk_id \"\"), no other block."
QUOTE_NOT_IN_RESPONSE = Rule("quote_not_in_response", _SOURCES, "quote {n} is not in the trace (not one span of the "
                             "response)", "quote the response's own words verbatim (a claim's text is not the "
                             "response)")
QUOTE_CHUNK_UNKNOWN = Rule("quote_chunk_unknown", _SOURCES, "quote {n} names chunk {chunk}, which is not in the "
                           "trace", "use only the chunk ids given")
QUOTE_NOT_IN_CHUNK = Rule("quote_not_in_chunk", _SOURCES, "quote {n} is not in the trace (not one span of chunk "
                          "{chunk})", "copy one contiguous passage of it verbatim, without \"...\"")
EXPLAIN_EVIDENCE = Rule("explain_evidence", "At least one quote, or the missing fact.",
                        "the reply has no quote and no missing fact",
                        "quote the chunk or response words at fault, or name the missing fact")

# The rules about time: stated only to a call where time can matter (veralith.llm.tasks.timed), and
# breakable only there (no cutoff, no "stale" and no `dates` elsewhere).
TIME = frozenset({CURRENT_SUPPORT, DATES_ONLY_STALE, DATE_ISO, DATE_IN_QUOTE, DATE_ATTRIBUTE, STALE_UNDATED,
                  STALE_NOT_LATER, STALE_NOT_BEFORE_CUTOFF, STALE_NOT_BEFORE_TIME, STALE_TIMELESS})
