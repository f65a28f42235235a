"""The typed result model. Everything Veralith returns, stores or prints is one of these.

Bump SCHEMA_VERSION whenever a field is removed, renamed or retyped; docs/schema/ holds the
generated JSON Schema and a test fails when it drifts from these classes.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = "1.5"
# Results written under these versions still read back (new fields take their defaults; claim ids
# of results before 1.2 are renumbered k1, k2, ... on read, see EvaluationResult._upgrade).
READABLE_SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5")
# Claim ids are k1, k2, ... in response order (1.2 on): "c" is the default chunk prefix (c0, c1, ...).
CLAIM_ID_PREFIX = "k"


def claim_id(n: int) -> str:
    """The id of the n-th claim of a response, counting from 1."""
    return f"{CLAIM_ID_PREFIX}{n}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


class Verdict(str, Enum):
    Y = "Y"
    N = "N"


class Relation(str, Enum):
    """How the context relates to a claim. Only `supported` is grounded."""

    supported = "supported"
    unsupported = "unsupported"        # the context does not say it (absence of evidence)
    contradicted = "contradicted"      # the context says otherwise
    conflicting = "conflicting"        # some chunks support it, others contradict it
    stale = "stale"                    # stated only by chunks too old for the question, or changed by a later one


class FailureCell(str, Enum):
    """Completeness row x Faithfulness column: `<completeness>_<faithfulness>`."""

    complete_grounded = "complete_grounded"
    complete_ungrounded = "complete_ungrounded"
    incomplete_grounded = "incomplete_grounded"
    incomplete_ungrounded = "incomplete_ungrounded"
    extra_grounded = "extra_grounded"
    extra_ungrounded = "extra_ungrounded"


# The cell vocabulary, defined here once; the CLI, the store's statistics, `compare`, the CI gate and
# the web view all read it from here.
# A trace without a cell (a judge failed, or nothing could be assessed) is "indeterminate", the same
# word its quality gate uses.
NO_CELL = "indeterminate"
# Display order: the completeness rows, each grounded then ungrounded (the enum's order).
CELLS: tuple[str, ...] = tuple(cell.value for cell in FailureCell)
# Worst first: the order regressions and the CI gate's "worst traces" are listed in. Ungrounded
# claims (a fabricated or contradicted fact) rank above a gap in the answer; a trace without a cell
# ranks below every failure, since nothing is known about it; complete_grounded is last.
CELLS_BY_SEVERITY: tuple[str, ...] = ("incomplete_ungrounded", "complete_ungrounded", "extra_ungrounded",
                                      "incomplete_grounded", "extra_grounded", NO_CELL, "complete_grounded")


def cell_name(cell: FailureCell | str | None) -> str:
    """The name a cell is shown and counted under: its value, or NO_CELL for none."""
    if cell is None or cell == "":
        return NO_CELL
    return cell.value if isinstance(cell, FailureCell) else cell


def cell_severity(cell: FailureCell | str | None) -> int:
    """Rank of a cell, 0 the worst (CELLS_BY_SEVERITY); None or an unknown name counts as NO_CELL."""
    name = cell_name(cell)
    return CELLS_BY_SEVERITY.index(name if name in CELLS_BY_SEVERITY else NO_CELL)


class SufficiencyLevel(str, Enum):
    high = "high"
    low = "low"


class ThresholdSource(str, Enum):
    calibrated = "calibrated"
    fallback = "fallback"


class Execution(str, Enum):
    success = "success"      # every phase ran
    partial = "partial"      # some judge failed; the rest is reported
    error = "error"          # nothing could be judged
    timeout = "timeout"      # nothing could be judged because the judge server timed out


class ResponseKind(str, Enum):
    """What the response does, derived in code from its claims and gap statements."""

    answer = "answer"                                # states facts, admits no gap in what was asked
    partial_refusal = "partial_refusal"              # states facts and says part of what was asked is missing
    full_refusal = "full_refusal"                    # says the information is missing and states no facts
    clarification_request = "clarification_request"  # only asks the user something back
    no_factual_content = "no_factual_content"        # empty, greeting or opinion: nothing to check


class Coverage(str, Enum):
    """How a sub-question fared, from the completeness statuses and the faithfulness verdicts.

    Only `answered` covers it; every other value leaves the trace `incomplete`.
    """

    answered = "answered"                    # a grounded claim answers it in full
    partial = "partial"                      # answered only in part: never complete
    ungrounded_answer = "ungrounded_answer"  # the only claims that answer it are not grounded
    declined = "declined"                    # no claim answers it and the response says the documents lack it
    unanswered = "unanswered"                # nothing in the response answers or declines it


class CompletenessStatus(str, Enum):
    answered = "answered"
    partial = "partial"
    unanswered = "unanswered"


class Availability(str, Enum):
    assessed = "assessed"
    no_assessable_claims = "no_assessable_claims"  # empty or content-free response, not a refusal
    not_evaluated = "not_evaluated"


class Gate(str, Enum):
    pass_ = "pass"
    fail = "fail"
    indeterminate = "indeterminate"


class Phase(str, Enum):
    decompose = "decompose"
    sufficiency = "sufficiency"
    faithfulness = "faithfulness"
    completeness = "completeness"


class ContextChunk(_Model):
    """One retrieved chunk. `rank` and `score` are what the retriever (or a reranker) said of it, when
    the caller or an adapter gave them; the judges read only id, text and source."""

    id: str
    text: str
    source: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    rank: int | None = Field(None, ge=1, description="Position in the retriever's results, 1 = first.")
    score: float | None = Field(None, allow_inf_nan=False,
                                description="The retriever's or reranker's score for this chunk, as it gave it.")


class SubQuestion(_Model):
    id: str
    text: str


class Claim(_Model):
    id: str
    text: str
    char_start: int | None = Field(None, description="Start of the claim's span in the response, when locatable.")
    char_end: int | None = Field(None, description="End (exclusive) of the span, when locatable.")


class Gap(_Model):
    """A sentence of the response that says the documents lack something: refusal text, not a claim."""

    id: str
    text: str
    char_start: int | None = None
    char_end: int | None = None


class Remark(_Model):
    """A sentence of the response that only talks to the user (advice on how to go about it,
    encouragement, an offer to help, a greeting or sign-off): kept and shown, never graded."""

    id: str
    text: str
    char_start: int | None = None
    char_end: int | None = None


class Quote(_Model):
    chunk_id: str
    quote: str = Field(description="Verbatim text of the chunk (whitespace may differ).")


class ChunkDate(_Model):
    """The date of a chunk a faithfulness verdict rests on: what it is evidence of a stale claim with."""

    chunk_id: str
    date: str = Field(description="ISO at its precision: 2019, 2019-Q3, 2019-03 or 2019-03-14 (2019..2021: years).")
    quote: str = Field(description="The chunk's words that give the date; empty when its metadata does.")


class SufficiencyJudgment(_Model):
    sub_question_id: str
    verdict: Verdict
    reasoning: str
    chunk_ids: list[str] = Field(default_factory=list, description="Chunks that hold the needed facts.")
    confidence: float | None = Field(None, ge=0.0, le=1.0,
                                     description="Probability that the verdict is right; None when unknown.")


class FaithfulnessJudgment(_Model):
    """How the context relates to one claim. For `stale`, grounding_chunk_ids are the chunks that state
    it (too old for the question) and contradicting_chunk_ids the later chunks that changed it, if any."""

    claim_id: str
    verdict: Verdict
    relation: Relation
    reasoning: str
    grounding_chunk_ids: list[str] = Field(default_factory=list)
    contradicting_chunk_ids: list[str] = Field(default_factory=list)
    evidence: list[Quote] = Field(default_factory=list)
    dates: list[ChunkDate] = Field(default_factory=list, description="For a stale claim (and a conflict the dates "
                                   "explain): the dates of the chunks it rests on and of those that changed it.")
    confidence: float | None = Field(None, ge=0.0, le=1.0,
                                     description="Probability that the verdict is right; None when unknown.")

    @model_validator(mode="after")
    def _verdict_follows_relation(self) -> FaithfulnessJudgment:
        if (self.verdict is Verdict.Y) != (self.relation is Relation.supported):
            raise ValueError("verdict must be Y exactly when relation is 'supported'")
        return self


class CompletenessJudgment(_Model):
    """What the Completeness judge saw, before truth is taken into account.

    `mappings` lists the claims that *answer* each sub-question; `supports` the claims that only
    back or qualify an answer (background, a caveat), which neither cover a sub-question nor count
    as extra. `statuses` is the judge's own per-sub-question call; `uncovered_sub_question_ids` are
    those it did not call answered. `gaps` links each gap statement to the sub-questions it
    declines. The classifier applies the coverage rule (only a *grounded* answering claim covers)
    on top.
    """

    mappings: dict[str, list[str]] = Field(default_factory=dict)
    supports: dict[str, list[str]] = Field(default_factory=dict)
    statuses: dict[str, CompletenessStatus] = Field(default_factory=dict)
    gaps: dict[str, list[str]] = Field(default_factory=dict)
    uncovered_sub_question_ids: list[str] = Field(default_factory=list)
    extra_claim_ids: list[str] = Field(default_factory=list)
    reasoning: str = ""
    confidence: dict[str, float | None] = Field(
        default_factory=dict, description="Per sub-question: probability that its status is right.")


class Diagnosis(_Model):
    failure_cell: FailureCell | None = Field(None, description="None when Completeness or Faithfulness failed.")
    sufficiency_level: SufficiencyLevel
    sufficiency_fraction: float | None = Field(None, description="Y / sub-questions; None if not judged.")
    faithfulness_fraction: float | None = Field(None, description="Grounded / claims; None if not judged.")
    threshold: float
    threshold_source: ThresholdSource
    threshold_labels: int | None = Field(None, description="Labelled traces the threshold was fitted to (reviewers' "
                                         "sufficiency labels, docs/review.md); None when it was not fitted to labels.")
    n_sub_questions: int
    n_claims: int
    n_uncovered_sub_questions: int | None = None
    n_extra_claims: int | None = None
    n_partial_sub_questions: int | None = None
    coverage: dict[str, Coverage] = Field(default_factory=dict, description="Per sub-question; empty when unknown.")
    needs_review: bool = Field(False, description="A low-confidence verdict decides the cell or the gate.")
    review_ids: list[str] = Field(default_factory=list,
                                  description="The low-confidence verdicts whose flip would change cell or gate.")
    review_cutoff: float | None = Field(None, description="The confidence below which a deciding verdict flagged "
                                        "this trace (None: stored before it was recorded, when it was 0.7).")
    review_cutoff_labels: int | None = Field(None, description="Labelled traces the review cut-off was fitted to "
                                             "(docs/review.md); None when it is the default.")
    review_confidence: float | None = Field(None, description="The lowest confidence among the verdicts that decide "
                                            "the cell or the gate (1.0 when none does); what a cut-off is fitted to.")


class Suggestion(_Model):
    title: str
    summary: str
    actions: list[str]


class JudgeError(_Model):
    phase: Phase
    kind: str = Field(description="timeout | rate_limited | server_error | connection | malformed_reply | "
                      "missing_items (no usable verdict for some items, even after a re-ask; the message names "
                      "them) | auth | bad_request | context_truncated | internal | input_too_large | "
                      "unsupported_language (the last two: the offline judge declined the input)")
    message: str
    attempts: int = 1


class Repair(_Model):
    """A judge reply read leniently where its meaning was unambiguous (veralith.llm.salvage)."""

    phase: Phase
    kind: str = Field(description="json_in_fence | json_in_prose | cut_off_reply | enum_value | id_case | "
                      "duplicate_item")
    message: str = Field(description="What was read how, e.g. \"faithfulness relation 'Supported' of k2 read as "
                         "'supported'\".")


class Status(_Model):
    execution: Execution
    availability: Availability
    quality_gate: Gate
    reason: str = Field(description="Machine-readable reason code for the gate.")
    summary: str = Field(description="One sentence for people.")


class Usage(_Model):
    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    usd: float | None = Field(0.0, description="None when a model's price is unknown; never a silent 0.")


class ExplanationQuote(_Model):
    """A verbatim piece of the trace an explanation rests on (checked against the trace before it is kept)."""

    source: str = Field(description="chunk | response")
    chunk_id: str | None = Field(None, description="The chunk quoted; None for a quote of the response.")
    text: str


class Explanation(_Model):
    """What went wrong in this one trace and the change to try (`--explain`): one more judge call, made only
    for a failing trace and kept beside the rule-based suggestion, never replacing it."""

    what_went_wrong: str = ""
    change_to_try: str = ""
    quotes: list[ExplanationQuote] = Field(default_factory=list)
    missing_fact: str = Field("", description="A fact the question needs that no chunk gives; \"\" when none.")
    dropped: str | None = Field(None, description="Why no explanation is kept (e.g. \"explanation dropped: quote "
                                "not found in the trace\"); the other fields are then empty.")
    backend: str = ""
    model: str = ""
    prompt_version: str = ""
    usage: Usage = Field(default_factory=Usage)


class Reference(_Model):
    """What the team expects: an answer a person wrote, and the chunks that should have been retrieved
    (their texts or ids). Either may be absent; both absent is no reference at all (None)."""

    answer: str | None = None
    contexts: list[str] = Field(default_factory=list, description="Expected chunks: ids or texts, as given.")


class FactRecall(str, Enum):
    """Is a reference fact supported by the retrieved context (RAGAS's context recall, per fact)?"""

    retrieved = "retrieved"          # the context states it
    not_retrieved = "not_retrieved"  # no chunk states it


class FactCorrectness(str, Enum):
    """What the response does with a reference fact."""

    stated = "stated"                # a claim of the response states it
    contradicted = "contradicted"    # a claim says otherwise
    missing = "missing"              # the response leaves it out


class Correctness(str, Enum):
    """The correctness layer, beside the six cells (which stay reference-free)."""

    correct = "correct"              # every reference fact stated, none contradicted
    partly_correct = "partly_correct"  # some stated, the rest left out, none contradicted
    incorrect = "incorrect"          # a fact contradicted, or none stated
    not_assessed = "not_assessed"    # no reference answer, no fact in it, or its verdicts are missing


class ReferenceFact(_Model):
    """One fact of the reference answer with its two verdicts (None: that verdict was not given)."""

    id: str = Field(description="f1, f2, ... in the reference's order.")
    text: str
    recall: FactRecall | None = None
    recall_chunk_ids: list[str] = Field(default_factory=list, description="Chunks that state it.")
    recall_reasoning: str = ""
    correctness: FactCorrectness | None = None
    claim_ids: list[str] = Field(default_factory=list,
                                 description="Response claims that state it (stated) or contradict it (contradicted).")
    correctness_reasoning: str = ""


class ExpectedContext(_Model):
    """An expected chunk of the reference and whether the retriever returned it."""

    given: str = Field(description="The chunk id or text the reference named.")
    chunk_id: str | None = Field(None, description="The retrieved chunk it matched; None: not retrieved.")
    rank: int | None = Field(None, ge=1, description="That chunk's rank, when the retriever gave one.")


class ReferenceAssessment(_Model):
    """The reference given with the trace and what it reveals. The fractions are None when nothing
    was judged (never a NaN); `cause` names the first reason the reference shows for a wrong answer:
    `never_retrieved` (retrieval), `stated_wrongly` or `retrieved_unused` (generation)."""

    answer: str | None = None
    contexts: list[str] = Field(default_factory=list)
    facts: list[ReferenceFact] = Field(default_factory=list)
    expected: list[ExpectedContext] = Field(default_factory=list)
    correctness: Correctness = Correctness.not_assessed
    cause: Literal["never_retrieved", "retrieved_unused", "stated_wrongly"] | None = None
    context_recall: float | None = Field(None, description="Retrieved facts / judged facts.")
    answer_correctness: float | None = Field(None, description="Stated facts / judged facts.")
    expected_recall: float | None = Field(None, description="Expected chunks retrieved / expected chunks.")
    contradicted_claim_ids: list[str] = Field(default_factory=list,
                                              description="Response claims that contradict a reference fact.")
    summary: str = ""
    error: str | None = Field(None, description="Why some verdicts are missing (a judge call failed); None when "
                              "every call ran.")

    @property
    def given(self) -> Reference:
        return Reference(answer=self.answer, contexts=self.contexts)


class EvaluationResult(_Model):
    schema_version: str = SCHEMA_VERSION
    trace_id: int | None = None
    knowledge_base: str = "default"
    metadata: dict[str, Any] = Field(default_factory=dict)
    query: str
    context: list[ContextChunk]
    response: str
    sub_questions: list[SubQuestion] = Field(default_factory=list)
    claims: list[Claim] = Field(default_factory=list)
    gaps: list[Gap] = Field(default_factory=list)
    remarks: list[Remark] = Field(default_factory=list, description="Conversational sentences: shown, not graded.")
    response_kind: ResponseKind | None = Field(None, description="None when the response was not decomposed.")
    refusal: bool = False
    as_of: str | None = Field(None, description="The date the judges took as 'today' (YYYY-MM-DD).")
    sufficiency: list[SufficiencyJudgment] = Field(default_factory=list)
    faithfulness: list[FaithfulnessJudgment] = Field(default_factory=list)
    completeness: CompletenessJudgment | None = None
    diagnosis: Diagnosis | None = None
    suggestion: Suggestion | None = None
    explanation: Explanation | None = Field(None, description="The trace-specific explanation (`--explain`), "
                                            "beside the rule-based suggestion; None when none was asked for.")
    status: Status
    errors: list[JudgeError] = Field(default_factory=list)
    repairs: list[Repair] = Field(default_factory=list, description="Judge replies read leniently (JSON in "
                                  "prose, an enum value in another case, ...), one entry per repair.")
    latency_ms: dict[str, float] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    backend: str
    judge_model: str
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    reference: ReferenceAssessment | None = Field(
        None, description="The reference answer / expected chunks given with the trace and their verdicts; "
        "None when no reference was given.")
    mode: Literal["full", "fast"] = Field(
        "full", description="How the trace was judged: `full` (two decomposition calls, then three isolated "
        "judges) or `fast` (one call that decomposes and judges at once, for screening; VERALITH_MODE).")
    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Read a result written before 1.2: its claims are renumbered k1, k2, ... in order, and every
        reference to them follows (faithfulness, completeness, review ids). The upgraded result says
        the current version, so writing it back stores the current shape."""
        if not isinstance(data, dict) or data.get("schema_version") not in ("1.0", "1.1"):
            return data
        return _renumber_claims(data)

    @property
    def failure_cell(self) -> FailureCell | None:
        return self.diagnosis.failure_cell if self.diagnosis else None

    @property
    def needs_review(self) -> bool:
        return bool(self.diagnosis and self.diagnosis.needs_review)

    @property
    def passed(self) -> bool:
        return self.status.quality_gate is Gate.pass_

    def uncovered_sub_questions(self) -> list[tuple[str, str]]:
        """(sub-question id, how it fared) for each sub-question the response does not cover: from the
        diagnosis' coverage (answered only by ungrounded claims, partial, declined, unanswered), else
        from the Completeness judge's uncovered list."""
        coverage = self.diagnosis.coverage if self.diagnosis else {}
        if coverage:
            return [(q, c.value) for q, c in coverage.items() if c is not Coverage.answered]
        comp = self.completeness
        return [(q, "unanswered") for q in (comp.uncovered_sub_question_ids if comp else [])]


def _renumber_claims(data: dict[str, Any]) -> dict[str, Any]:
    claims = data.get("claims") or []
    new_id = {c["id"]: claim_id(n) for n, c in enumerate(claims, 1) if isinstance(c, dict) and "id" in c}

    def ren(ids: Any) -> Any:
        return [new_id.get(i, i) for i in ids] if isinstance(ids, list) else ids

    out = dict(data, schema_version=SCHEMA_VERSION)
    out["claims"] = [dict(c, id=new_id.get(c["id"], c["id"])) if isinstance(c, dict) else c for c in claims]
    out["faithfulness"] = [dict(j, claim_id=new_id.get(j["claim_id"], j["claim_id"]))
                           if isinstance(j, dict) and "claim_id" in j else j for j in data.get("faithfulness") or []]
    comp = data.get("completeness")
    if isinstance(comp, dict):
        comp = dict(comp)
        for key in ("mappings", "supports"):
            if isinstance(comp.get(key), dict):
                comp[key] = {q: ren(ids) for q, ids in comp[key].items()}
        comp["extra_claim_ids"] = ren(comp.get("extra_claim_ids", []))
        out["completeness"] = comp
    diag = data.get("diagnosis")
    if isinstance(diag, dict) and "review_ids" in diag:
        out["diagnosis"] = dict(diag, review_ids=ren(diag["review_ids"]))
    return out
