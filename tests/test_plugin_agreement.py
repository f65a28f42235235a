"""The pytest plugin's label-based check: `veralith.assert_agreement(FILE, min_agreement)` judges a labelled
export and fails below the minimum, with the figure and rule of `veralith eval FILE --expect --min-agreement`
(run through pytester, in a separate pytest session, as a team's CI would)."""

from __future__ import annotations

import json

import pytest
from test_judge_gate import RECORDS
from test_pytest_plugin import _run
from typer.testing import CliRunner

from veralith.cli import app

pytest_plugins = ["pytester"]


@pytest.fixture
def labelled(tmp_path, monkeypatch):
    """A `veralith export --labelled` file: a reviewer agrees with the judge on three verdicts and not on one."""
    from veralith.config import settings

    monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / "team.db"))
    monkeypatch.delenv("VERALITH_DB_URL", raising=False)
    settings.reload()
    runner = CliRunner(env={"COLUMNS": "200"})
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    for args in (["fr", "--claim", "k2", "contradicted", "--gate", "fail"], ["ww2", "--gate", "pass"],
                 ["bad", "--gate", "pass"]):
        assert runner.invoke(app, ["label", *args, "--by", "ann"]).exit_code == 0
    out = tmp_path / "labelled.jsonl"
    assert runner.invoke(app, ["export", "--labelled", "-o", str(out)]).exit_code == 0
    # The CLI gate's own figure on the same file, in a fresh store: the plugin must say the same.
    monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / "ci.db"))
    settings.reload()
    gate = runner.invoke(app, ["eval", str(out), "--expect", "--min-agreement", "0.9"])
    assert gate.exit_code == 3 and "agreement with the expected verdicts: 3/4 = 0.750" in gate.output
    return out


def test_the_plugin_gates_the_judge_on_a_labelled_export(pytester, labelled):
    pytester.makepyfile(f"""
        import pytest
        from veralith.testing import AgreementBelow

        FILE = {str(labelled)!r}

        def test_strict(veralith):
            veralith.assert_agreement(FILE, min_agreement=0.9)

        def test_lenient(veralith):
            found = veralith.assert_agreement(FILE, min_agreement=0.7)
            assert (found.agree, found.total, found.overall) == (3, 4, 0.75)

        def test_the_figures_travel_with_the_failure(veralith):
            with pytest.raises(AgreementBelow) as failed:
                veralith.assert_agreement(FILE, min_agreement=1.0)
            assert failed.value.comparison.report.judges["gate"].agree == 2
    """)
    result = _run(pytester)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*veralith: judge agreement 0.750 is below 0.9 (3/4 expected verdicts agree)*",
                                 "*Judge–human agreement*"])


def test_a_bad_file_is_named_by_its_line_and_the_minimum_is_checked(tmp_path):
    from veralith.testing import assert_agreement

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(dict(RECORDS[1], expected={"gate": "maybe"})) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: gate label 'maybe' is not one of"):
        assert_agreement(bad)
    with pytest.raises(ValueError, match="min_agreement must be from 0 to 1"):
        assert_agreement(bad, 1.5)
    empty = tmp_path / "none.jsonl"
    empty.write_text(json.dumps(RECORDS[1]) + "\n", encoding="utf-8")     # no `expected`: nothing compared
    with pytest.raises(AssertionError, match="nothing could be compared"):
        assert_agreement(empty)
