"""Several processes logging into one database at once: every trace stored once and evaluated once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from veralith.store import load_result
from veralith.store.db import open_db

PROCESSES, PER_PROCESS = 8, 300
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


def test_eight_processes_log_into_one_database():
    db = open_db()  # migrated once here; the children race only on writes
    started = time.perf_counter()
    # Each child drains its whole queue at exit (the default 10 s deadline is for host programs;
    # eight interpreters on a small machine may need longer, and this test is about losing nothing).
    env = {**os.environ, "VERALITH_SHUTDOWN_TIMEOUT_S": "600"}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(p), str(PER_PROCESS)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for p in range(PROCESSES)]
    outputs = [child.communicate(timeout=900) for child in children]
    elapsed = time.perf_counter() - started
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert "Traceback" not in err and "failed" not in err, err
    ids = [int(i) for out, _ in outputs for i in out.split()]
    assert len(ids) == len(set(ids)) == PROCESSES * PER_PROCESS
    assert sorted(ids) == sorted(r[0] for r in db.execute("SELECT id FROM traces"))  # spooled ones moved in
    statuses = dict(db.execute("SELECT status, COUNT(*) FROM traces GROUP BY status").fetchall())
    assert statuses == {"done": PROCESSES * PER_PROCESS}, statuses
    assert db.execute("SELECT COUNT(*) FROM traces WHERE error_message IS NOT NULL").fetchone()[0] == 0
    assert db.execute("SELECT MAX(attempts) FROM traces").fetchone()[0] == 1  # nobody evaluated twice
    assert db.execute("SELECT COUNT(*) FROM context_chunks").fetchone()[0] == 2 * PROCESSES * PER_PROCESS
    sample = load_result(ids[-1], db)
    assert sample.query.startswith("What does part") and sample.metadata["i"] == PER_PROCESS - 1
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # The work is about 50 CPU-seconds (8 interpreters starting, 2,400 evaluations), so wall time
    # depends on free cores; the generous bound catches a pathological slowdown (writers stuck in
    # lock waits), not a busy machine.
    assert elapsed < 600, f"took {elapsed:.0f}s"
