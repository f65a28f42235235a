"""`veralith eval --batch` on many traces against the fake files + batches server: judged once, half the price,
and a kill -9 during the wait loses nothing.

    .venv/bin/python benchmarks/batch_api.py [--traces 1000] [--concurrency 16]

One fake server (tests/fake_batch_server.py) in this process answers both paths with the same `auto`
replies and usage. Every `veralith` command runs as its own process, on its own SQLite file:

1. synchronous baseline: `veralith eval FILE --no-persist -o sync.jsonl` (each call sent one by one);
2. `veralith eval FILE --batch`, whose second batch (the three judges) is held in progress by the
   server; once that batch is out the process is killed with SIGKILL, in its wait;
3. the server lets batches finish, and `veralith batch collect` (a new process) finishes the job.

Then it checks: every trace stored and done, none with a judge error, none judged twice (no history
entry, one reservation taken per trace), every request sent in exactly one batch, and the batch job's
tokens equal to the synchronous run's at half its price.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def _traces(n: int) -> list[dict]:
    return [{"id": f"t{i}", "query": f"What is the boiling point of compound {i}?",
             "context": [f"Compound {i} boils at {100 + i} degrees Celsius.", f"Compound {i} is a liquid."],
             "response": f"Compound {i} boils at {100 + i} degrees Celsius. It is a liquid."} for i in range(n)]


def _env(base_url: str, db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "VERALITH_BACKEND": "openai", "VERALITH_BASE_URL": base_url,
                "VERALITH_API_KEY": "bench", "VERALITH_JUDGE_MODEL": "gpt-4o", "VERALITH_DB_PATH": str(db),
                "VERALITH_BATCH_POLL_S": "0.2"})
    return env


def _veralith(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "veralith.cli", *args], env=env, capture_output=True, text=True,
                          check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    from fake_batch_server import FakeBatchServer

    server = FakeBatchServer().start()
    folder = Path(tempfile.mkdtemp(prefix="veralith-batch-bench-"))
    path = folder / "traces.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in _traces(args.traces)), encoding="utf-8")

    started = time.perf_counter()
    sync = _veralith("eval", str(path), "--no-persist", "-o", str(folder / "sync.jsonl"), "-c",
                     str(args.concurrency), env=_env(server.base_url, folder / "sync.db"))
    sync_s = time.perf_counter() - started
    assert sync.returncode == 0, sync.stderr[-2000:]
    sync_rows = [json.loads(line) for line in (folder / "sync.jsonl").read_text(encoding="utf-8").splitlines()]

    env = _env(server.base_url, folder / "batch.db")
    server.hold_from = 2                 # the judges' batch stays in progress: the process waits for it
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "eval", str(path), "--batch"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while len(server.batches) < 2 and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(1.0)                      # a few polls of the held batch
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after_s = time.perf_counter() - started
    held = dict(server.sent)
    server.hold_from = None
    started = time.perf_counter()
    collect = _veralith("batch", "collect", env=env)
    collect_s = time.perf_counter() - started
    assert collect.returncode == 0, collect.stderr[-2000:]

    os.environ.update({"VERALITH_DB_PATH": str(folder / "batch.db"), "VERALITH_BACKEND": "local"})
    from veralith.config import settings
    from veralith.store import open_store
    from veralith.work.batchjobs import BatchJobs

    settings.reload()
    store = open_store()
    results, histories, statuses = [], 0, set()
    for t in _traces(args.traces):
        info = store.find_external("default", t["id"])
        assert info is not None, t["id"]
        statuses.add(info.status)
        results.append(store.load_result(info.trace_id))
        histories += len(store.history(info.trace_id))
    job = BatchJobs(store).job_rows()[0]
    batch_usd = sum(r.usage.usd or 0.0 for r in results)
    sync_usd = sum(r["usage"]["usd"] or 0.0 for r in sync_rows)
    tokens = (sum(r.usage.input_tokens for r in results), sum(r.usage.output_tokens for r in results))
    sync_tokens = (sum(r["usage"]["input_tokens"] for r in sync_rows),
                   sum(r["usage"]["output_tokens"] for r in sync_rows))
    calls, sync_calls = sum(r.usage.calls for r in results), sum(r["usage"]["calls"] for r in sync_rows)
    print(f"traces: {args.traces}  (fake batch server, gpt-4o prices; {folder})")
    print(f"synchronous eval: {sync_calls} calls, {sync_tokens[0]} in / {sync_tokens[1]} out tokens, "
          f"${sync_usd:.4f}, {sync_s:.1f} s")
    print(f"eval --batch: killed (SIGKILL) {killed_after_s:.1f} s in, waiting on batch 2 of "
          f"{len(server.batches)} ({sum(held.values())} requests sent by then); batch collect took {collect_s:.1f} s")
    print(f"batch job {job['id']}: state {job['state']}, {job['judged']}/{job['traces']} traces judged, "
          f"requests {job['requests']}, {len(server.batches)} batches")
    print(f"  traces stored: {len(results)}, statuses {sorted(statuses)}, with judge errors: "
          f"{sum(1 for r in results if r.errors)}, history entries (judged twice): {histories}")
    print(f"  requests sent more than once: {sum(1 for n in server.sent.values() if n > 1)} of {len(server.sent)}; "
          f"synchronous calls made: {server.sync_calls}")
    print(f"  {calls} calls, {tokens[0]} in / {tokens[1]} out tokens, ${batch_usd:.4f} = "
          f"{batch_usd / sync_usd:.3f} x the synchronous price")
    ok = (statuses == {"done"} and len(results) == args.traces and histories == 0 and tokens == sync_tokens
          and all(n == 1 for n in server.sent.values()) and abs(batch_usd / sync_usd - 0.5) < 1e-6
          and job["judged"] == args.traces)
    print("MET" if ok else "NOT MET")
    server.stop()


if __name__ == "__main__":
    main()
