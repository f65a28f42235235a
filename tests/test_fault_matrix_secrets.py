"""The fault matrix's search for the password it set (issue 35, Must hold): run on one small scenario,
every output it collects (processes' stdout and stderr, the apps' lines, the store's rows, the web
view's pages) is free of it, and the search does find it where it is planted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location("fault_matrix", REPO / "benchmarks" / "fault_matrix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_matrix"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_scenario_prints_and_stores_the_password_nowhere(matrix, kind, request, tmp_path):
    pg = request.getfixturevalue("pg_server") if kind == "postgres" else None
    fleet = matrix.Fleet(kind, pg, tmp_path)
    assert matrix.SECRET in fleet.url or kind == "sqlite"
    assert fleet.env["VERALITH_API_KEY"] == matrix.SECRET
    row = matrix.Row(fault="small", store=kind)
    row.exits["app"] = fleet.finish_app("a", fleet.start_app("a", 4, poison="1"))
    row.exits["worker --once"] = fleet.cli("worker", "--once").returncode
    row.exits["stats"] = fleet.cli("stats").returncode
    fleet.audit(row)
    assert row.returned >= 3 and fleet.outputs and any(text for _, text in fleet.outputs)
    assert row.leaks == [], row.leaks

    # The search looks where it says: a secret planted in an output, a stderr file and a row is found.
    fleet.outputs.append(("planted", f"error: {matrix.SECRET}"))
    (tmp_path / "planted.err").write_text(matrix.SECRET)
    if kind == "sqlite":   # Fleet.sql reads PostgreSQL on read-only connections
        fleet.sql("UPDATE traces SET status_reason = ? WHERE id = (SELECT MIN(id) FROM traces)", [matrix.SECRET])
    seen = fleet.leaks()
    assert "planted" in seen and "planted.err" in seen and ("table traces" in seen or kind != "sqlite")
