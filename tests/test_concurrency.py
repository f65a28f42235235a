"""Several processes logging into one store at once: every trace stored once and evaluated once
(the SQLite file, and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from store_support import is_sqlite, scalar, sql

from veralith.store import ops

PROCESSES = 8
# Per process. On PostgreSQL every statement is a round trip (a stored result costs ~4x SQLite's
# time here), so it logs fewer traces to keep the suite's time down: still eight processes
# shipping, claiming and saving at once. The full-size run is benchmarks' (issue 23).
PER_PROCESS = {"sqlite": 300, "postgres": 100}
CHILD = textwrap.dedent("""
    import os, sys
    import veralith.sdk.log as sdk
    tag = sys.argv[1]
    ids = [sdk.log(f"What does part {tag}-{i} do?", [f"Part {tag}-{i} holds the door.", "Doors open."],
                   f"Part {tag}-{i} holds the door.", knowledge_base=f"kb{int(tag) % 2}", metadata={"p": tag, "i": i})
           for i in range(int(sys.argv[2]))]
    assert len(set(ids)) == len(ids)
    print(" ".join(map(str, ids)), flush=True)
    # exiting drains the background queue (shutdown is registered at exit)
""")


def test_eight_processes_log_into_one_database(store):
    per_process = PER_PROCESS["sqlite" if is_sqlite(store) else "postgres"]
    store.read(ops.knowledge_bases)  # created and migrated once here; the children race only on writes
    started = time.perf_counter()
    # Each child drains its whole queue at exit (the default 10 s deadline is for host programs;
    # eight interpreters on a small machine may need longer, and this test is about losing nothing).
    env = {**os.environ, "VERALITH_SHUTDOWN_TIMEOUT_S": "600"}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(p), str(per_process)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for p in range(PROCESSES)]
    outputs = [child.communicate(timeout=900) for child in children]
    elapsed = time.perf_counter() - started
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert "Traceback" not in err and "failed" not in err, err
    ids = [int(i) for out, _ in outputs for i in out.split()]
    assert len(ids) == len(set(ids)) == PROCESSES * per_process
    assert sorted(ids) == sorted(r[0] for r in sql(store, "SELECT id FROM traces"))  # every spool shipped
    statuses = dict(sql(store, "SELECT status, COUNT(*) FROM traces GROUP BY status"))
    assert statuses == {"done": PROCESSES * per_process}, statuses
    assert scalar(store, "SELECT COUNT(*) FROM traces WHERE error_message IS NOT NULL") == 0
    assert scalar(store, "SELECT MAX(attempts) FROM traces") == 1  # nobody evaluated twice
    assert scalar(store, "SELECT COUNT(*) FROM context_chunks") == 2 * PROCESSES * per_process
    sample = store.read(ops.load_result, ids[-1])
    assert sample.query.startswith("What does part") and sample.metadata["i"] == per_process - 1
    if is_sqlite(store):
        assert scalar(store, "PRAGMA integrity_check") == "ok"
    # The work is about 50 CPU-seconds (8 interpreters starting, 2,400 evaluations), so wall time
    # depends on free cores; the generous bound catches a pathological slowdown (writers stuck in
    # lock waits), not a busy machine.
    assert elapsed < 600, f"took {elapsed:.0f}s"
