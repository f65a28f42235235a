"""Input files from other tools: RAGAS and DeepEval field names in JSONL, and CSV with the same columns."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app, records
from veralith.models import EvaluationResult

CONTEXT = ["Paris is the capital of France."]


def _parse(obj: dict):
    return records.parse_line(3, json.dumps(obj).encode(), default_kb="kb")


@pytest.mark.parametrize("obj", [
    {"query": "Capital?", "context": CONTEXT, "response": "Paris."},
    {"user_input": "Capital?", "retrieved_contexts": CONTEXT, "response": "Paris."},            # RAGAS
    {"question": "Capital?", "contexts": CONTEXT, "answer": "Paris.", "ground_truth": "Paris"},  # RAGAS < 0.2
    {"input": "Capital?", "retrieval_context": CONTEXT, "actual_output": "Paris."},              # DeepEval
    {"query": "Capital?", "user_input": "Capital?", "context": CONTEXT, "response": "Paris."},  # agreeing aliases
])
def test_field_names_of_other_tools_are_read_as_aliases(obj):
    record = _parse(obj)
    assert isinstance(record, records.Record), record
    assert (record.query, [c.text for c in record.context], record.response) == ("Capital?", CONTEXT, "Paris.")


def test_two_aliases_with_different_values_are_an_error():
    bad = _parse({"question": "Capital?", "user_input": "Largest city?", "contexts": CONTEXT, "answer": "Paris."})
    assert isinstance(bad, records.BadLine) and bad.line == 3
    assert bad.message.startswith('"user_input" and "question" both give the query, with different values; keep one')


def test_a_record_matching_no_names_says_which_are_expected():
    bad = _parse({"prompt": "Capital?", "docs": CONTEXT, "completion": "Paris."})
    assert isinstance(bad, records.BadLine)
    assert bad.message == ('no known field names (got "prompt", "docs", "completion"); expected query, context, '
                           "response, or the names of RAGAS (user_input, retrieved_contexts, response; older: "
                           "question, contexts, answer) or DeepEval (input, retrieval_context, actual_output)")
    partial = _parse({"user_input": "Capital?", "response": "Paris."})
    assert partial.message == ('missing required field "context" (or "retrieved_contexts", "contexts" or '
                               '"retrieval_context")')


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_csv_rows_become_records_numbered_by_the_line_they_start_on(tmp_path):
    path = _csv(tmp_path / "in.CSV", ["id", "user_input", "retrieved_contexts", "response", "metadata",
                                      "knowledge_base"], [
        ["r1", "Capital of France?", json.dumps(CONTEXT), "Paris.", '{"user_id": "u7"}', ""],
        ["r2", "When did the war\nend?", "It ended in 1945.", "1945.", "", "history"],   # two lines, one text
        ["r3", "Nothing retrieved?", "", "I don't know.", "", ""],
        ["r4", "Odd text?", "[1] is a footnote, not JSON", "Yes.", "", ""],
        ["r5", "Bad metadata?", "[]", "r", "{oops", ""],
    ])
    items = list(records.read_records(path, default_kb="kb"))
    assert records.count_lines(path) == 5
    assert [item.line for item in items] == [2, 3, 5, 6, 7]
    r1, r2, r3, r4, bad = items
    assert [c.text for c in r1.context] == CONTEXT and r1.metadata["user_id"] == "u7" and r1.knowledge_base == "kb"
    assert r2.query == "When did the war\nend?" and [c.text for c in r2.context] == ["It ended in 1945."]
    assert r2.knowledge_base == "history" and r3.context == []
    assert [c.text for c in r4.context] == ["[1] is a footnote, not JSON"]
    assert isinstance(bad, records.BadLine) and "metadata must be a JSON object" in bad.message


def test_csv_problems_name_their_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"question,contexts,answer\n"
                     b"ok?,fine,yes\n"
                     b"caf\xe9?,x,y\n"          # Latin-1, not UTF-8
                     b"\n"
                     b"too,many,cells,here\n"
                     b"too few\n"
                     b"last?,\"[\"\"a\"\", \"\"b\"\"]\",z\n")
    items = list(records.read_records(path))
    summary = [(i.line, i.message if isinstance(i, records.BadLine) else "ok") for i in items]
    assert summary == [(2, "ok"), (3, "not valid UTF-8"), (4, "blank line, skipped"),
                       (5, "4 cells but the header names 3 columns"), (6, "1 cells but the header names 3 columns"),
                       (7, "ok")]
    assert [c.text for c in items[-1].context] == ["a", "b"]


def test_a_csv_header_with_no_known_columns_is_reported_once(tmp_path):
    path = _csv(tmp_path / "x.csv", ["prompt", "docs", "completion"], [["a", "b", "c"]] * 3)
    items = list(records.read_records(path))
    assert len(items) == 1 and items[0].line == 1
    assert items[0].message.startswith('CSV header: no known field names (got "prompt", "docs", "completion")')


def test_eval_reads_a_csv_file_and_a_ragas_jsonl_file(tmp_path):
    csv_path = _csv(tmp_path / "in.csv", ["id", "input", "retrieval_context", "actual_output"],
                    [["a", "What is the capital of France?", json.dumps(CONTEXT), "The capital of France is Paris."],
                     ["b", "Broken?", "x", ""]])
    jsonl = tmp_path / "ragas.jsonl"
    jsonl.write_text(json.dumps({"user_input": "What is the capital of France?", "retrieved_contexts": CONTEXT,
                                 "response": "The capital of France is Paris.", "reference": "Paris"}) + "\n"
                     + json.dumps({"foo": 1}) + "\n", encoding="utf-8")
    runner = CliRunner(env={"COLUMNS": "200"})
    for path, good in ((csv_path, 2), (jsonl, 1)):
        out = tmp_path / f"{path.stem}.results.jsonl"
        shown = runner.invoke(app, ["eval", str(path), "--no-persist", "-o", str(out)])
        results = [EvaluationResult.model_validate_json(line) for line in out.read_text().splitlines()]
        assert len(results) == good, shown.output
        assert results[0].query == "What is the capital of France?" and results[0].context[0].text == CONTEXT[0]
    assert shown.exit_code == 2 and f"{jsonl}:2: no known field names" in shown.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text("query,context,response\n")
    shown = runner.invoke(app, ["eval", str(empty)])
    assert shown.exit_code == 1 and "is empty: expected a header row and one row per trace" in shown.stderr


def test_a_csv_context_written_by_pandas_is_read_as_its_chunks(tmp_path):
    # RAGAS' dataset.to_pandas().to_csv() writes a list column as Python's repr, quotes and all.
    path = _csv(tmp_path / "ragas.csv", ["user_input", "retrieved_contexts", "response"], [
        ["Shipping?", str(["Shipping takes 3 days.", "It's free over $50."]), "3 days."],
        ["Odd?", "['unclosed", "Yes."],
        ["Mixed?", "['a', 1]", "Yes."],
    ])
    pandas_list, unclosed, mixed = records.read_records(path)
    assert [c.text for c in pandas_list.context] == ["Shipping takes 3 days.", "It's free over $50."]
    assert [c.text for c in unclosed.context] == ["['unclosed"]
    assert [c.text for c in mixed.context] == ["['a', 1]"]


def test_a_json_array_file_is_refused_whole_with_how_to_convert_it(tmp_path):
    # DeepEval's save_as(file_type="json") writes an indented array: read as JSONL, its one-line
    # objects would be judged and every other line reported bad.
    cases = [{"input": "Capital?", "retrieval_context": CONTEXT, "actual_output": "Paris."}] * 2
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases, indent=None).replace("}, {", "},\n{").replace("[{", "[\n{") + "\n]\n")
    assert path.read_text().splitlines()[0] == "["
    shown = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["eval", str(path)])
    assert shown.exit_code == 1, shown.output
    assert f"{path} is a JSON array; `veralith eval` reads JSONL, one JSON object per line" in shown.stderr
    assert shown.stdout == ""
    one_line = tmp_path / "one.jsonl"
    one_line.write_text(json.dumps(cases) + "\n")        # a per-line problem, reported as such
    assert not records.is_json_array(one_line)
