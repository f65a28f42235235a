"""Trace-specific explanations (`--explain`): for a failing trace, one more judge call that says what
went wrong in THIS trace and the concrete change to try, quoting the chunk or the response.

The call is an ordinary judge task (veralith.llm.tasks.EXPLAIN), so it goes through the same client as
the five judges: cached, priced, retried, and its reply checked like every judge reply. Every quote
must be found verbatim (up to whitespace and typographic quotes) in the chunk it names or in the
response; a reply with an invented quote is asked again once, and if the second reply invents one
too, nothing is kept but a note ("explanation dropped: quote not found in the trace"). A failed call
never fails the trace: its judgments, cell and rule-based suggestion stand as they are, and the
explanation sits beside the suggestion, never replacing it.

Only a failing trace (a failure cell and a failing gate) is explained: a passing or indeterminate
one makes no call (`wanted`).
"""

from __future__ import annotations

from typing import cast

from veralith.config import settings
from veralith.errors import JudgeCallError
from veralith.llm.base import JudgeClient
from veralith.llm.calls import Batch, Steps, drive
from veralith.llm.frames import chunks_in, claim_cutoff
from veralith.llm.tasks import (
    EXPLAIN,
    QUOTE_NOT_FOUND,
    ExplainInput,
    ExplainOutput,
    JudgedClaimIn,
    JudgedSubQuestionIn,
)
from veralith.models import EvaluationResult, Explanation, ExplanationQuote, Gate, Verdict
from veralith.usage import CallUsage

__all__ = ["DROPPED_QUOTE", "explain", "explain_input", "wanted"]

DROPPED_QUOTE = "explanation dropped: quote not found in the trace"
_MAX_NOTE = 300


def wanted(result: EvaluationResult) -> bool:
    """True for a failing trace: a failure cell and a failing gate (not passing, not indeterminate)."""
    return result.failure_cell is not None and result.status.quality_gate is Gate.fail


def explain_input(result: EvaluationResult) -> ExplainInput:
    """The explain task's input: the trace and what the judges found in it, with the dates and cutoffs the
    judges were shown (veralith.llm.frames), so a stale claim is explained by the standard it was judged by."""
    coverage = result.diagnosis.coverage if result.diagnosis else {}
    asked = [q.text for q in result.sub_questions]
    days = settings.stale_after_days
    sufficient = {j.sub_question_id: "yes" if j.verdict is Verdict.Y else "no" for j in result.sufficiency}
    relation = {j.claim_id: j.relation.value for j in result.faithfulness}
    cell = result.failure_cell
    return ExplainInput(
        query=result.query, response=result.response,
        chunks=chunks_in(result.context), as_of=result.as_of,
        cell=cell.value if cell is not None else "none",
        suggestion=result.suggestion.title if result.suggestion else "none",
        sub_questions=[JudgedSubQuestionIn(id=q.id, text=q.text,
                                           coverage=coverage[q.id].value if q.id in coverage else "unknown",
                                           sufficient=sufficient.get(q.id, "unknown"))
                       for q in result.sub_questions],
        claims=[JudgedClaimIn(id=c.id, text=c.text, relation=relation.get(c.id, "unknown"),
                              cutoff=claim_cutoff(c.text, None, asked, result.query, result.as_of, days))
                for c in result.claims])


def explain(client: JudgeClient, result: EvaluationResult) -> Explanation:
    """The explanation of a failing `result` (see the module doc); never raises for a failed call."""
    return drive(explain_steps(client, result), client)


def explain_steps(client: JudgeClient, result: EvaluationResult) -> Steps[Explanation]:
    """`explain` as a pipeline stage: its one call is yielded, so the sync path sends it on a thread and
    the async path awaits it (veralith.llm.calls), like every other judge call of the trace."""
    version = client.prompt_version(EXPLAIN.name)
    made = {"backend": client.backend, "model": client.model, "prompt_version": version}
    (outcome,) = yield Batch([(EXPLAIN, explain_input(result))])
    if isinstance(outcome, JudgeCallError):
        spent = getattr(outcome, "usage", None)
        usage = spent if isinstance(spent, CallUsage) else CallUsage(model=client.model)
        note = (DROPPED_QUOTE if QUOTE_NOT_FOUND in outcome.message
                else f"explanation dropped: {outcome.kind}: {outcome.message}"[:_MAX_NOTE])
        return Explanation(dropped=note, usage=usage.as_usage(), **made)
    if isinstance(outcome, Exception):
        raise outcome
    call = outcome[0]
    out = cast("ExplainOutput", call.output)
    quotes = [ExplanationQuote(source=q.source, chunk_id=q.chunk_id if q.source == "chunk" else None, text=q.quote)
              for q in out.quotes]
    return Explanation(what_went_wrong=out.what_went_wrong, change_to_try=out.change_to_try, quotes=quotes,
                       missing_fact=out.missing_fact, usage=call.usage.as_usage(),
                       **{**made, "model": call.usage.model or client.model})
