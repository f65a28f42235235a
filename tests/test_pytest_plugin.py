"""The pytest plugin (pytest11 entry point) and veralith.testing.assert_diagnosis, run through pytester."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import tomllib

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

GOOD = ('"How long do I have to return an item for a refund?"',
        '["Items can be returned within 30 days of delivery for a full refund."]',
        '"You can return an item within 30 days of delivery for a full refund."')
INVENTED = ('"What is a P/E ratio and what was Apple\'s P/E in 2023?"',
            '["The price-to-earnings (P/E) ratio is a company\'s share price divided by its earnings per share."]',
            '"A P/E ratio divides share price by earnings per share. Apple\'s P/E in 2023 was 42.7."')


def _installed() -> bool:
    return any(ep.value == "veralith.pytest_plugin"
               for ep in importlib.metadata.entry_points(group="pytest11"))


def _run(pytester, *args):
    # The entry point loads the plugin when veralith is installed; a source checkout that was not
    # (re)installed names it explicitly instead (naming it twice would register it twice).
    extra = [] if _installed() else ["-p", "veralith.pytest_plugin"]
    return pytester.runpytest("--veralith-backend", "local", *extra, *args)


def test_the_plugin_is_declared_as_a_pytest11_entry_point():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"veralith": "veralith.pytest_plugin"}


def test_importing_the_plugin_loads_nothing_beyond_import_veralith():
    # It loads in every pytest session of the environment, the project's own included.
    import subprocess
    import sys

    code = ("import sys; before = set(sys.modules); import veralith; base = set(sys.modules) - before; "
            "import veralith.pytest_plugin; print(sorted(m for m in set(sys.modules) - before - base if m.split('.')[0] in ('veralith', 'sqlite_utils', 'openai', 'tiktoken') and m != 'veralith.pytest_plugin'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.usefixtures("store_url")   # the SQLite file, then PostgreSQL as VERALITH_DB_URL
def test_fixture_passes_a_complete_grounded_answer(pytester):
    pytester.makepyfile(f"""
        def test_ok(veralith):
            result = veralith.assert_diagnosis({GOOD[0]}, {GOOD[1]}, {GOOD[2]}, cell="complete_grounded")
            assert result.backend == "local"
    """)
    result = _run(pytester)
    result.assert_outcomes(passed=1)


def test_a_failing_diagnosis_explains_itself(pytester):
    pytester.makepyfile(f"""
        def test_invented(veralith):
            veralith.assert_diagnosis({INVENTED[0]}, {INVENTED[1]}, {INVENTED[2]})
    """)
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "veralith: gate fail, expected pass" in text
    assert "cell:     incomplete_ungrounded" in text
    assert "ungrounded claims (1 of 2):" in text
    assert "unsupported: Apple's P/E in 2023 was 42.7." in text     # the claim itself
    assert "uncovered sub-questions (1 of 2):" in text
    assert "q2 ungrounded answer: What was Apple's P/E in 2023?" in text
    assert "assert False" not in text


def test_assert_diagnosis_can_expect_a_failure_cell(pytester):
    pytester.makepyfile(f"""
        from veralith.testing import assert_diagnosis

        def test_expected_failure():
            r = assert_diagnosis({INVENTED[0]}, {INVENTED[1]}, {INVENTED[2]}, cell="incomplete_ungrounded", gate="fail")
            assert r.failure_cell.value == "incomplete_ungrounded"

        def test_wrong_cell_is_named():
            assert_diagnosis({GOOD[0]}, {GOOD[1]}, {GOOD[2]}, cell="extra_grounded", gate=None)
    """)
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*veralith: cell complete_grounded, expected extra_grounded*"])


def test_bad_arguments_are_errors_not_mismatches(tmp_path):
    from veralith.testing import assert_diagnosis

    with pytest.raises(ValueError, match="cell must be one of"):
        assert_diagnosis("q?", ["c"], "r", cell="complete")
    with pytest.raises(ValueError, match="gate must be one of"):
        assert_diagnosis("q?", ["c"], "r", gate="ok")


def test_assert_diagnosis_writes_nothing(store_url):
    from store_support import sql

    from veralith.config import settings
    from veralith.store import open_store
    from veralith.testing import assert_diagnosis

    assert_diagnosis("How long do I have to return an item for a refund?",
                     ["Items can be returned within 30 days of delivery for a full refund."],
                     "You can return an item within 30 days of delivery for a full refund.", gate=None)
    if store_url.startswith("sqlite:"):
        assert not Path(settings.db_path).exists()
    else:
        assert sql(open_store(store_url), "SELECT (SELECT COUNT(*) FROM traces) + (SELECT COUNT(*) FROM runs)") == [(0,)]


def test_an_unknown_backend_option_is_refused(pytester):
    pytester.makepyfile("def test_x(veralith): pass")
    extra = [] if _installed() else ["-p", "veralith.pytest_plugin"]
    result = pytester.runpytest("--veralith-backend", "gpt", *extra)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*invalid choice*"])
