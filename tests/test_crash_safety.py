"""Crash safety: a process killed with SIGKILL mid-evaluation loses no trace and leaves none half-written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from store_support import is_sqlite, scalar, sql

from veralith.models import FailureCell
from veralith.sdk.log import resume, shutdown
from veralith.store import TraceNotEvaluated, ops

N = 200
CHILD = textwrap.dedent("""
    import sys, time
    import veralith.sdk.log as sdk
    ids = [sdk.log(f"What is item {i}?", [f"Item {i} is a widget.", "Widgets are small."], f"Item {i} is a widget.")
           for i in range(int(sys.argv[1]))]
    print("LOGGED", len(ids), flush=True)
    time.sleep(600)  # the worker evaluates slowly until the parent kills us
""")
CHILD_TABLES = ("sub_questions", "claims", "sufficiency_judgments", "faithfulness_judgments", "grounding",
                "completeness", "completeness_mappings", "completeness_extras", "judge_errors")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_evaluation_loses_nothing_and_resume_finishes(store, openai_server, tmp_path):
    openai_server.latency_s = 0.5
    env = {**os.environ, "VERALITH_BACKEND": "openai", "VERALITH_BASE_URL": openai_server.base_url,
           "VERALITH_API_KEY": "test", "VERALITH_MAX_RETRIES": "0", "VERALITH_CACHE": "off"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(N)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["LOGGED", str(N)]
        deadline = time.time() + 60
        # Kill once every trace is shipped from the child's spool into the store, a few results are
        # stored and another evaluation is in flight.
        while time.time() < deadline and not (
                scalar(store, "SELECT COUNT(*) FROM traces") == N
                and scalar(store, "SELECT COUNT(*) FROM traces WHERE status = 'done'") >= 2
                and scalar(store, "SELECT COUNT(*) FROM traces WHERE status = 'running'") >= 1):
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()  # reaped: its pid is gone, so its lease is stale at once
    if is_sqlite(store):
        assert scalar(store, "PRAGMA integrity_check") == "ok"
    assert scalar(store, "SELECT COUNT(*) FROM traces") == N
    assert scalar(store, "SELECT COUNT(*) FROM context_chunks") == 2 * N
    by_status = dict(sql(store, "SELECT status, COUNT(*) FROM traces GROUP BY status"))
    assert set(by_status) <= {"done", "pending", "running"} and by_status.get("done", 0) >= 2
    assert by_status.get("pending", 0) + by_status.get("running", 0) > 0, "killed too late to test anything"
    ids = [trace_id for trace_id, _ in sql(store, "SELECT id, status FROM traces ORDER BY id")]
    for trace_id, status in sql(store, "SELECT id, status FROM traces ORDER BY id"):
        if status == "done":  # complete: every judgment of the result is there
            result = store.read(ops.load_result, trace_id)
            assert result.backend == "openai" and len(result.claims) == result.diagnosis.n_claims
        else:  # untouched: no partial judgments
            with pytest.raises(TraceNotEvaluated):
                store.read(ops.load_result, trace_id)
            for table in CHILD_TABLES:
                assert scalar(store, f"SELECT COUNT(*) FROM {table} WHERE trace_id = ?", [trace_id]) == 0
    unfinished = N - by_status["done"]
    assert resume() == unfinished  # evaluated here with the local backend
    shutdown(wait=True)
    assert dict(sql(store, "SELECT status, COUNT(*) FROM traces GROUP BY status")) == {"done": N}
    assert all(r.failure_cell in FailureCell for r in map(store.load_result, ids))
