"""`veralith compare` over two runs of 10,000 traces each, against reading the two runs' rows.

    .venv/bin/python benchmarks/compare_runs.py [--traces 10000] [--changed 0.15] [--repeat 5] [--db PATH]

Fills a migrated database the way two `veralith eval` runs of one file would (synthetic rolled-up
results, no judge calls): run A judges `--traces` traces with external ids, then run B re-judges
them in place with a fraction `--changed` of the outcomes moved to another cell (each run keeps its
own copy in run_traces, with a reason line for every trace that does not pass). A second pair of
SDK runs (`log(run=...)`: separate traces matched by query text, reasons read from the stored
claims and judgments) is timed the same way.

For each pair it times, `--repeat` times after one warm-up, (a) reading both runs' rows
(`veralith.store.runs.trace_rows`, the floor any comparison pays) and (b) the whole comparison
(`veralith.compare.compare_runs`: resolve the runs, read, match, test, reasons), and prints the
medians, the ratio b / a and whether (b) is under the 2 s target, as JSON. It also times one
`veralith compare A B --json` process end to end beside one `veralith --version` (the start-up
and imports every command pays).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

CELLS = ["complete_grounded", "complete_ungrounded", "incomplete_grounded", "incomplete_ungrounded",
         "extra_grounded", "extra_ungrounded"]
WEIGHTS = [55, 10, 15, 8, 7, 5]
TARGET_S = 2.0


def _gate(cell: str | None) -> str:
    return "indeterminate" if cell is None else "pass" if cell == "complete_grounded" else "fail"


def _outcomes(n: int, changed: float, seed: int) -> tuple[list[str | None], list[str | None]]:
    rng = random.Random(seed)
    a: list[str | None] = [rng.choices(CELLS, WEIGHTS)[0] if rng.random() > 0.01 else None for _ in range(n)]
    b = [rng.choices(CELLS, WEIGHTS)[0] if rng.random() < changed else cell for cell in a]
    return a, b


def _insert_traces(db, rows: list[tuple]) -> list[int]:
    from veralith.store.rows import now_iso

    now = now_iso()
    first = (db.execute("SELECT COALESCE(MAX(id), 0) FROM traces").fetchone()[0] or 0) + 1
    db.conn.executemany(
        "INSERT INTO traces (id, created_at, updated_at, evaluated_at, status, knowledge_base, metadata, failure_cell,"
        " quality_gate, execution, availability, has_diagnosis, sufficiency_fraction, faithfulness_fraction,"
        " n_sub_questions, n_claims, n_extra_claims, usd, external_id, run_id, query, response, status_summary)"
        " VALUES (?, ?, ?, ?, 'done', 'support', '{}', ?, ?, 'success', 'assessed', 1, ?, ?, 2, 3, ?, 0.0004, ?, ?, ?,"
        " 'A synthetic answer. It has three claims. One may be wrong.', 'synthetic')",
        [(first + i, now, now, now, *row) for i, row in enumerate(rows)])
    return list(range(first, first + len(rows)))


def _judgments(db, trace_ids: list[int], cells: list[str | None]) -> None:
    """Claims, faithfulness verdicts, grounding and completeness rows for the traces that fail."""
    claims, faith, grounding, comp, subq = [], [], [], [], []
    for tid, cell in zip(trace_ids, cells, strict=True):
        if cell in (None, "complete_grounded"):
            continue
        for k in range(3):
            claims.append((tid, k, f"k{k + 1}", f"Claim {k + 1} of trace {tid} says the price is {k + 200} euros."))
            bad = cell.endswith("ungrounded") and k == 1
            faith.append((tid, k, f"k{k + 1}", "N" if bad else "Y", "contradicted" if bad else "supported", "r"))
            grounding.append((tid, k, "contradicts" if bad else "supports", 0, f"k{k + 1}", f"price-{k}"))
        subq += [(tid, 0, "q1", f"What does product {tid} cost?"), (tid, 1, "q2", "When does it ship?")]
        comp.append((tid, "r", '["q2"]' if cell.startswith("incomplete") else "[]"))
    db.conn.executemany("INSERT INTO claims (trace_id, position, claim_id, text) VALUES (?, ?, ?, ?)", claims)
    db.conn.executemany("INSERT INTO faithfulness_judgments (trace_id, position, claim_id, verdict, relation,"
                        " reasoning) VALUES (?, ?, ?, ?, ?, ?)", faith)
    db.conn.executemany("INSERT INTO grounding (trace_id, judgment_position, kind, position, claim_id, chunk_id)"
                        " VALUES (?, ?, ?, ?, ?, ?)", grounding)
    db.conn.executemany("INSERT INTO sub_questions (trace_id, position, sub_question_id, text) VALUES (?, ?, ?, ?)",
                        subq)
    db.conn.executemany("INSERT INTO completeness (trace_id, reasoning, uncovered_sub_question_ids) VALUES (?, ?, ?)",
                        comp)


def fill(path: str, n: int, changed: float) -> dict[str, float]:
    from veralith.compare.reasons import failure_reason
    from veralith.store.db import connect, write
    from veralith.store.runs import failure_details, finish_run, start_run

    db = connect(path)
    started = time.perf_counter()
    a, b = _outcomes(n, changed, seed=7)
    rng = random.Random(11)
    # Eval runs: one set of traces (external ids), re-judged in place by the second run.
    run_a = start_run(db, name="eval-a", backend="local", model="m", prompt_versions={})
    with write(db):
        ids = _insert_traces(db, [(c, _gate(c), rng.random(), rng.random(), rng.randint(0, 1), f"t-{i}", run_a,
                                   f"Synthetic question number {i} about the product?") for i, c in enumerate(a)])
        _judgments(db, ids, a)
    reasons = failure_details(db, [t for t, c in zip(ids, a, strict=True) if c != "complete_grounded"])
    finish_run(db, run_a)  # copies the run's traces into run_traces; the reasons follow
    with write(db):
        db.conn.executemany("UPDATE run_traces SET reason = ? WHERE run_id = ? AND trace_id = ?",
                            [(failure_reason(d), run_a, t) for t, d in reasons.items()])
    run_b = start_run(db, name="eval-b", backend="local", model="m", prompt_versions={})
    with write(db):
        moved = [(c, _gate(c), run_b, t) for t, c, old in zip(ids, b, a, strict=True) if c != old]
        db.conn.executemany("UPDATE traces SET failure_cell = ?, quality_gate = ?, run_id = ? WHERE id = ?", moved)
        db.execute("UPDATE traces SET run_id = ? WHERE run_id = ?", [run_b, run_a])
        for table in ("grounding", "faithfulness_judgments", "claims", "completeness", "sub_questions"):
            db.conn.executemany(f"DELETE FROM {table} WHERE trace_id = ?", [(m[3],) for m in moved])
        _judgments(db, [m[3] for m in moved], [m[0] for m in moved])
    finish_run(db, run_b)
    reasons = failure_details(db, [t for t, c in zip(ids, b, strict=True) if c != "complete_grounded"])
    with write(db):
        db.conn.executemany("UPDATE run_traces SET reason = ? WHERE run_id = ? AND trace_id = ?",
                            [(failure_reason(d), run_b, t) for t, d in reasons.items()])
    # SDK runs: separate traces, matched by query text, reasons read from the judgments when compared.
    for name, cells in (("sdk-a", a), ("sdk-b", b)):
        with write(db):
            run = db.execute("INSERT INTO runs (name, source, started_at) VALUES (?, 'sdk', '2026-01-01')",
                             [name]).lastrowid
            ids = _insert_traces(db, [(c, _gate(c), rng.random(), rng.random(), rng.randint(0, 1), None, run,
                                       f"Synthetic question number {i} about the product?")
                                      for i, c in enumerate(cells)])
            _judgments(db, ids, cells)
    db.execute("ANALYZE")
    db.close()
    return {"fill_s": round(time.perf_counter() - started, 1)}


def _time(fn, repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `repeat` calls after one warm-up (page cache, statement cache).
    CPU time is reported beside wall time because a shared machine stretches the wall clock."""
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def measure(path: str, repeat: int) -> dict:
    from veralith.compare import compare_runs
    from veralith.store.db import connect
    from veralith.store.runs import resolve_run, trace_rows

    db = connect(path)
    out: dict = {}
    for kind, (a, b) in {"eval": ("eval-a", "eval-b"), "sdk": ("sdk-a", "sdk-b")}.items():
        ra, rb = resolve_run(db, a), resolve_run(db, b)
        read, read_cpu = _time(lambda ra=ra, rb=rb: (trace_rows(db, ra), trace_rows(db, rb)), repeat)
        result = {}

        def run(a=a, b=b, result=result):
            result["c"] = compare_runs(db, a, b)

        whole, whole_cpu = _time(run, repeat)
        c = result["c"]
        out[kind] = {"traces_per_run": len(trace_rows(db, ra)), "read_rows_ms": round(read * 1000, 1),
                     "compare_ms": round(whole * 1000, 1), "ratio": round(whole / read, 2),
                     "read_rows_cpu_ms": round(read_cpu * 1000, 1), "compare_cpu_ms": round(whole_cpu * 1000, 1),
                     "cpu_ratio": round(whole_cpu / read_cpu, 2),
                     "regressions": len(c.regressions), "improvements": len(c.improvements),
                     "indeterminate_changes": len(c.indeterminate_changes),
                     "under_2_s": whole < TARGET_S}
    # One process end to end, beside `veralith --version` (start-up and imports alone).
    env = {**os.environ, "VERALITH_DB_PATH": path}
    for key, args in (("cli_version_process_s", ["--version"]),
                      ("cli_compare_process_s", ["compare", "eval-a", "eval-b", "--json", "--max-regressions",
                                                 "1000000"])):
        t, before = time.perf_counter(), os.times()
        proc = subprocess.run([sys.executable, "-m", "veralith.cli", *args], capture_output=True, env=env, cwd=REPO)
        after = os.times()
        out[key] = round(time.perf_counter() - t, 2)
        out[key.replace("_s", "_cpu_s")] = round(after.children_user - before.children_user
                                                 + after.children_system - before.children_system, 2)
        if proc.returncode != 0:
            raise SystemExit(f"veralith {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--changed", type=float, default=0.15)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", default=None)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="veralith-compare-")
    path = args.db or str(Path(folder) / "compare.db")
    report: dict = {"traces": args.traces, "changed": args.changed, "repeat": args.repeat}
    if not Path(path).exists():
        report.update(fill(path, args.traces, args.changed))
    report.update(measure(path, args.repeat))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
