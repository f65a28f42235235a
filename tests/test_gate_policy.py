"""Which cells fail the gate is the project's policy (VERALITH_GATE_FAIL_CELLS, veralith.policy); the
suggestion's title follows the sufficiency level where the wording depends on it."""

from __future__ import annotations

import contextlib

import pytest

from veralith.config import ConfigError, settings
from veralith.models import Availability, FailureCell, Gate, SufficiencyLevel
from veralith.pipeline.suggest import SUGGESTIONS, suggest
from veralith.policy import fail_cells, quality_gate


def _gate(cell: FailureCell) -> tuple[Gate, str, str]:
    return quality_gate(failure_cell=cell, availability=Availability.assessed)


def test_by_default_every_cell_but_complete_grounded_fails():
    assert fail_cells() == frozenset(FailureCell) - {FailureCell.complete_grounded}
    assert _gate(FailureCell.complete_grounded)[0] is Gate.pass_
    for cell in fail_cells():
        assert _gate(cell)[0] is Gate.fail, cell


def test_a_cell_left_out_of_the_policy_passes_and_says_why():
    with settings.override(gate_fail_cells="incomplete_ungrounded, complete_ungrounded,extra_ungrounded"):
        gate, reason, summary = _gate(FailureCell.extra_grounded)
        assert gate is Gate.pass_ and reason == "cell_allowed" and "VERALITH_GATE_FAIL_CELLS" in summary
        assert _gate(FailureCell.incomplete_ungrounded)[0] is Gate.fail
    # Nothing judged and nothing said are never passes, whatever the policy.
    with settings.override(gate_fail_cells="extra_ungrounded"):
        assert quality_gate(failure_cell=None, availability=Availability.not_evaluated)[0] is Gate.indeterminate
        assert quality_gate(failure_cell=FailureCell.incomplete_grounded,
                            availability=Availability.no_assessable_claims)[0] is Gate.fail


def test_the_policy_reaches_an_evaluated_trace(monkeypatch):
    import veralith

    args = ("What is H2O?", ["H2O is the chemical formula of water."], "H2O is water. It boils at 50 degrees.")
    assert veralith.evaluate(*args, persist=False).status.quality_gate is Gate.fail
    monkeypatch.setenv("VERALITH_GATE_FAIL_CELLS", "incomplete_ungrounded")
    settings.reload()
    result = veralith.evaluate(*args, persist=False)
    assert result.failure_cell is not FailureCell.incomplete_ungrounded
    assert result.status.quality_gate is Gate.pass_ and result.status.reason == "cell_allowed"


@pytest.mark.parametrize("value, words", [("bogus", "not a failure cell"), ("complete_grounded", "always passes"),
                                          (" , ", "at least one")])
def test_a_bad_policy_is_one_line_naming_the_variable(monkeypatch, tmp_path, value, words):
    from typer.testing import CliRunner

    from veralith.cli import app

    monkeypatch.setenv("VERALITH_GATE_FAIL_CELLS", value)
    with contextlib.suppress(ConfigError):
        settings.reload()
    path = tmp_path / "t.jsonl"
    path.write_text('{"query": "q?", "context": ["c"], "response": "r."}\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", str(path)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith("error: VERALITH_GATE_FAIL_CELLS") and words in result.stderr


def test_an_invented_claim_with_good_retrieval_is_a_generator_hallucination():
    high = suggest(FailureCell.incomplete_ungrounded, SufficiencyLevel.high, refusal=False, faithfulness=[])
    low = suggest(FailureCell.incomplete_ungrounded, SufficiencyLevel.low, refusal=False, faithfulness=[])
    assert high.title == "Generator hallucination" and low.title == "Worst-case failure"
    # Every cell's two wordings differ, as the level is the only thing that picks between them.
    for cell in FailureCell:
        assert SUGGESTIONS[(cell, SufficiencyLevel.high)].title != SUGGESTIONS[(cell, SufficiencyLevel.low)].title
