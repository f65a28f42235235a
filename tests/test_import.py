"""`veralith import FILE`: OTLP JSON (OpenInference and GenAI attributes), Phoenix spans and Langfuse
traces grouped into (query, context, response) traces and judged as `veralith eval` judges.

The fixture files under tests/import_fixtures/ were written from the formats' public specifications
(OTLP's JSON encoding, the OpenInference and GenAI semantic conventions, Phoenix's span listing,
Langfuse's trace API); their texts are invented.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from otlp_synthetic import SPANS_PER_TRACE, answer, documents, export, question, trace_id
from typer.testing import CliRunner

from veralith.cli import app
from veralith.importers import Problem, UnknownFormat, read_file, read_values
from veralith.store import open_store, ops

FIXTURES = Path(__file__).parent / "import_fixtures"


def _records(path: Path) -> list:
    return read_file(path).traces


# --- each format, from its fixture ---------------------------------------------------------------------


def test_otlp_with_openinference_attributes():
    imported = read_file(FIXTURES / "otlp_openinference.json")
    assert (imported.format, imported.spans) == ("otlp", 4)
    record, skipped = imported.traces
    assert record["id"] == "5b8efff798038103d269b633813fc60c"
    assert record["query"] == "How long is the Halvard 2 kettle's warranty?"  # the root's JSON input, read
    assert record["response"] == "The Halvard 2 kettle has a two-year warranty."
    assert [(c["id"], c["rank"], c["score"], c.get("source")) for c in record["context"]] == [
        ("kb-12", 1, 0.82, "warranty.md"), ("kb-40", 2, 0.41, None)]
    assert record["context"][0]["metadata"] == {"source": "warranty.md", "page": 1}
    assert record["latency_ms"] == {"total": 900.0, "retrieval": 120.0, "generation": 740.0}
    assert record["metadata"] == {"source": "otlp", "trace_id": record["id"], "root_span": "RetrievalQA",
                                  "service": "kettle-support"}
    assert isinstance(skipped, Problem) and skipped.not_rag and "no retriever span" in skipped.message


def test_otlp_json_lines_with_genai_attributes_in_both_spellings():
    first, second = _records(FIXTURES / "otlp_genai.jsonl")
    assert (first["query"], first["response"]) == ("Does the Halvard 2 kettle switch itself off?",
                                                   "Yes: it switches off when the water boils or the jug is empty.")
    assert [(c["id"], c["score"]) for c in first["context"]] == [("kb-7", 0.77)]
    assert first["latency_ms"] == {"total": 1200.0, "retrieval": 200.0, "generation": 850.0}
    # snake_case fields, OpenLLMetry's flattened gen_ai.prompt/completion, documents as a kvlist array
    assert (second["query"], second["response"]) == ("Is the Halvard 2 base cordless?",
                                                     "Yes, the base is cordless and turns all the way round.")
    assert [c["text"] for c in second["context"]] == ["The Halvard 2 kettle's base is cordless and turns 360 degrees."]
    assert second["latency_ms"]["total"] == 750.0  # no single root: first start to last end


def test_phoenix_spans_with_a_reranker_give_what_the_model_was_given():
    imported = read_file(FIXTURES / "phoenix_spans.json")
    (record,) = imported.traces
    assert imported.format == "phoenix"
    assert record["query"] == "What colours does the Halvard 2 kettle come in?"
    assert [(c["id"], c["score"]) for c in record["context"]] == [("kb-21", 0.97)]  # the reranker's output
    assert record["latency_ms"] == {"total": 1100.0, "retrieval": 200.0, "generation": 780.0}


def test_langfuse_traces_with_observations():
    imported = read_file(FIXTURES / "langfuse_traces.json")
    record, small_talk = imported.traces
    assert imported.format == "langfuse"
    assert (record["id"], record["query"], record["response"]) == (
        "b1f2e3d4-0000-4000-8000-000000000001", "Can the Halvard 2 kettle boil half a litre?",
        "Yes, the minimum fill is 0.5 litres.")
    assert [(c["text"][:22], c["source"], c["rank"]) for c in record["context"]] == [
        ("The Halvard 2 kettle n", "manual.pdf", 1)]
    assert record["latency_ms"] == {"total": 1300.0, "retrieval": 250.0, "generation": 930.0}
    assert isinstance(small_talk, Problem) and small_talk.not_rag


def test_langfuse_observations_alone_and_in_snake_case_are_grouped_by_trace():
    observations = [
        {"id": "o1", "trace_id": "t1", "type": "SPAN", "name": "retriever", "start_time": "2024-01-01T00:00:00Z",
         "end_time": "2024-01-01T00:00:00.200Z", "input": "kettle colours",
         "output": [{"page_content": "It is sold in grey and cream.", "metadata": {}}]},
        {"id": "o2", "trace_id": "t1", "type": "GENERATION", "start_time": "2024-01-01T00:00:00.300Z",
         "end_time": "2024-01-01T00:00:01Z", "input": {"messages": [{"role": "user", "content": "Which colours?"}]},
         "output": {"choices": [{"message": {"role": "assistant", "content": "Grey and cream."}}]}}]
    (record,) = read_values([{"data": observations}]).traces
    assert (record["query"], record["response"], [c["text"] for c in record["context"]]) == (
        "kettle colours", "Grey and cream.", ["It is sold in grey and cream."])


# --- grouping at scale -------------------------------------------------------------------------------


def test_ten_thousand_spans_shuffled_across_blocks_are_grouped_into_their_traces():
    traces = 10_000 // SPANS_PER_TRACE
    imported = read_values([export(traces, blocks=7, seed=3)])
    assert (imported.format, imported.spans, len(imported.traces)) == ("otlp", 10_000, traces)
    for i, record in enumerate(imported.traces):  # ordered by start time: trace i starts i * 2 s in
        assert record["id"] == trace_id(i)
        assert (record["query"], record["response"]) == (question(i), answer(i))
        assert [c["text"] for c in record["context"]] == documents(i)
        assert [c["rank"] for c in record["context"]] == [1, 2, 3]
        assert record["latency_ms"] == {"total": 900.0, "retrieval": 120.0, "generation": 700.0}


# --- what cannot be read -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty"),
    ("not json at all\n{\"x\": 1}", "not JSON, nor JSON lines"),
    ('{"traces": []}', 'found a JSON object with keys "traces"; expected OTLP JSON'),
    ("[1, 2, 3]", "found a JSON list of int"),
    ('[{"name": "x"}]', "the first has keys 'name'"),
])
def test_an_unknown_shape_says_what_it_found_and_what_is_expected(tmp_path, text, words):
    path = tmp_path / "spans.json"
    path.write_text(text)
    with pytest.raises(UnknownFormat) as caught:
        read_file(path)
    assert words in str(caught.value)


def test_a_trace_missing_a_part_names_what_is_missing():
    def span(span_id, kind, attrs=None):
        pairs = [{"key": k, "value": {"stringValue": v}}
                 for k, v in {"openinference.span.kind": kind, **(attrs or {})}.items()]
        return {"traceId": "t", "spanId": span_id, "name": kind.lower(), "attributes": pairs}

    def problem(*spans):
        (item,) = read_values([{"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}]).traces
        assert isinstance(item, Problem) and not item.not_rag
        return item.message

    text = {"retrieval.documents.0.document.content": "A text."}
    assert problem(span("r", "RETRIEVER", text), span("l", "LLM")).startswith("no question")
    assert problem(span("r", "RETRIEVER", {"input.value": "q?", **text})).startswith("no answer")
    ids_only = {"input.value": "q?", "gen_ai.retrieval.documents": json.dumps([{"id": "d1", "score": 0.9}])}
    assert "carry no text" in problem(span("r", "RETRIEVER", ids_only), span("l", "LLM", {"output.value": "An answer."}))


# --- the command -------------------------------------------------------------------------------------


def test_import_judges_the_traces_stores_them_by_trace_id_and_a_second_run_skips_them():
    runner = CliRunner()
    first = runner.invoke(app, ["import", str(FIXTURES / "otlp_openinference.json"), "--kb", "kettles"])
    assert first.exit_code == 0, first.output
    assert "otlp, 4 spans in 2 traces" in first.stdout and "not a RAG answer, skipped" in first.stderr
    (row,) = open_store().read(ops.list_traces)
    store = open_store()
    stored = store.read(ops.load_input, row["id"])
    assert (row["status"], stored.knowledge_base, stored.external_id) == ("done", "kettles",
                                                                          "5b8efff798038103d269b633813fc60c")
    assert [(c.id, c.rank, c.score) for c in stored.context] == [("kb-12", 1, 0.82), ("kb-40", 2, 0.41)]
    assert store.read(ops.trace_info, row["id"]).app_latency_ms == {"total": 900.0, "retrieval": 120.0, "generation": 740.0}
    again = runner.invoke(app, ["import", str(FIXTURES / "otlp_openinference.json"), "--kb", "kettles"])
    assert again.exit_code == 0 and "1 already evaluated" in " ".join(again.stdout.split())
    assert len(open_store().read(ops.list_traces)) == 1


@pytest.mark.parametrize("fixture", ["otlp_openinference.json", "langfuse_traces.json"])
def test_progress_counts_only_the_traces_it_judges(fixture):
    # Each fixture holds one RAG answer and one trace that retrieved nothing (skipped, reported):
    # the progress line must not say "1/2 done" for a run that finished everything it had to judge.
    shown = CliRunner().invoke(app, ["import", str(FIXTURES / fixture), "--no-persist"])
    assert shown.exit_code == 0, shown.output
    assert "not a RAG answer, skipped" in shown.stderr
    (progress,) = [line for line in shown.stderr.splitlines() if line.startswith("veralith: ")]
    assert progress.startswith("veralith: 1/1 done, 0 errors"), progress


def test_import_without_persisting_writes_the_results_out(tmp_path):
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["import", str(FIXTURES / "phoenix_spans.json"), "--no-persist", "-o", str(out)])
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["query"] == "What colours does the Halvard 2 kettle come in?" and line["context"][0]["rank"] == 1
    assert not (tmp_path / "veralith.db").exists() or open_store().read(ops.list_traces) == []


def test_import_refuses_what_it_cannot_read_in_one_line(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["import", str(tmp_path / "nope.json")])
    assert missing.exit_code == 1 and "no such file" in missing.stderr
    (tmp_path / "other.json").write_text('{"rows": [1]}')
    other = runner.invoke(app, ["import", str(tmp_path / "other.json")])
    assert other.exit_code == 1 and 'found a JSON object with keys "rows"' in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1
    bad = runner.invoke(app, ["import", str(FIXTURES / "langfuse_traces.json"), "--backend", "magic"])
    assert bad.exit_code == 2 and "--backend 'magic'" in bad.stderr


def test_an_eval_record_may_carry_the_apps_latency(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"id": "r1", "query": "Q?", "context": ["A."], "response": "A.",
                                "latency_ms": {"total": 420, "retrieval": 60}}) + "\n"
                    + json.dumps({"id": "r2", "query": "Q?", "context": ["A."], "response": "A.",
                                  "latency_ms": -1}) + "\n")
    result = CliRunner().invoke(app, ["eval", str(path)])
    assert result.exit_code == 2 and f"{path}:2: latency_ms must be a finite number" in result.stderr
    (row,) = open_store().read(ops.list_traces)
    assert open_store().read(ops.trace_info, row["id"]).app_latency_ms == {"total": 420.0, "retrieval": 60.0}
