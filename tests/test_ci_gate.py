"""The CI gate of `veralith eval`: --fail-under and --max-cell, exit 3, the worst traces named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.cli.gate import GateSpec, Outcome, check_gate, parse_spec

PASSING = [
    {"id": "pe", "query": "What is a P/E ratio?",
     "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
     "response": "A P/E ratio divides a company's share price by its earnings per share."},
    {"id": "fr", "query": "What is the capital of France?", "context": ["Paris is the capital of France."],
     "response": "The capital of France is Paris."},
    {"id": "ww2", "query": "When did World War II end?", "context": ["World War II ended in 1945."],
     "response": "World War II ended in 1945."},
    {"id": "ev", "query": "How tall is Mount Everest?", "context": ["Mount Everest is 8,849 metres tall."],
     "response": "Mount Everest is 8,849 metres tall."},
]
FAILING = {"id": "h2o", "query": "What is H2O?", "context": ["H2O is the chemical formula of water."],
           "response": "H2O is water. It boils at 50 degrees."}          # extra_ungrounded on the local backend


def _file(tmp_path: Path, records: list, name: str = "t.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _eval(*args: str):
    return CliRunner().invoke(app, ["eval", *args])


def test_a_pass_rate_under_the_minimum_exits_3_and_names_the_worst_trace(tmp_path):
    result = _eval(_file(tmp_path, [*PASSING, FAILING]), "--fail-under", "0.9")
    assert result.exit_code == 3, result.output
    out = result.output
    assert "quality gate FAILED" in out and "pass rate 80.0% (4/5) is under --fail-under 0.9" in out
    worst = next(line for line in out.splitlines() if " h2o " in line)
    assert "#5" in worst and "t.jsonl:5" in worst and "extra_ungrounded (fail)" in worst
    assert "'It boils at 50 degrees.' not supported by any chunk" in worst


def test_a_pass_rate_at_the_minimum_passes(tmp_path):
    result = _eval(_file(tmp_path, [*PASSING, FAILING]), "--fail-under", "0.8")
    assert result.exit_code == 0, result.output
    assert "quality gate passed: pass rate 80.0% over 5 trace(s)" in result.output


def test_max_cell_counts_traces_in_a_cell(tmp_path):
    path = _file(tmp_path, [*PASSING, FAILING])
    result = _eval(path, "--max-cell", "extra_ungrounded=0", "--max-cell", "complete_grounded=10")
    assert result.exit_code == 3, result.output
    assert "1 trace(s) in extra_ungrounded, more than --max-cell extra_ungrounded=0" in result.output
    assert "complete_grounded" not in result.output.split("quality gate FAILED")[1].split("worst")[0]
    assert _eval(path, "--max-cell", "extra_ungrounded=1").exit_code == 0


@pytest.mark.parametrize("spec, message", [
    ("extra_ungrounded", "expected CELL=N"), ("nocell=1", "expected CELL=N"), ("extra_ungrounded=-1", ">= 0"),
    ("extra_ungrounded=x", "whole number"),
])
def test_a_malformed_max_cell_is_a_bad_option(tmp_path, spec, message):
    result = _eval(_file(tmp_path, PASSING[:1]), "--max-cell", spec)
    assert result.exit_code == 2 and message in result.output


def test_one_cell_limited_twice_with_different_counts_is_a_bad_option(tmp_path):
    path = _file(tmp_path, [*PASSING, FAILING])
    result = _eval(path, "--max-cell", "extra_ungrounded=0", "--max-cell", "extra_ungrounded=5")
    assert result.exit_code == 2, result.output
    assert "extra_ungrounded is already limited to 0; give it once" in result.output
    assert _eval(path, "--max-cell", "extra_ungrounded=0", "--max-cell", "extra_ungrounded=0").exit_code == 3


@pytest.mark.parametrize("name", ["12", "#12"])
def test_a_run_name_that_reads_as_a_run_id_is_a_bad_option(tmp_path, name):
    # `veralith compare A 12` means run #12, so a run named "12" could never be compared by name.
    result = _eval(_file(tmp_path, PASSING[:1]), "--run-name", name)
    assert result.exit_code == 2 and "would be read as a run id; add a letter (e.g. build-12)" in result.output


@pytest.mark.parametrize("name, shown", [("pr-12", "pr-12"), ("my run; rm -rf ~", "'my run; rm -rf ~'"),
                                         ("-x", "1")])
def test_the_compare_hint_after_a_run_is_a_command_to_copy(tmp_path, name, shown):
    result = _eval(_file(tmp_path, PASSING[:1]), "--run-name", name)
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith(f"compare it with an earlier run: veralith compare EARLIER {shown}")


def test_fail_under_must_be_a_rate(tmp_path):
    result = _eval(_file(tmp_path, PASSING[:1]), "--fail-under", "90")
    assert result.exit_code == 2 and "--fail-under" in result.output


def test_record_errors_win_over_the_gate_but_the_gate_is_still_shown(tmp_path):
    result = _eval(_file(tmp_path, [*PASSING, FAILING, "{not json"]), "--fail-under", "0.95")
    assert result.exit_code == 2, result.output
    assert "quality gate FAILED" in result.output


def test_the_gate_works_without_the_database(tmp_path):
    result = _eval(_file(tmp_path, [*PASSING, FAILING]), "--no-persist", "--fail-under", "0.9")
    assert result.exit_code == 3 and "(unsaved) " in result.output and "t.jsonl:5" in result.output


def test_a_rerun_gates_on_every_trace_of_the_run_including_unchanged_ones(tmp_path):
    path = _file(tmp_path, [*PASSING, FAILING])
    assert _eval(path).exit_code == 0
    result = _eval(path, "--fail-under", "0.9")   # nothing is evaluated again
    assert result.exit_code == 3, result.output
    assert "(4/5)" in result.output and "#5 h2o" in result.output


def test_no_gate_options_no_gate_output(tmp_path):
    result = _eval(_file(tmp_path, [*PASSING, FAILING]))
    assert result.exit_code == 0 and "quality gate" not in result.output


# --- the pure gate ------------------------------------------------------------------------------------


def _o(i, cell, gate, faith=1.0):
    return Outcome(line=i, trace_id=i, key=f"k{i}", cell=cell, gate=gate, faithfulness=faith, reason=None)


def test_indeterminate_counts_as_not_passing_and_nothing_at_all_fails():
    spec = parse_spec(0.5, [])
    assert check_gate([_o(1, "complete_grounded", "pass"), _o(2, "indeterminate", "indeterminate")], spec).passed
    assert not check_gate([_o(1, "complete_grounded", "pass"), _o(2, "indeterminate", "indeterminate"),
                           _o(3, "indeterminate", "indeterminate")], spec).passed
    empty = check_gate([], spec)
    assert not empty.passed and empty.pass_rate is None and "no trace" in empty.failures[0]
    assert check_gate([], GateSpec()).passed      # no rule, nothing to break


def test_worst_traces_come_worst_cell_first_then_least_faithful():
    outcomes = [_o(1, "incomplete_grounded", "fail"), _o(2, "complete_ungrounded", "fail", 0.5),
                _o(3, "incomplete_ungrounded", "fail"), _o(4, "complete_ungrounded", "fail", 0.2),
                _o(5, "complete_grounded", "pass")]
    result = check_gate(outcomes, parse_spec(0.9, []))
    assert [o.trace_id for o in result.worst] == [3, 4, 2, 1]
    # a broken --max-cell puts its own cell first
    result = check_gate(outcomes, parse_spec(None, ["incomplete_grounded=0"]))
    assert [o.trace_id for o in result.worst][0] == 1
