"""A stand-in for an app server in fleet mode: it records a trace every second or so and never judges.

With VERALITH_EVALUATE=remote, `veralith.log()` appends each trace to this process's local spool and
returns at once; a background thread ships the spool into the shared store (VERALITH_DB_URL), and
`veralith worker` processes judge what arrives. Stopping the database does not stop this loop: what
is logged meanwhile waits in the spool and arrives once the database is back.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from pathlib import Path

import veralith

RECORDS = [json.loads(line) for line in (Path(__file__).parents[1] / "traces.jsonl").read_text().splitlines()]

if __name__ == "__main__":
    # `docker compose stop` sends SIGTERM, which by default ends Python without its exit handlers; as a
    # normal exit, veralith's shipper gets to ship what is spooled before the process goes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        record = random.choice(RECORDS)
        trace_id = veralith.log(record["query"], record["context"], record["response"],
                                knowledge_base=record.get("knowledge_base", "default"))
        print(f"logged trace {trace_id}", flush=True)
        time.sleep(random.uniform(0.5, 1.5))
