"""How many judge calls and tokens one trace will take, from the prompts it would send; no call is made.

The estimate renders the prompts the trace would send, with the pipeline's batching:

    1 questions call                        the query alone
    1 claims call                           query + the response's sentences (none for an empty response)
    ceil(S / batch_size) sufficiency calls  S sub-questions, every chunk (none without chunks)
    ceil(C / batch_size) faithfulness calls C claims, every chunk (none without chunks or claims)
    1 completeness call                     every sub-question and claim (none when S or C is 0)
    1 explain call                          with the `explain` setting (--explain): counted for every
                                            trace, since which traces fail is unknown before judging

In the single-call mode (VERALITH_MODE=fast) the trace makes one `fast` call holding the query, every
chunk and the response's sentences, whatever it holds; its output allowance is the sum of the five
tasks' allowances for the same items (without chunks, no sufficiency or faithfulness part). Its one
re-ask of bad items, like every judge's re-asks, is not planned: the learnt output counts it.

With no chunks the pipeline decides sufficiency and faithfulness in code, and with no claims or
no sub-questions it decides completeness in code, so those calls cost nothing.
Sub-questions and claims are unknown before decomposition, so S = the query's sentences and
C = the response's sentences split at "; " and " and " (the claims prompt asks for one fact per
claim), each piece standing in for the model's text. Input tokens are counted by
veralith.llm.tokens (messages plus the strict response schema, which structured outputs bill).

Output is unknown too, so an allowance is added (OUTPUT_ALLOWANCE; generous on purpose, since the
budget guard must not let a trace through on an optimistic guess):
    questions     20 + tokens(query) + 20 per sub-question
    claims        40 + tokens(response) + 40 per claim
    sufficiency   20 per call + 148 per sub-question
    faithfulness  20 per call + 140 per claim
    completeness  40 + 40 per claim + 40 per sub-question
    explain       400 (a few quotes and two or three sentences)
The sufficiency and completeness figures are what they were before those replies lost the fields no
code read (required facts: 12 tokens per sub-question, a role's reasoning: 10 per claim, measured on
the worked examples with tiktoken), less those tokens.

Learnt output (`veralith eval --dry-run` only): the allowance is an upper bound, so a dry run that
reports it overstates what a file will cost, and overstates the judge model's share more than the
decomposer's. When the store holds past real runs, the dry run reports an expected cost instead.
Each saved result records, per task, the requests its calls took and the output tokens they were
billed, next to the calls this estimate plans for the same trace and their allowance
(`output_sizes`; a planned call the pipeline did not need, say faithfulness for a response with no
claims, counts 0 requests); the store sums them per (task, model, prompt version). `LearntOutput`
then counts each planned call's prompt tokens times its task and model's requests per planned call,
and its allowance times their output tokens per allowance token. Ratios to the plan absorb what
the plan cannot know (how many sub-questions a query sentence becomes, how long each reasoning is,
how often a judge is not needed or asked again). A (task, model, prompt version) with no history
keeps one request and the allowance. The budget guard never uses it: it must not let a trace
through on an average.

The two decomposition calls go to the decomposer model and the judge calls to the judge model
(veralith.llm.tasks.model_for), so each call's tokens are counted with its own model's encoding and
reported per model (`TokenEstimate.by_model`). Pricing the estimate is not done here:
veralith.pipeline.budget prices each model's share at its own price and enforces the budget.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from veralith.config import settings
from veralith.llm import prompts, tasks as t
from veralith.llm.dates import fresh_from
from veralith.llm.frames import chunks_in, claim_cutoff, cutoff
from veralith.llm.text import sentence_spans
from veralith.llm.tokens import count_tokens, estimate_prompt_tokens
from veralith.models import ContextChunk, claim_id
from veralith.usage import CallUsage, OutputSize

__all__ = ["OUTPUT_ALLOWANCE", "LearntOutput", "ModelTokens", "TokenEstimate", "claim_count", "estimate_tokens",
           "max_output_tokens", "output_allowance", "output_sizes", "planned_calls"]

OUTPUT_ALLOWANCE = {"questions_base": 20, "questions_per_item": 20, "claims_base": 40, "claims_per_item": 40,
                    "call": 20, "sufficiency_per_item": 148, "faithfulness_per_item": 140, "completeness_base": 40,
                    "completeness_per_claim": 40, "completeness_per_sub_question": 40, "explain": 400}


@dataclass(frozen=True)
class ModelTokens:
    """The calls and tokens of one trace that go to one model."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class TokenEstimate:
    calls: int
    input_tokens: int
    output_tokens: int
    method: str                # "tiktoken:<encoding>" | "chars/4"
    # The same calls and tokens split by the model they go to, in the order first called (the
    # decomposer's first); one entry when every call goes to one model, none when no call is made.
    by_model: tuple[ModelTokens, ...] = ()
    # Calls whose output was learnt from past runs (LearntOutput); the rest got the allowance.
    learnt_calls: int = 0


@dataclass(frozen=True)
class LearntOutput:
    """Observed output / allowance per (task, model, prompt version), from the store's `output_sizes()`."""

    sizes: tuple[OutputSize, ...]
    versions: Mapping[str, str]          # the prompt version each task would be asked with now
    # The (task, model, prompt version) figures an estimate has used so far, for `calls_used`.
    used: set[tuple[str, str, str]] = field(default_factory=set, compare=False)

    def ratios(self, task: str, model: str) -> tuple[float, float] | None:
        """(requests per planned call, output tokens per allowance token) seen for `task` sent to
        `model` at today's prompt version; None without history."""
        key = (task, model, self.versions.get(task, ""))
        found = self._by_key().get(key)
        if found is None or found.allowance_tokens <= 0 or found.planned_calls <= 0:
            return None
        self.used.add(key)
        return found.calls / found.planned_calls, found.output_tokens / found.allowance_tokens

    def calls_used(self) -> int:
        """The past calls behind the figures the estimates made so far have used."""
        by_key = self._by_key()
        return sum(by_key[key].calls for key in self.used)

    def _by_key(self) -> dict[tuple[str, str, str], OutputSize]:
        return {(s.task, s.model, s.prompt_version): s for s in self.sizes}


def _sentences(text: str) -> list[str]:
    return [text[start:end] for start, end in sentence_spans(text)]


# The claims prompt tells the model to split "A and B" into separate facts, so a sentence is
# assumed to yield one claim per "; " or " and " clause. Splitting at commas too over-counts
# (lists, appositions); not splitting under-counts long answers (benchmarks/budget_accuracy.py).
_CLAUSE = re.compile(r";\s+|\s+and\s+")
_LETTER = re.compile(r"[^\W\d_]")


def _claim_texts(sentences: list[str]) -> list[str]:
    """The claims a decomposer is assumed to write: each sentence's clauses that contain a letter."""
    texts = []
    for sentence in sentences:
        parts = [p for p in _CLAUSE.split(sentence) if _LETTER.search(p)]
        texts += parts or [sentence]
    return texts


def claim_count(text: str) -> int:
    """How many claims the estimate assumes `text` holds (its sentences' clauses that contain a letter)."""
    return len(_claim_texts(_sentences(text)))


def planned_calls(query: str, chunks: Sequence[ContextChunk], response: str, *, batch_size: int,
                  as_of: str | None = None, mode: str = "full",
                  reference: str | None = None) -> list[tuple[str, Any]]:
    """(task name, input model) for every call the trace would make, as the pipeline makes them;
    with a `reference` answer, its split and its facts' two verdicts too (veralith.pipeline.reference)."""
    chunk_in = chunks_in(chunks)
    sentences = _sentences(response)
    as_of = as_of or datetime.date.today().isoformat()   # the judges get a date; its tokens count
    days = settings.stale_after_days
    asked = _sentences(query)
    claims = [t.ClaimIn(id=claim_id(n), text=s, cutoff=claim_cutoff(s, None, asked, query, as_of, days))
              for n, s in enumerate(_claim_texts(sentences), 1)]
    extra = _reference_calls(query, chunk_in, claims, reference, batch_size, as_of) if reference else []
    if mode == "fast":
        return [("fast", t.FastInput(query=query, chunks=chunk_in, as_of=as_of, fresh_from=fresh_from(as_of, days),
                                     sentences=[t.Sentence(id=f"S{n}", text=s) for n, s in enumerate(sentences, 1)])),
                *extra]
    sub_questions = [t.SubQuestionIn(id=f"q{n}", text=s, cutoff=cutoff(s, as_of, days)) for n, s in enumerate(asked, 1)]
    calls: list[tuple[str, Any]] = [("questions", t.QuestionsInput(query=query))]
    if sentences:  # an empty response has no claims or gaps, decided without a call
        calls.append(("claims", t.ClaimsInput(
            query=query, response=response,
            sentences=[t.Sentence(id=f"S{n}", text=s) for n, s in enumerate(sentences, 1)])))
    if chunk_in:  # without chunks, sufficiency is "no" and every claim unsupported, decided without a call
        calls += [("sufficiency", t.SufficiencyInput(query=query, sub_questions=b, chunks=chunk_in, as_of=as_of))
                  for b in _batches(sub_questions, batch_size)]
        calls += [("faithfulness", t.FaithfulnessInput(query=query, claims=b, chunks=chunk_in, as_of=as_of))
                  for b in _batches(claims, batch_size)]
    if sub_questions and claims:  # otherwise the pipeline decides completeness without a call
        # Planned as a call whose response states a gap: its prompt and schema are the larger ones
        # (tasks.gapless), and whether the response states one is known only after decomposition.
        calls.append(("completeness", t.CompletenessInput(query=query, sub_questions=sub_questions, claims=claims,
                                                          gaps=[t.GapIn(id="g1", text="")])))
    if settings.explain:  # whether the trace will fail is unknown before judging: counted as if it will
        calls.append(("explain", t.ExplainInput(
            query=query, response=response, chunks=chunk_in, cell="incomplete_ungrounded",
            suggestion="Worst-case failure",
            sub_questions=[t.JudgedSubQuestionIn(id=q.id, text=q.text, coverage="unanswered", sufficient="no")
                           for q in sub_questions],
            claims=[t.JudgedClaimIn(id=c.id, text=c.text, relation="unsupported") for c in claims])))
    return calls + extra


def _reference_calls(query: str, chunk_in: list[t.ChunkIn], claims: list[t.ClaimIn], reference: str,
                     batch_size: int, as_of: str) -> list[tuple[str, Any]]:
    """The reference's calls: its split (claims task), its facts against the chunks (recall) and against
    the response's claims (correctness), both by the faithfulness task; a fact per claim-like sentence."""
    sentences = _sentences(reference)
    if not sentences:
        return []
    facts = [t.ClaimIn(id=f"f{n}", text=s) for n, s in enumerate(_claim_texts(sentences) or [reference.strip()], 1)]
    numbered = [t.Sentence(id=f"S{n}", text=s) for n, s in enumerate(sentences, 1)]
    calls: list[tuple[str, Any]] = [("claims", t.ClaimsInput(query=query, response=reference, sentences=numbered))]
    said = [t.ChunkIn(id=c.id, text=c.text) for c in claims]
    for chunks, dated in ((chunk_in, as_of), (said, None)):
        if chunks:
            calls += [("faithfulness", t.FaithfulnessInput(query=query, claims=b, chunks=chunks, as_of=dated))
                      for b in _batches(facts, batch_size)]
    return calls


def _batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _output_allowance(task: str, payload: Any, query_tokens: int, response_tokens: int) -> int:
    a = OUTPUT_ALLOWANCE
    if task == "fast":   # what the five calls would write for the same trace, in one reply
        return sum(_output_allowance(part, each, query_tokens, response_tokens) for part, each in planned_calls(
            payload.query, [ContextChunk(id=c.id, text=c.text, source=c.source) for c in payload.chunks],
            " ".join(s.text for s in payload.sentences), batch_size=50, as_of=payload.as_of))
    if task == "questions":
        return a["questions_base"] + query_tokens + a["questions_per_item"] * len(_sentences(payload.query))
    if task == "claims":
        items = len(_claim_texts([s.text for s in payload.sentences]))
        return a["claims_base"] + response_tokens + a["claims_per_item"] * items
    if task == "sufficiency":
        return a["call"] + a["sufficiency_per_item"] * len(payload.sub_questions)
    if task == "faithfulness":
        return a["call"] + a["faithfulness_per_item"] * len(payload.claims)
    if task == "explain":
        return a["explain"]
    return (a["completeness_base"] + a["completeness_per_claim"] * len(payload.claims)
            + a["completeness_per_sub_question"] * len(payload.sub_questions))


def output_allowance(task: str, payload: Any, model: str) -> int:
    """The output allowance (OUTPUT_ALLOWANCE) of one call of `task` on `payload`, in `model`'s tokens.
    The single call's re-ask gets the single call's allowance."""
    if task == "fast_reask":   # the single call's re-ask: at most what the call itself was allowed
        task, payload = "fast", payload.fast
    query_tokens, _ = count_tokens(getattr(payload, "query", ""), model, wait=False)
    said = payload.response if task == "claims" else " ".join(s.text for s in payload.sentences) \
        if task == "fast" else ""
    response_tokens, _ = count_tokens(said, model, wait=False) if said else (0, "")
    return _output_allowance(task, payload, query_tokens, response_tokens)


def max_output_tokens(task: str, payload: Any, model: str, allowance: int | None = None) -> int:
    """The largest `max_tokens` a judge call sends: twice the budget's output allowance for this call
    (`allowance`, when the caller has it), plus 256.

    Large enough that a reply that follows the prompt (one short reasoning sentence per item) never
    meets it, small enough that a small local model that rambles stops at a few seconds' worth of
    tokens instead of at its context limit. A reply cut there keeps its complete items; the others
    are asked again. A server's replies can lower it (veralith.llm.pace.max_tokens).
    """
    return 2 * (output_allowance(task, payload, model) if allowance is None else allowance) + 256


_LEARNT_TASKS = ("questions", "claims", "sufficiency", "faithfulness", "completeness", "fast")   # not explain


def output_sizes(query: str, chunks: Sequence[ContextChunk], response: str,
                 spent: Sequence[tuple[str, CallUsage | None]], *, model: str, decomposer_model: str | None,
                 versions: Mapping[str, str], batch_size: int, mode: str, as_of: str | None) -> list[OutputSize]:
    """Per task this module plans for the trace, what one evaluation's calls of it wrote and how many
    requests they took, next to the planned calls and their allowance (`spent`: each call's task and
    usage, None for a failed call; `model` and `decomposer_model` the names the client sends, which
    the dry run knows, not the names a server reports back).

    A planned task the pipeline decided without a call (no claims to judge, say) counts with 0 calls
    and 0 tokens: it is part of what a plan should expect. A task is left out when any of its calls
    failed, was answered by the reply cache (no tokens billed) or reported no usage, and so is
    `explain` (the dry run counts it at its allowance). Nothing is returned when no call reported
    usage (an offline judge).
    """
    made: dict[str, CallUsage] = {}
    left_out: set[str] = set()
    for task, usage in spent:
        if usage is None or usage.cache_hits or not usage.calls:
            left_out.add(task)
            continue
        made.setdefault(task, CallUsage()).add(usage)
    if not made:
        return []
    planned: dict[str, list[int]] = {}   # task -> [calls, allowance]
    sizes: dict[str, tuple[int, int]] = {}
    for task, payload in planned_calls(query, chunks, response, batch_size=batch_size, as_of=as_of, mode=mode):
        if task not in _LEARNT_TASKS or task in left_out:
            continue
        used = t.model_for(task, model, decomposer_model)
        if used not in sizes:   # the allowance's query and response tokens, in this model's encoding
            sizes[used] = (count_tokens(query, used, wait=False)[0], count_tokens(response, used, wait=False)[0])
        counts = planned.setdefault(task, [0, 0])
        counts[0] += 1
        counts[1] += _output_allowance(task, payload, *sizes[used])
    found = []
    for task, (calls, allowance) in planned.items():
        spent_on = made.get(task, CallUsage())   # none: the pipeline did not need the planned calls
        if allowance > 0:
            found.append(OutputSize(task=task, model=t.model_for(task, model, decomposer_model),
                                    prompt_version=versions.get(task, ""), planned_calls=calls, calls=spent_on.calls,
                                    allowance_tokens=allowance, output_tokens=spent_on.output_tokens))
    return found


def estimate_tokens(query: str, chunks: Sequence[ContextChunk], response: str, *, model: str,
                    schema: Callable[[t.Task, Any], dict[str, Any]] | None = None,
                    decomposer_model: str | None = None, learnt: LearntOutput | None = None,
                    reference: str | None = None) -> TokenEstimate:
    """Calls and tokens of judging one trace (validated chunks) with judge `model` (and `decomposer_model`
    for the decomposition calls; default `model`) on an OpenAI-compatible server.

    Output tokens are the allowance. With `learnt` (the dry run's expected cost), a call whose task
    and model have history counts its prompt tokens times the requests past runs made per planned
    call (calls not needed, re-asks), and its allowance times the output / allowance they saw.

    `schema` gives the response schema each task sends (a client's `schema` method, which caches
    it); default: veralith.llm.client.strict_schema (which imports openai, so only once an estimate
    is made).
    """
    if schema is None:
        from veralith.llm.client import strict_schema

        schema = strict_schema
    calls = planned_calls(query, chunks, response, batch_size=settings.batch_size, mode=settings.mode,
                          reference=reference)
    per_model: dict[str, list[float]] = {}   # model -> [calls, input tokens, output tokens]
    sizes: dict[str, tuple[int, int]] = {}
    method = "chars/4"
    learnt_calls = 0
    for task, payload in calls:
        used = t.model_for(task, model, decomposer_model)
        if used not in sizes:   # the output allowance's query and response tokens, in this model's encoding
            sizes[used] = (count_tokens(query, used)[0], count_tokens(response, used)[0])
        query_tokens, response_tokens = sizes[used]
        messages = prompts.render(task, payload, model=used)   # as the client renders it for this model
        n, method = estimate_prompt_tokens(messages, schema(t.TASKS[task], payload), used)
        allowed = _output_allowance(task, payload, query_tokens, response_tokens)
        # Expected (learnt): prompts sent as often per planned call, and output as large against the
        # allowance, as past runs of this task and model saw; otherwise one prompt and the allowance.
        ratios = None if learnt is None else learnt.ratios(task, used)
        sent, written = (1.0, 1.0) if ratios is None else ratios
        learnt_calls += ratios is not None
        counts = per_model.setdefault(used, [0, 0.0, 0.0])
        counts[0] += 1
        counts[1] += n * sent
        counts[2] += allowed * written
    by_model = tuple(ModelTokens(name, int(counts[0]), round(counts[1]), round(counts[2]))
                     for name, counts in per_model.items())
    return TokenEstimate(calls=len(calls), input_tokens=sum(m.input_tokens for m in by_model),
                         output_tokens=sum(m.output_tokens for m in by_model), method=method, by_model=by_model,
                         learnt_calls=learnt_calls)
