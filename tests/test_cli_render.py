"""Rendering (pure functions of the models) and the batch runner, without a database or a server."""

from __future__ import annotations

import csv
import io
import threading
import time

import pytest
from rich.console import Console

from veralith.cli import batch, records, render
from veralith.models import (
    Availability,
    Claim,
    CompletenessJudgment,
    ContextChunk,
    Diagnosis,
    EvaluationResult,
    Execution,
    FailureCell,
    FaithfulnessJudgment,
    Gate,
    JudgeError,
    Phase,
    Relation,
    Status,
    SubQuestion,
    SufficiencyJudgment,
    SufficiencyLevel,
    Suggestion,
    ThresholdSource,
    Usage,
    Verdict,
)

HOSTILE = "See [red]this[/red] and [link=file:///etc/passwd]here[/link] :smile: \x1b[2J\u202eevil"


def _result(**changes) -> EvaluationResult:
    base = dict(
        trace_id=7, query="What is X [bold]and[/bold] Y?", response=f"X is 1. Y is 2. {HOSTILE}",
        context=[ContextChunk(id="c0", text="X is 1. [b]Y[/b] is 3.", source="[i]doc[/i]")],
        sub_questions=[SubQuestion(id="q1", text="What is X?"), SubQuestion(id="q2", text="What is Y?")],
        claims=[Claim(id="k1", text="X is 1.", char_start=0, char_end=7),
                Claim(id="k2", text="Y is 2.", char_start=8, char_end=15),
                Claim(id="k3", text=HOSTILE, char_start=16, char_end=16 + len(HOSTILE))],
        sufficiency=[SufficiencyJudgment(sub_question_id="q1", verdict=Verdict.Y, reasoning="r", chunk_ids=["c0"]),
                     SufficiencyJudgment(sub_question_id="q2", verdict=Verdict.N, reasoning="r")],
        faithfulness=[
            FaithfulnessJudgment(claim_id="k1", verdict=Verdict.Y, relation=Relation.supported, reasoning="r",
                                 grounding_chunk_ids=["c0"]),
            FaithfulnessJudgment(claim_id="k2", verdict=Verdict.N, relation=Relation.contradicted, reasoning="r",
                                 contradicting_chunk_ids=["c0"]),
            FaithfulnessJudgment(claim_id="k3", verdict=Verdict.N, relation=Relation.unsupported, reasoning="r")],
        completeness=CompletenessJudgment(mappings={"q1": ["k1"], "q2": ["k2"]}, extra_claim_ids=["k3"]),
        diagnosis=Diagnosis(failure_cell=FailureCell.incomplete_ungrounded, sufficiency_level=SufficiencyLevel.low,
                            sufficiency_fraction=0.5, faithfulness_fraction=1 / 3, threshold=1.0,
                            threshold_source=ThresholdSource.fallback, n_sub_questions=2, n_claims=3),
        suggestion=Suggestion(title="Worst-case failure", summary="s", actions=["Raise retrieval-K."]),
        status=Status(execution=Execution.partial, availability=Availability.assessed, quality_gate=Gate.fail,
                      reason="incomplete_ungrounded", summary="Part is unanswered."),
        errors=[JudgeError(phase=Phase.sufficiency, kind="rate_limited", message="429 [red]x[/red]", attempts=3)],
        usage=Usage(calls=4, usd=None), backend="openai", judge_model="gpt-4o",
    )
    return EvaluationResult(**{**base, **changes})


def _text(renderable, *, color: bool = False) -> str:
    console = Console(file=io.StringIO(), width=400, force_terminal=color, color_system="truecolor" if color else None)
    console.print(renderable)
    return console.file.getvalue()


def test_user_text_is_shown_literally_never_as_markup():
    out = _text(render.result_view(_result()), color=True)
    assert "[red]this[/red]" in out and "[link=file:///etc/passwd]here[/link]" in out
    assert "[bold]and[/bold]" in out and "[i]doc[/i]" in out and ":smile:" in out and "429 [red]x[/red]" in out
    assert "\x1b]8;" not in out                 # no hyperlink escape was emitted
    assert "\x1b[2J" not in out and "\\x1b[2J" in out   # the user's escape is shown, not executed
    assert "\u202e" not in out and "\\u202e" in out


def test_inspect_view_names_every_part():
    out = _text(render.result_view(_result()))
    for needle in ("Trace 7", "incomplete_ungrounded", "LOW", "the 100% this knowledge base needs (the default",
                   "What is Y?", "✓ grounded", "⊘ contradicted", "✗ unsupported", "contradicted by c0", "k3 answers nothing",
                   "Worst-case failure", "Raise retrieval-K.", "rate_limited", "cost unknown"):
        assert needle in out, needle
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "What is Y?" in line)
    assert "no grounded answer" in lines[at]                    # mapped to k2, which is not grounded: not covered
    assert any("↳ answered only by k2, which is contradicted" in line for line in lines[at:at + 4])


def test_result_without_diagnosis_renders():
    result = _result(diagnosis=None, suggestion=None, completeness=None, faithfulness=[])
    out = _text(render.result_view(result))
    assert "not classified" in out and "not judged" in out


def test_summary_shows_unknown_cost_and_interrupt():
    tally = batch.Tally(total=3)
    tally.add(_result(), stored=True)
    tally.interrupted, tally.left_pending, tally.unread, tally.last_line = True, 2, True, 9
    out = _text(render.summary_view(tally))
    assert "unknown" in out and "incomplete_ungrounded" in out and "2 pending" in out and "line 9" in out
    assert "veralith resume" in out and "1 stored as trace 7;" in out


def test_csv_export_is_flat_and_formula_safe():
    sink = io.StringIO()
    count = records.write_export([_result(query="=HYPERLINK(\"http://x\")")], sink, "csv")
    rows = list(csv.DictReader(io.StringIO(sink.getvalue())))
    assert count == 1 and rows[0]["query"].startswith("'=") and rows[0]["usd"] == ""
    assert rows[0]["failure_cell"] == "incomplete_ungrounded" and "nan" not in sink.getvalue().lower()


def test_jsonl_export_round_trips():
    sink = io.StringIO()
    records.write_export([_result()], sink, "jsonl")
    assert EvaluationResult.model_validate_json(sink.getvalue().strip()) == _result()


@pytest.mark.parametrize("raw, needle", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "got a JSON array"),
    (b'{"query": "q", "context": []}', 'missing required field "response"'),
    (b'{"query": "q", "context": 3, "response": "r"}', "context must be a list"),
    (b'{"query": 1, "context": [], "response": "r"}', "query must be a str"),
    (b'{"query": "q", "context": [], "response": "r", "metadata": {"x": NaN}}', "NaN"),
    (b'{"query": "q", "context": [], "response": "r", "id": [1]}', "id must be a str or int"),
    (b"\xff\xfe{}", "not valid UTF-8"),
])
def test_bad_lines_say_what_is_wrong(raw, needle):
    item = records.parse_line(4, raw, default_kb="default")
    assert isinstance(item, records.BadLine) and item.line == 4 and needle in item.message and not item.blank


def test_good_line_is_normalised():
    item = records.parse_line(1, b'\xef\xbb\xbf{"id": "a", "query": "q", "context": ["t"], "response": "r"}\n',
                            default_kb="kb1")
    assert isinstance(item, records.Record)
    assert item.context[0].id == "c0" and item.knowledge_base == "kb1" and item.metadata == {"id": "a"}
    assert records.parse_line(2, b"   \n", default_kb="d").blank


def test_run_ordered_keeps_input_order_and_a_bounded_window():
    read, flushed, lock = [], [], threading.Lock()
    in_flight = {"now": 0, "max": 0}

    def jobs():
        for i in range(40):
            with lock:
                in_flight["now"] += 1
                in_flight["max"] = max(in_flight["max"], in_flight["now"])
            read.append(i)
            yield i

    def work(i):
        time.sleep(0.02 if i % 3 else 0.05)   # uneven, so completions come out of order
        return i * 10

    def on_flush(job, result, error):
        with lock:
            in_flight["now"] -= 1
        flushed.append(result)

    batch.run_ordered(jobs(), work, concurrency=4, on_done=lambda *a: None, on_flush=on_flush)
    assert flushed == [i * 10 for i in range(40)]
    assert in_flight["max"] <= 8             # never more than 2 x concurrency read ahead of output


def test_run_ordered_reports_worker_exceptions_per_job():
    seen = []

    def work(i):
        if i == 2:
            raise RuntimeError("boom")
        return i

    batch.run_ordered(range(4), work, concurrency=2, on_done=lambda *a: None,
                      on_flush=lambda job, result, error: seen.append((job, result, repr(error) if error else None)))
    assert seen[2] == (2, None, "RuntimeError('boom')") and [s[1] for s in seen if s[0] != 2] == [0, 1, 3]


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_reporter_on_a_terminal_and_in_a_log(terminal):
    console = Console(file=io.StringIO(), force_terminal=terminal, width=100)
    tally = batch.Tally(total=4)
    with batch.Reporter(console, tally, every_s=0.0) as reporter:
        reporter.report("in.jsonl:2: not valid JSON [red]x[/red]")
        tally.add(_result(), stored=False)
        reporter.advance()
    out = console.file.getvalue()
    assert "in.jsonl:2: not valid JSON [red]x[/red]" in out
    assert ("1/4" in out) and (("veralith: 1/4 done" in out) != terminal)


def test_inspect_shows_confidence_evidence_gaps_and_review():
    from veralith.models import Coverage, Gap, Quote, ResponseKind

    base = _result()
    faith = [j.model_copy(update={"confidence": 0.62}) for j in base.faithfulness]
    faith[0] = faith[0].model_copy(update={"evidence": [Quote(chunk_id="c0", quote="X is 1.")]})
    diag = base.diagnosis.model_copy(update={
        "coverage": {"q1": Coverage.answered, "q2": Coverage.declined}, "needs_review": True, "review_ids": ["k1"]})
    out = _text(render.result_view(base.model_copy(update={
        "faithfulness": faith, "diagnosis": diag, "response_kind": ResponseKind.partial_refusal,
        "gaps": [Gap(id="g1", text="what Y is")]})))
    assert "(62% sure)" in out and "c0: “X is 1.”" in out
    assert "g1 gap: what Y is" in out and "partial refusal" in out
    assert "needs review" in out and "declined" in next(line for line in out.splitlines() if "What is Y?" in line)
