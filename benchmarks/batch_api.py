"""`veralith eval --batch` on many traces against the strict fake files + batches server, its limits
lowered: every batch within both limits and of one model, every trace judged once, no request sent
twice (a kill -9 between creating a batch and recording it included), half the price; and a batch
that fails validation shows the service's reason and is not sent again.

    .venv/bin/python benchmarks/batch_api.py [--traces 2000] [--max-requests 500] [--max-bytes 1000000]

One fake server (tests/fake_batch_server.py, as strict as the reference: tests/fake_batch_rules.py)
in this process answers both paths with the same `auto` replies and usage, and refuses a batch past
`--max-requests` / `--max-bytes`; Veralith is given the same limits (VERALITH_BATCH_MAX_REQUESTS,
VERALITH_BATCH_MAX_BYTES; the shipped defaults stay the service's 50,000 and 200 MB). The judges run
on gpt-4o, the decompositions on gpt-4o-mini (VERALITH_DECOMPOSER_MODEL). Every `veralith` command
runs as its own process, on its own SQLite file:

1. synchronous baseline: `veralith eval FILE --no-persist -o sync.jsonl` (each call sent one by one);
2. `veralith eval FILE --batch`: the server makes its 3rd batch but holds back the answer to that
   create, and the process is killed with SIGKILL then (the batch exists; the process never learnt
   its id);
3. `veralith batch collect` (a new process) finds that batch by the key in its metadata and finishes
   the job;
4. another file whose decomposition model the server does not batch: `eval --batch` (exit 2), then
   `veralith batch status`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def _traces(n: int, prefix: str = "t") -> list[dict]:
    return [{"id": f"{prefix}{i}", "query": f"What is the boiling point of compound {prefix}{i}?",
             "context": [f"Compound {prefix}{i} boils at {100 + i} degrees Celsius.", f"Compound {prefix}{i} is a "
                         "liquid."],
             "response": f"Compound {prefix}{i} boils at {100 + i} degrees Celsius. It is a liquid."} for i in range(n)]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in rows), encoding="utf-8")
    return path


def _env(base_url: str, db: Path, limits: tuple[int, int]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "VERALITH_BACKEND": "openai", "VERALITH_BASE_URL": base_url,
                "VERALITH_API_KEY": "bench", "VERALITH_JUDGE_MODEL": "gpt-4o",
                "VERALITH_DECOMPOSER_MODEL": "gpt-4o-mini", "VERALITH_DB_PATH": str(db),
                "VERALITH_BATCH_POLL_S": "0.2", "VERALITH_BATCH_MAX_REQUESTS": str(limits[0]),
                "VERALITH_BATCH_MAX_BYTES": str(limits[1])})
    return env


def _veralith(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "veralith.cli", *args], env=env, capture_output=True, text=True,
                          check=False)


def _killed_at_create(server: Any, path: Path, env: dict[str, str]) -> tuple[float, int]:
    """`eval --batch`, killed once the server has made its 3rd batch and holds back the answer; (seconds
    until then, batches made)."""
    server.stall_create, server.stall_from = threading.Event(), 3
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "eval", str(path), "--batch"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while len(server.batches) < 3 and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    made = len(server.batches)
    server.stall_create.set()
    server.stall_create = None
    return time.perf_counter() - started, made


def _stored(db: Path, rows: list[dict]) -> tuple[list[Any], int, set[str], dict[str, Any]]:
    """(results, history entries, statuses, the job row) of a batch run's store."""
    os.environ.update({"VERALITH_DB_PATH": str(db), "VERALITH_BACKEND": "local"})
    from veralith.config import settings
    from veralith.store import open_store
    from veralith.work.batchjobs import BatchJobs

    settings.reload()
    store = open_store()
    results, histories, statuses = [], 0, set()
    for t in rows:
        info = store.read(ops.find_external, "default", t["id"])
        assert info is not None, t["id"]
        statuses.add(info.status)
        results.append(store.read(ops.load_result, info.trace_id))
        histories += len(store.read(ops.history, info.trace_id))
    return results, histories, statuses, BatchJobs(store).job_rows()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--max-requests", type=int, default=500)
    parser.add_argument("--max-bytes", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    from fake_batch_server import FakeBatchServer

    limits = (args.max_requests, args.max_bytes)
    server = FakeBatchServer().start()
    server.max_requests, server.max_bytes = limits
    folder = Path(tempfile.mkdtemp(prefix="veralith-batch-bench-"))
    rows = _traces(args.traces)
    path = _write(folder / "traces.jsonl", rows)

    started = time.perf_counter()
    sync = _veralith("eval", str(path), "--no-persist", "-o", str(folder / "sync.jsonl"), "-c",
                     str(args.concurrency), env=_env(server.base_url, folder / "sync.db", limits))
    sync_s = time.perf_counter() - started
    assert sync.returncode == 0, sync.stderr[-2000:]
    sync_rows = [json.loads(line) for line in (folder / "sync.jsonl").read_text(encoding="utf-8").splitlines()]

    env = _env(server.base_url, folder / "batch.db", limits)
    killed_after_s, made = _killed_at_create(server, path, env)
    started = time.perf_counter()
    collect = _veralith("batch", "collect", env=env)
    collect_s = time.perf_counter() - started
    assert collect.returncode == 0, collect.stderr[-2000:]
    batches = sorted(server.batches.values(), key=lambda b: b["n"])
    shapes = [(len(server.lines_of(b["state"]["id"])), len(server.files[b["state"]["input_file_id"]]["data"]),
               {x["body"]["model"] for x in server.lines_of(b["state"]["id"])}, b["state"]["status"]) for b in batches]
    sent = dict(server.sent)

    refused_env = _env(server.base_url, folder / "refused.db", limits)
    server.unbatchable = {"gpt-4o-mini"}
    before = len(server.batches)
    refused = _veralith("eval", str(_write(folder / "refused.jsonl", _traces(20, "v"))), "--batch", env=refused_env)
    status = _veralith("batch", "status", env=refused_env)
    made_refused = sorted(server.batches.values(), key=lambda b: b["n"])[before:]
    refused_failed = all(b["state"]["status"] == "failed" for b in made_refused)
    refused_sent = {k: n for k, n in server.sent.items() if k not in sent}

    results, histories, statuses, job = _stored(folder / "batch.db", rows)
    batch_usd = sum(r.usage.usd or 0.0 for r in results)
    sync_usd = sum(r["usage"]["usd"] or 0.0 for r in sync_rows)
    tokens = (sum(r.usage.input_tokens for r in results), sum(r.usage.output_tokens for r in results))
    sync_tokens = (sum(r["usage"]["input_tokens"] for r in sync_rows),
                   sum(r["usage"]["output_tokens"] for r in sync_rows))
    calls, sync_calls = sum(r.usage.calls for r in results), sum(r["usage"]["calls"] for r in sync_rows)
    within = all(n <= limits[0] and size <= limits[1] for n, size, _, _ in shapes)
    one_model = all(len(models) == 1 for _, _, models, _ in shapes)
    print(f"traces: {args.traces}  (strict fake batch server, limits {limits[0]} requests / {limits[1]:,} bytes per "
          f"batch; judges gpt-4o, decomposition gpt-4o-mini; {folder})")
    print(f"synchronous eval: {sync_calls} calls, {sync_tokens[0]} in / {sync_tokens[1]} out tokens, "
          f"${sync_usd:.4f}, {sync_s:.1f} s")
    print(f"eval --batch: killed (SIGKILL) {killed_after_s:.1f} s in, after the server made batch {made} and before "
          f"its id reached the process; batch collect took {collect_s:.1f} s")
    print(f"batches: {len(shapes)}, all {sorted({s for *_, s in shapes})}; requests per batch "
          f"{min(n for n, *_ in shapes)}-{max(n for n, *_ in shapes)}, bytes per batch "
          f"{min(b for _, b, *_ in shapes):,}-{max(b for _, b, *_ in shapes):,}; within both limits: {within}; "
          f"one model each: {one_model} "
          f"({sum(1 for *_, m, _ in shapes if m == {'gpt-4o-mini'})} gpt-4o-mini, "
          f"{sum(1 for *_, m, _ in shapes if m == {'gpt-4o'})} gpt-4o)")
    print(f"batch job {job['id']}: state {job['state']}, {job['judged']}/{job['traces']} traces judged, "
          f"requests {job['requests']}")
    print(f"  traces stored: {len(results)}, statuses {sorted(statuses)}, with judge errors: "
          f"{sum(1 for r in results if r.errors)}, history entries (judged twice): {histories}")
    print(f"  requests sent more than once: {sum(1 for n in sent.values() if n > 1)} of {len(sent)}; "
          f"synchronous calls made by the batch run: {server.sync_calls - sync_calls}")
    print(f"  {calls} calls, {tokens[0]} in / {tokens[1]} out tokens, ${batch_usd:.4f} = "
          f"{batch_usd / sync_usd:.3f} x the synchronous price")
    reason = next((line.strip() for line in status.stdout.splitlines() if "model_not_found" in line), "(none)")
    print(f"validation failure: eval --batch exit {refused.returncode}; {len(made_refused)} batches made, all failed: "
          f"{refused_failed}; their {len(refused_sent)} requests sent {sorted(set(refused_sent.values()))} time(s); "
          f"batch status: {reason}")
    ok = (statuses == {"done"} and len(results) == args.traces and histories == 0 and tokens == sync_tokens
          and within and one_model and all(s == "completed" for *_, s in shapes)
          and all(n == 1 for n in sent.values()) and abs(batch_usd / sync_usd - 0.5) < 1e-6
          and job["judged"] == args.traces and refused.returncode == 2 and refused_failed
          and set(refused_sent.values()) == {1} and "model_not_found" in reason)
    print("MET" if ok else "NOT MET")
    server.stop()


if __name__ == "__main__":
    main()
