"""A gate over traces that were never judged is never "passed" (issue 22, item 1).

After a judge outage every record holds only judge errors. A re-run must judge those records again
(they are not "already evaluated"), and the CI gate must not call a run passed when nothing in it
was assessed, nor print "quality gate passed" on a run that exits 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.cli.gate import GateSpec, Outcome, check_gate
from veralith.config import settings

RECORDS = [{"id": f"r{i}", "query": f"What is the boiling point of compound {i}?",
            "context": [f"Compound {i} boils at {100 + i} degrees Celsius."],
            "response": f"Compound {i} boils at {100 + i} degrees Celsius."} for i in range(3)]


def _file(tmp_path: Path) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return str(path)


def _outage(server, monkeypatch) -> None:
    monkeypatch.setenv("VERALITH_BACKEND", "openai")
    monkeypatch.setenv("VERALITH_BASE_URL", server.base_url)
    monkeypatch.setenv("VERALITH_API_KEY", "test")
    monkeypatch.setenv("VERALITH_MAX_RETRIES", "0")
    settings.reload()
    server.set_faults(rate_500=1.0)


def _eval(*args: str):
    """`veralith eval` as a fresh process would run it. In-process, the judge server's circuit breaker
    (veralith.llm.server, kept for a process's lifetime by the cached client) would carry over from the
    previous command: on a slow machine the outage opens it, and the next command finds it still open."""
    from veralith.llm.backends import forget_clients

    forget_clients()
    return CliRunner().invoke(app, ["eval", *args])


def _gate_line(output: str) -> str:
    return next((line for line in output.splitlines() if line.startswith("quality gate")), "")


@pytest.mark.parametrize("breaker_span_s", [None, 0.0], ids=["as-shipped", "breaker-opens"])
def test_a_rerun_after_an_outage_judges_again_and_never_passes_the_gate(openai_server, monkeypatch, tmp_path,
                                                                         breaker_span_s):
    """`breaker-opens`: the circuit breaker opens during each outage run, as it does wherever the
    failures take longer than its span (a slow machine); each command still starts afresh."""
    if breaker_span_s is not None:
        import veralith.llm.server as server

        monkeypatch.setattr(server, "BREAKER_SPAN_S", breaker_span_s)
    _outage(openai_server, monkeypatch)
    path = _file(tmp_path)
    gate = ["--max-cell", "incomplete_ungrounded=0"]

    first = _eval(path, *gate)
    assert first.exit_code == 2, first.output
    assert "quality gate passed" not in first.output
    assert "not judged" in _gate_line(first.output), first.output

    for _ in range(2):  # every re-run, not only the first
        calls = openai_server.count
        again = _eval(path, *gate)
        assert again.exit_code != 0, again.output
        assert "quality gate passed" not in again.output
        assert "not judged" in _gate_line(again.output), again.output
        assert "already evaluated" not in again.output
        assert openai_server.count > calls, "records holding only judge errors must be judged again"

    openai_server.set_faults(rate_500=0.0)  # the server is back: the same command judges and passes
    healed = _eval(path, *gate)
    assert healed.exit_code == 0, healed.output
    assert "quality gate passed" in healed.output


def test_a_run_that_exits_2_never_prints_quality_gate_passed(openai_server, monkeypatch, tmp_path):
    _outage(openai_server, monkeypatch)
    result = CliRunner().invoke(app, ["eval", _file(tmp_path), "--fail-under", "0"])
    assert result.exit_code == 2, result.output
    assert "quality gate passed" not in result.output
    assert "not judged" in _gate_line(result.output)


def _outcome(i: int, cell: str, gate: str) -> Outcome:
    return Outcome(line=i, trace_id=i, key=f"r{i}", cell=cell, gate=gate, faithfulness=None, reason=None)


def test_check_gate_fails_when_nothing_was_assessed():
    outcomes = [_outcome(i, "indeterminate", "indeterminate") for i in range(1, 4)]
    for spec in (GateSpec(max_cells={"incomplete_ungrounded": 0}), GateSpec(fail_under=0.0)):
        result = check_gate(outcomes, spec)
        assert not result.passed
        assert any("not judged" in line for line in result.failures)


def test_check_gate_still_passes_a_run_with_assessed_traces():
    outcomes = [_outcome(1, "complete_grounded", "pass"), _outcome(2, "indeterminate", "indeterminate")]
    assert check_gate(outcomes, GateSpec(max_cells={"incomplete_ungrounded": 0})).passed
