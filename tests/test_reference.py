"""Reference answers (issue 42): inputs on every path, stored on both stores, copied, shown; the facts'
verdicts, the correctness layer, the gate."""

from __future__ import annotations

import json

import pytest

import veralith
from veralith.config import settings
from veralith.models import Correctness, FactCorrectness, FactRecall, Gate, Reference
from veralith.pipeline.reference_inputs import check_reference
from veralith.store import ops

CHUNKS = ["Acme was founded in 1947 by Ruth Calder in Ohio.", "Acme makes anvils and rockets."]
QUERY = "When was Acme founded?"


def test_check_reference_normalises_and_names_the_argument():
    assert check_reference(None, None) is None
    assert check_reference("  ", []) is None
    assert check_reference("Acme was founded in 1947.") == Reference(answer="Acme was founded in 1947.")
    got = check_reference(None, [{"id": "doc-3", "text": "x"}, {"text": "a text"}, 7, " "])
    assert got == Reference(answer=None, contexts=["doc-3", "a text", "7"])
    with pytest.raises(TypeError, match="reference must be a str"):
        check_reference(42)
    with pytest.raises(TypeError, match=r"reference_contexts must be a list.*wrap a single text"):
        check_reference("a", "one chunk")
    with pytest.raises(TypeError, match=r"reference_contexts\[0\]"):
        check_reference("a", [1.5])


def test_a_trace_without_a_reference_has_none_and_unchanged_gate():
    result = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1947.", persist=False)
    assert result.reference is None
    assert result.passed


def test_a_correct_answer_is_correct_and_every_fact_gets_two_verdicts():
    result = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1947.", persist=False,
                               reference="Acme was founded in 1947.", reference_contexts=["c0", "not retrieved text"])
    ref = result.reference
    assert ref is not None and ref.correctness is Correctness.correct and ref.cause is None
    assert [(f.recall, f.correctness) for f in ref.facts] == [(FactRecall.retrieved, FactCorrectness.stated)]
    assert ref.facts[0].recall_chunk_ids == ["c0"] and ref.facts[0].claim_ids == ["k1"]
    assert ref.context_recall == 1.0 and ref.answer_correctness == 1.0 and ref.expected_recall == 0.5
    assert [e.chunk_id for e in ref.expected] == ["c0", None]
    assert result.passed


def test_a_grounded_complete_answer_contradicting_the_reference_does_not_pass():
    # The context itself holds the wrong year: the answer is faithful to the wrong chunk.
    chunks = ["Acme was founded in 1952 by Ruth Calder."]
    result = veralith.evaluate(QUERY, chunks, "Acme was founded in 1952.", persist=False,
                               reference="Acme was founded in 1947.")
    assert result.failure_cell is not None and result.failure_cell.value == "complete_grounded"  # cells unchanged
    ref = result.reference
    assert ref.correctness is Correctness.incorrect and ref.cause == "never_retrieved"
    assert ref.facts[0].correctness is FactCorrectness.contradicted and ref.contradicted_claim_ids == ["k1"]
    assert result.status.quality_gate is Gate.fail and result.status.reason == "contradicts_reference"
    assert result.suggestion.actions[0].startswith("Reference check (retrieval)")


def test_require_correct_fails_a_partial_answer_and_leaves_traces_without_reference_alone():
    with settings.override(gate_require_correct=True):
        partial = veralith.evaluate("When was Acme founded and what does it make?", CHUNKS,
                                    "Acme was founded in 1947. Acme makes anvils and rockets.", persist=False,
                                    reference="Acme was founded in 1947. Acme was founded by Ruth Calder.")
        plain = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1947.", persist=False)
    assert partial.reference.correctness is Correctness.partly_correct
    assert partial.status.quality_gate is Gate.fail and partial.status.reason == "reference_partly_correct"
    assert partial.reference.cause == "retrieved_unused"
    assert plain.passed


def test_only_expected_chunks_are_not_assessed_and_never_nan():
    result = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1947.", persist=False, reference_contexts=["c1"])
    ref = result.reference
    assert ref.correctness is Correctness.not_assessed and ref.facts == []
    assert ref.context_recall is None and ref.answer_correctness is None and ref.expected_recall == 1.0
    assert result.passed   # no reference answer: the gate is the reference-free one
    with settings.override(gate_require_correct=True):
        assert veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1947.", persist=False,
                                 reference_contexts=["c1"]).passed


def test_a_failed_verdict_call_leaves_its_verdicts_none_and_the_gate_undecided():
    from veralith.errors import JudgeCallError
    from veralith.llm.local.client import LocalClient

    class Flaky(LocalClient):
        def run(self, task, payload):
            if task.name == "faithfulness" and any(c.id.startswith("f") for c in payload.claims):
                raise JudgeCallError("timeout", "the server took too long")
            return super().run(task, payload)

    with settings.override(gate_require_correct=True):
        result = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1947.", persist=False, client=Flaky(),
                                   reference="Acme was founded in 1947.")
    ref = result.reference
    assert [(f.recall, f.correctness) for f in ref.facts] == [(None, None)]
    assert ref.correctness is Correctness.not_assessed and "timeout" in (ref.error or "")
    assert ref.context_recall is None and ref.answer_correctness is None
    assert result.status.quality_gate is Gate.indeterminate and result.status.reason == "reference_not_assessed"


def test_a_refusal_with_a_reference_names_retrieval():
    result = veralith.evaluate("Who is Acme's CEO?", CHUNKS, "The documents don't say who Acme's CEO is.",
                               persist=False, reference="Acme's CEO is Dana Wu.")
    ref = result.reference
    assert ref.correctness is Correctness.incorrect and ref.cause == "never_retrieved"
    assert ref.facts[0].correctness is FactCorrectness.missing


def test_log_stores_the_reference_and_it_reads_back(store):
    spooled = veralith.log(QUERY, CHUNKS, "Acme was founded in 1952.", sync=False, evaluate=False,
                           reference="Acme was founded in 1947.", reference_contexts=["c0"])
    veralith.shutdown()   # shipped from the spool into the store (the bulk insert)
    assert store.read(ops.load_input, spooled).reference == Reference(answer="Acme was founded in 1947.", contexts=["c0"])
    assert veralith.resume() == 1 and store.read(ops.load_result, spooled).reference.correctness is Correctness.incorrect
    result = veralith.log(QUERY, CHUNKS, "Acme was founded in 1947.", sync=True,
                          reference="Acme was founded in 1947.", reference_contexts=["c0"])
    back = store.read(ops.load_result, result.trace_id)
    assert back == result and back.reference.correctness is Correctness.correct
    assert store.read(ops.load_input, result.trace_id).reference == Reference(answer="Acme was founded in 1947.",
                                                                    contexts=["c0"])
    plain = veralith.log(QUERY, CHUNKS, "Acme was founded in 1947.", sync=True)
    assert store.read(ops.load_result, plain.trace_id).reference is None
    assert store.read(ops.load_input, plain.trace_id).reference is None


def test_migrate_copies_the_reference(tmp_path):
    from veralith.store import open_store
    from veralith.work.migrate import copy as copy_history

    result = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1952.", reference="Acme was founded in 1947.",
                               reference_contexts=["c0"])
    source = open_store()
    target = open_store(f"sqlite:///{tmp_path / 'copy.db'}")
    report = copy_history(source, target)
    assert not report.mismatches
    assert target.read(ops.load_result, result.trace_id).reference == result.reference
    assert target.read(ops.load_input, result.trace_id).reference == result.reference.given


@pytest.mark.parametrize("record", [
    {"user_input": QUERY, "retrieved_contexts": CHUNKS, "response": "Acme was founded in 1947.",
     "reference": "Acme was founded in 1947.", "reference_contexts": [CHUNKS[0]]},
    {"question": QUERY, "contexts": CHUNKS, "answer": "Acme was founded in 1947.",
     "ground_truth": "Acme was founded in 1947."},
    {"question": QUERY, "contexts": CHUNKS, "answer": "Acme was founded in 1947.",
     "ground_truths": ["Acme was founded in 1947."]},
    {"input": QUERY, "retrieval_context": CHUNKS, "actual_output": "Acme was founded in 1947.",
     "expected_output": "Acme was founded in 1947.", "expected_context": [CHUNKS[0]]},
    {"query": QUERY, "context": CHUNKS, "response": "Acme was founded in 1947.",
     "expected_answer": "Acme was founded in 1947.", "ground_truth_contexts": ["c0"]},
])
def test_every_file_format_reads_the_reference(record):
    from veralith.cli.records import parse_object

    parsed = parse_object(1, record, default_kb="default")
    assert parsed.reference is not None and parsed.reference.answer == "Acme was founded in 1947."


def test_two_reference_aliases_that_disagree_are_a_bad_line():
    from veralith.cli.records import BadLine, parse_object

    bad = parse_object(3, {"query": QUERY, "context": CHUNKS, "response": "x", "reference": "a",
                           "expected_output": "b"}, default_kb="default")
    assert isinstance(bad, BadLine) and '"reference" and "expected_output"' in bad.message


def test_eval_reads_a_ragas_csv_and_a_deepeval_json_and_inspect_and_export_show_it(tmp_path):
    from typer.testing import CliRunner

    from veralith.cli.app import app

    csv_path = tmp_path / "golden.csv"
    csv_path.write_text('question,contexts,answer,expected_answer,reference_contexts\n'
                        f'"{QUERY}","[\'{CHUNKS[0]}\']",Acme was founded in 1952.,Acme was founded in 1947.,'
                        f'"[\'{CHUNKS[0]}\']"\n')
    deepeval = tmp_path / "deepeval.jsonl"
    deepeval.write_text(json.dumps({"input": QUERY, "retrieval_context": CHUNKS, "actual_output":
                                    "Acme was founded in 1947.", "expected_output": "Acme was founded in 1947."})
                        + "\n")
    runner = CliRunner()
    for path in (csv_path, deepeval):
        out = runner.invoke(app, ["eval", str(path)])
        assert out.exit_code in (0, 1), out.output
    shown = runner.invoke(app, ["inspect", "1"], env={"COLUMNS": "200"})
    assert "Reference" in shown.output and "contradicted" in shown.output and "never retrieved" not in shown.output
    exported = runner.invoke(app, ["export", "--format", "csv"])
    assert "correctness,context_recall,answer_correctness" in exported.output
    assert "incorrect" in exported.output and "correct," in exported.output


def test_the_web_trace_page_shows_the_reference_escaped():
    pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'veralith[web]')")
    from starlette.testclient import TestClient

    from veralith.web import create_app

    result = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1952.",
                               reference="Acme was <b>founded</b> in 1947.", reference_contexts=["c0"])
    page = TestClient(create_app(settings.db_path), base_url="http://127.0.0.1:8765").get(f"/traces/{result.trace_id}")
    assert page.status_code == 200
    assert "Reference" in page.text and "&lt;b&gt;founded&lt;/b&gt;" in page.text and "<b>founded" not in page.text
    assert "contradicted" in page.text


def test_trace_decorator_passes_the_reference_arguments():
    seen = {}

    @veralith.trace(context_arg="docs", reference_arg="expected", sync=True)
    def answer(question, docs, expected=None):
        return "Acme was founded in 1947."

    from veralith.sdk import log as log_module

    original = log_module.log

    def spy(**kwargs):
        seen.update(kwargs)
        return original(**kwargs)

    import veralith.sdk.trace as trace_module

    trace_module.log, saved = spy, trace_module.log  # type: ignore[assignment]
    try:
        answer(QUERY, CHUNKS, expected="Acme was founded in 1947.")
    finally:
        trace_module.log = saved
    assert seen["reference"] == "Acme was founded in 1947." and "reference_contexts" not in seen


def test_the_ci_gate_checks_min_correct_and_min_recall(tmp_path):
    from typer.testing import CliRunner

    from veralith.cli.app import app

    path = tmp_path / "golden.jsonl"
    rows = [{"id": "a", "query": QUERY, "context": CHUNKS, "response": "Acme was founded in 1947.",
             "reference": "Acme was founded in 1947."},
            {"id": "b", "query": QUERY, "context": ["Acme was founded in 1952."], "response": "Acme was founded in 1952.",
             "reference": "Acme was founded in 1947."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner = CliRunner()
    failed = runner.invoke(app, ["eval", str(path), "--min-correct", "0.9"], env={"COLUMNS": "200"})
    assert failed.exit_code == 3, failed.output
    assert "correct rate 50.0% (1/2 traces with a reference) is under --min-correct 0.9" in failed.output
    held = runner.invoke(app, ["eval", str(path), "--rejudge", "--min-correct", "0.5", "--min-recall", "0.5"],
                         env={"COLUMNS": "200"})
    assert held.exit_code == 0, held.output
    none = tmp_path / "plain.jsonl"
    none.write_text(json.dumps({"query": QUERY, "context": CHUNKS, "response": "Acme was founded in 1947."}) + "\n")
    out = runner.invoke(app, ["eval", str(none), "--min-recall", "0.1"], env={"COLUMNS": "200"})
    assert out.exit_code == 3 and "not judged: --min-recall" in out.output


def test_assert_diagnosis_checks_correctness_against_a_reference():
    from veralith.testing import DiagnosisMismatch, assert_diagnosis

    assert_diagnosis(QUERY, CHUNKS, "Acme was founded in 1947.", reference="Acme was founded in 1947.",
                     correctness="correct")
    with pytest.raises(DiagnosisMismatch, match=r"(?s)gate fail, expected pass.*reference: incorrect.*f1 context"):
        assert_diagnosis(QUERY, ["Acme was founded in 1952."], "Acme was founded in 1952.",
                         reference="Acme was founded in 1947.")
    with pytest.raises(ValueError, match="pass reference="):
        assert_diagnosis(QUERY, CHUNKS, "x", correctness="correct")


def test_the_budget_guard_and_the_dry_run_count_the_reference_and_nothing_without_one():
    from veralith.llm.estimate import planned_calls
    from veralith.pipeline.budget import estimate_trace
    from veralith.pipeline.inputs import normalize_context

    chunks = normalize_context(CHUNKS)
    plain = planned_calls(QUERY, chunks, "Acme was founded in 1947.", batch_size=6)
    assert planned_calls(QUERY, chunks, "Acme was founded in 1947.", batch_size=6, reference=None) == plain
    with_ref = planned_calls(QUERY, chunks, "Acme was founded in 1947.", batch_size=6,
                             reference="Acme was founded in 1947. Ruth Calder founded it.")
    assert with_ref[:len(plain)] == plain
    assert [task for task, _ in with_ref[len(plain):]] == ["claims", "faithfulness", "faithfulness"]
    with settings.override(backend="openai", judge_model="gpt-4o-mini", api_key="sk-test"):
        base = estimate_trace(QUERY, CHUNKS, "Acme was founded in 1947.")
        more = estimate_trace(QUERY, CHUNKS, "Acme was founded in 1947.", reference="Acme was founded in 1947.")
    assert more.calls == base.calls + 3 and more.input_tokens > base.input_tokens and more.usd > base.usd


def test_stats_count_the_correctness_layer(store):
    from veralith.cli.render import stats_view

    assert store.read(ops.stats)["reference"] == {}
    veralith.log(QUERY, CHUNKS, "Acme was founded in 1947.", sync=True, reference="Acme was founded in 1947.")
    veralith.log(QUERY, ["Acme was founded in 1952."], "Acme was founded in 1952.", sync=True,
                 reference="Acme was founded in 1947.", knowledge_base="other")
    veralith.log(QUERY, CHUNKS, "Acme was founded in 1947.", sync=True)
    ref = store.read(ops.stats)["reference"]
    assert ref["traces"] == 2 and ref["by_correctness"] == {"correct": 1, "incorrect": 1}
    assert ref["mean_context_recall"] == 0.5 and ref["mean_answer_correctness"] == 0.5
    assert store.read(ops.stats, kb="other")["reference"]["by_correctness"] == {"incorrect": 1}
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(stats_view(store.read(ops.stats)))
    assert "reference  correct 1  incorrect 1  (of 2 with a reference answer)" in console.export_text()


def test_migrate_copies_the_reference_out_of_postgresql(pg_url, tmp_path):
    from veralith.store import open_store
    from veralith.work.migrate import copy as copy_history

    result = veralith.evaluate(QUERY, CHUNKS, "Acme was founded in 1952.", reference="Acme was founded in 1947.",
                               reference_contexts=["c0", "an expected chunk never retrieved"])
    target = open_store(f"sqlite:///{tmp_path / 'copy.db'}")
    report = copy_history(open_store(pg_url), target)
    assert not report.mismatches
    assert target.read(ops.load_result, result.trace_id) == open_store(pg_url).read(ops.load_result, result.trace_id)
    assert target.read(ops.load_result, result.trace_id).reference == result.reference
