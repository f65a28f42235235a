"""Each judge task's contract, written once: every field of its reply, when it is filled, the code that
reads it, and the rules (veralith.llm.rules) that check it, each with the prompt sentence that states it.

Three things are built from this table and so cannot drift apart: the "Checked" lines of each task's
system prompt (`rule_lines`, veralith.llm.prompts), the checks' problems (veralith.llm.checks makes them
only through these rules), and the contract section of docs/backends.md (`markdown`, written by
scripts/gen_docs.py). tests/test_contract.py holds it to that: every output field has a row whose
reader reads it, and every rule a check can break is in a task's table and its prompt.

`reader` names the function ("module:function") that uses the field's value; the extraction tasks'
ids are read where items are matched to what the judges say about them.
"""

from __future__ import annotations

from dataclasses import dataclass

from veralith.llm import rules as r
from veralith.llm.rules import Rule

__all__ = ["CONTRACTS", "FAST_SECTIONS", "Contract", "Field", "markdown", "rule_lines"]

_DECOMPOSE = "veralith.pipeline.decompose:decomposition_of"
_SUFF = "veralith.pipeline.judges.sufficiency:assemble"
_SUFF_WHY = "veralith.pipeline.judges.sufficiency:_reasoning"
_FAITH = "veralith.pipeline.judges.faithfulness:assemble"
_COMP = "veralith.pipeline.judges.completeness:assemble"
_EXPLAIN = "veralith.pipeline.explain:explain_steps"
_QUOTES = (r.QUOTE_SPAN, r.QUOTE_LONG)


@dataclass(frozen=True)
class Field:
    path: str                    # "items[].missing_facts": [] marks a list of items
    when: str                    # when it is filled
    reader: str                  # "module:function" that reads its value
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Contract:
    task: str
    fields: tuple[Field, ...]

    def rules(self, *, gaps: bool = True) -> list[Rule]:
        """Every rule of the task, in field order, each once; without `gaps`, only those of the fields
        other than the gaps' (a completeness call asked for none: tasks.gapless)."""
        return list(dict.fromkeys(rule for f in self.fields if gaps or not f.path.startswith("gaps[]")
                                  for rule in f.rules))


def _ids(path: str, reader: str) -> Field:
    return Field(path, "always, one per id given", reader, (r.ITEM_MISSING, r.ITEM_TWICE, r.ID_UNKNOWN))


CONTRACTS: dict[str, Contract] = {c.task: c for c in (
    Contract("questions", (
        Field("sub_questions", "always; at least one when the query asks anything", _DECOMPOSE, (r.AT_LEAST_ONE,)),
        Field("sub_questions[].id", "always", _DECOMPOSE, (r.QUESTION_IDS,)),
        Field("sub_questions[].text", "always", _DECOMPOSE, (r.QUESTION_WORDS,)),
    )),
    Contract("claims", (
        Field("claims[].id", "always", "veralith.pipeline.fast:ask_steps", (r.UNIQUE_IDS,)),
        Field("claims[].source_sentence_ids", "always, unless the response is empty", _DECOMPOSE,
              (r.CITES, r.SENTENCE_IDS)),
        Field("claims[].text", "always", _DECOMPOSE, (r.ITEM_WORDS, r.NUMBER_UNCITED, r.NUMBER_INVENTED)),
        Field("claims[].note", "\"\" unless words are needed to read the claim", _DECOMPOSE),
        Field("gaps[].id", "always", _DECOMPOSE, (r.UNIQUE_IDS,)),
        Field("gaps[].source_sentence_ids", "always", _DECOMPOSE, (r.CITES, r.SENTENCE_IDS)),
        Field("gaps[].text", "always", _DECOMPOSE, (r.ITEM_WORDS,)),
        Field("remarks[].id", "always", _DECOMPOSE, (r.UNIQUE_IDS,)),
        Field("remarks[].source_sentence_ids", "always", _DECOMPOSE, (r.CITES, r.SENTENCE_IDS)),
        Field("remarks[].text", "always", _DECOMPOSE, (r.ITEM_WORDS,)),
        Field("asks_clarification", "always", _DECOMPOSE, (r.EMPTY_RESPONSE,)),
    )),
    Contract("sufficiency", (
        _ids("items[].sub_question_id", _SUFF),
        Field("items[].evidence", "for \"yes\"", _SUFF_WHY, (r.EVIDENCE_FOR_YES, r.EVIDENCE_FOR_NO)),
        Field("items[].evidence[].chunk_id", "with its quote", _SUFF_WHY, (r.KNOWN_IDS,)),
        Field("items[].evidence[].quote", "with its chunk", _SUFF_WHY, _QUOTES),
        Field("items[].missing_facts", "for \"no\"", _SUFF_WHY, (r.MISSING_FOR_NO, r.MISSING_FOR_YES)),
        Field("items[].reasoning", "always", _SUFF_WHY),
        Field("items[].sufficient", "always", _SUFF),
        Field("items[].supporting_chunk_ids", "never written: the chunks its evidence quotes", _SUFF,
              (r.CURRENT_SUPPORT,)),
    )),
    Contract("faithfulness", (
        _ids("items[].claim_id", _FAITH),
        Field("items[].evidence", "when a chunk supports or contradicts it", _FAITH, (r.GROUNDING_FOR_LABEL,)),
        Field("items[].evidence[].chunk_id", "with its quote", _FAITH, (r.KNOWN_IDS,)),
        Field("items[].evidence[].quote", "with its chunk", _FAITH, _QUOTES),
        Field("items[].dates", "for stale", _FAITH, (r.DATES_ONLY_STALE, r.STALE_UNDATED)),
        Field("items[].dates[].chunk_id", "with its date", _FAITH, (r.KNOWN_IDS,)),
        Field("items[].dates[].date", "with its chunk", _FAITH, (r.DATE_ISO, r.DATE_IN_QUOTE, r.DATE_ATTRIBUTE)),
        Field("items[].dates[].quote", "\"\" when the chunk's date attribute gives the date", _FAITH, _QUOTES),
        Field("items[].reasoning", "always", _FAITH),
        Field("items[].relation", "always", _FAITH,
              (r.STALE_NOT_LATER, r.STALE_NOT_BEFORE_CUTOFF, r.STALE_NOT_BEFORE_TIME, r.STALE_TIMELESS)),
        Field("items[].grounding_chunk_ids", "never written: for supported, conflicting and stale, the chunks its "
              "evidence quotes that are not against it", _FAITH),
        Field("items[].contradicting_chunk_ids", "for contradicted and conflicting; for stale, the later chunks",
              _FAITH, (r.CONTRADICTING_FOR_LABEL, r.NO_CONTRADICTING, r.KNOWN_IDS)),
    )),
    Contract("completeness", (
        _ids("claims[].claim_id", _COMP),
        Field("claims[].role", "always", _COMP),
        Field("claims[].sub_question_ids", "for answers and supports", _COMP,
              (r.EXTRA_NAMES_NONE, r.ROLE_NAMES_SOME, r.KNOWN_IDS)),
        _ids("gaps[].gap_id", _COMP),
        Field("gaps[].sub_question_ids", "when it declines something asked", _COMP, (r.KNOWN_IDS,)),
        _ids("sub_questions[].sub_question_id", _COMP),
        Field("sub_questions[].reasoning", "always", _COMP),
        Field("sub_questions[].status", "always", _COMP, (r.STATUS_NEEDS_ANSWER, r.UNANSWERED_HAS_NONE)),
    )),
    Contract("explain", (
        Field("quotes", "at least one, unless the missing fact says it", _EXPLAIN, (r.EXPLAIN_EVIDENCE,)),
        Field("quotes[].source", "always", _EXPLAIN),
        Field("quotes[].chunk_id", "for a chunk's quote; \"\" for the response's", _EXPLAIN,
              (r.QUOTE_CHUNK_UNKNOWN,)),
        Field("quotes[].quote", "always", _EXPLAIN,
              (r.HAS_WORDS, r.QUOTE_NOT_IN_RESPONSE, r.QUOTE_NOT_IN_CHUNK, r.QUOTE_LONG)),
        Field("missing_fact", "when the question needs a fact no chunk gives", _EXPLAIN, (r.EXPLAIN_EVIDENCE,)),
        Field("what_went_wrong", "always", _EXPLAIN, (r.HAS_WORDS,)),
        Field("change_to_try", "always", _EXPLAIN, (r.HAS_WORDS,)),
    )),
)}

# The single call's reply is the other tasks' replies side by side: each of its lists is read as (and held
# to the contract of) that task's list. The re-ask's reply holds the judged lists only.
FAST_SECTIONS = {"sub_questions": ("questions", "sub_questions"), "sufficiency": ("sufficiency", "items"),
                 "claims": ("claims", "claims"), "gaps": ("claims", "gaps"), "remarks": ("claims", "remarks"),
                 "asks_clarification": ("claims", "asks_clarification"), "faithfulness": ("faithfulness", "items"),
                 "completeness": ("completeness", "")}


def rule_lines(task: str, *, timed: bool = True, gaps: bool = True) -> list[str]:
    """The prompt sentences of the task's rules, in field order, each once; not `timed`, without the rules
    about time (rules.TIME), which a call where nothing is dated and nothing asks about now cannot break;
    without `gaps`, without the rules of the gaps' fields (a completeness call whose response states no
    gap is asked for none: tasks.gapless)."""
    if task in ("fast", "fast_reask"):
        parts = ("questions", "claims", "sufficiency", "faithfulness", "completeness")
        return list(dict.fromkeys(line for part in parts for line in rule_lines(part)))
    return list(dict.fromkeys(rule.says if timed or not rule.untimed else rule.untimed
                              for rule in CONTRACTS[task].rules(gaps=gaps) if timed or rule not in r.TIME))


def markdown() -> str:
    """The contracts as Markdown tables, one per task (the section of docs/backends.md)."""
    lines: list[str] = []
    for contract in CONTRACTS.values():
        lines += ["", f"#### `{contract.task}`", "", "| field | filled | rule (the prompt's sentence) | checked by | "
                  "read by |", "|---|---|---|---|---|"]
        for f in contract.fields:
            said = "<br>".join(dict.fromkeys(_cell(rule.says) for rule in f.rules)) or "—"
            checks = ", ".join(f"`{rule.name}`" for rule in f.rules) or "—"
            module, _, function = f.reader.partition(":")
            lines.append(f"| `{f.path}` | {_cell(f.when)} | {said} | {checks} | `{module.removeprefix('veralith.')}."
                         f"{function}` |")
    lines += ["", "`fast` (the single call) holds each task's lists side by side and is checked by the same rules: "
              + ", ".join(f"`{name}` as {task}'s `{field or 'reply'}`" for name, (task, field) in FAST_SECTIONS.items())
              + "."]
    return "\n".join(lines).lstrip("\n") + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
