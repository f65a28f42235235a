"""`veralith patterns` at scale: 100,000 judged traces with planted causes, on either store.

    .venv/bin/python benchmarks/patterns_scale.py [--traces 100000] [--db PATH | --pg] [--repeat 3]
                                                  [--reference-rate 0.3]

Fills a store with a generated log (tests/patterns_log.py: help-centre questions over twelve topics,
background failures spread over every topic and document, chunk texts and judge reasoning as long as
real ones) judged in two runs: run "before", then run "after", in which an outdated price list that
2 % of the traces retrieve now contradicts the price the answer gives (those traces are judged again
in place). Planted as well: a topic retrieval misses (3 % of the traces ask about exporting data and
get nothing on it); `--reference-rate` of the traces carry a reference (issue 42), and the missed topic's
reference fact and expected chunk are never retrieved (0 leaves references out: the log of before
they existed). Then times `find_patterns` (what `veralith patterns` and the web page call) over
the whole log (its transitions: the two newest runs), and over `--run after`, `--repeat` times after one
warm-up, beside `veralith compare before after` as the baseline, and the two reference sections
alone over the whole log, and prints the median and the worst
in seconds (with CPU seconds) and the ratios, with where the planted causes ranked, as JSON.

The log is written through the store (save_result, claim, the run functions); a SQLite file of the
right size is reused (`--db`, default in the temp folder). `--pg` starts a throwaway PostgreSQL server
(Debian's package, as the tests do) and copies the SQLite log into it (`veralith migrate --to`'s copy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

KB = "shop"


def fill_sqlite(path: str, n: int, reference_rate: float) -> float:
    """Write the two-run log of `n` traces into a new SQLite file (reused when it holds them)."""
    from patterns_log import BAD_SOURCE, planted_log

    from veralith.store import open_store
    from veralith.work.intake import store_result

    url = "sqlite:///" + path
    store = open_store(url)
    with store.connection() as db:  # type: ignore[attr-defined]
        have = int(db.execute("SELECT COUNT(*) FROM traces").fetchone()[0])
    if have >= n:
        return 0.0
    if have:
        raise SystemExit(f"{path} holds {have} traces, not {n}: remove it or give another --db")
    t0 = time.perf_counter()
    ids, touched = [], []
    for i, result in enumerate(planted_log(n, kb=KB, stale_prices=False, long_texts=True,
                                           reference_rate=reference_rate)):
        ids.append(store_result(store, result))
        if any(c.source == BAD_SOURCE for c in result.context):
            touched.append(i)
        if i % 10_000 == 9_999:
            print(f"  {i + 1:,} traces written ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    _run(store, "before")
    for i in touched:   # the outdated price list now contradicts the answers: judged again in place
        [after] = planted_log(1, start=i, kb=KB, stale_prices=True, long_texts=True, reference_rate=reference_rate)
        store_result(store, after.model_copy(update={"trace_id": ids[i]}))   # re-judged in place
    _run(store, "after")
    with store.connection() as db:  # type: ignore[attr-defined]
        db.execute("ANALYZE")
    return time.perf_counter() - t0


def _run(store, name: str) -> None:
    """File every trace under a new eval run of this name, as `veralith eval` does trace by trace."""
    run_id = store.write(ops.start_run, name=name, backend="local", model="local", prompt_versions={})
    with store.connection() as db, db.write():
        db.execute("UPDATE traces SET run_id = ?", [run_id])
    store.write(ops.finish_run, run_id)


def copy_to(url: str, sqlite_path: str) -> float:
    from veralith.store import open_store
    from veralith.work.migrate import copy

    t0 = time.perf_counter()
    target = open_store(url)
    copy(open_store("sqlite:///" + sqlite_path, read_only=True), target)  # type: ignore[arg-type]
    with target.connection() as db:  # type: ignore[attr-defined]
        db.execute("ANALYZE")
    return time.perf_counter() - t0


def timed(fn, repeat: int) -> tuple[dict[str, float], object]:
    """Median and worst wall-clock seconds of `repeat` calls after one warm-up (page cache, statement
    cache), and the median CPU seconds of this process (SQLite's work included, a PostgreSQL
    server's not): on a shared machine the wall clock also counts the other processes' turns."""
    out = fn()
    samples, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"median_s": round(statistics.median(samples), 2), "max_s": round(max(samples), 2),
            "median_cpu_s": round(statistics.median(cpu), 2)}, out


def ranks(found) -> dict[str, object]:
    """Where the planted causes came out: the rank of each in its own kind (1 = first), None if missed."""
    from patterns_log import BAD_SOURCE, MISSED_CHUNK, MISSED_FACT, MISSED_TERM

    def rank(kind: str, match) -> int | None:
        groups = found.section(kind).groups
        return next((n for n, g in enumerate(groups, 1) if match(g)), None)

    return {"bad_source": rank("source", lambda g: g.key == BAD_SOURCE),
            "missed_topic": rank("topic", lambda g: MISSED_TERM in g.terms),
            "top_transition": (found.section("transition").groups[0].key
                               if found.section("transition").groups else None),
            "missed_chunk": rank("missed_chunk", lambda g: g.key == MISSED_CHUNK),
            "missed_fact": rank("missed_fact", lambda g: g.key == MISSED_FACT)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--db", default=None, help="the SQLite file of the log (reused when it holds it)")
    parser.add_argument("--pg", action="store_true", help="copy the log into a throwaway PostgreSQL server")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference-rate", type=float, default=0.3,
                        help="the share of traces with a reference (0: none, as before issue 42)")
    args = parser.parse_args()
    path = args.db or os.path.join(tempfile.gettempdir(),
                                   f"veralith-patterns-{args.traces}-ref{args.reference_rate:g}.db")
    os.environ.pop("VERALITH_DB_URL", None)
    os.environ["VERALITH_DB_PATH"] = path
    os.environ["VERALITH_SPOOL_DIR"] = tempfile.mkdtemp(prefix="veralith-spool-")
    from veralith.config import settings
    settings.reload()
    fill_s = fill_sqlite(path, args.traces, args.reference_rate)
    server = None
    url = "sqlite:///" + path
    copy_s = None
    if args.pg:
        from pg_server import PgServer
        server = PgServer()
        url = server.new_database()
        copy_s = round(copy_to(url, path), 1)
    from veralith.compare import compare_runs
    from veralith.patterns import find_patterns
    from veralith.store import open_store

    try:
        store = open_store(url, read_only=True)
        # The baseline: `veralith compare before after` over the same two runs (reading and matching
        # both runs' rows is also what the transitions section does).
        baseline, _ = timed(lambda: compare_runs(store, "before", "after"), args.repeat)
        whole, found = timed(lambda: find_patterns(store), args.repeat)
        run, found_run = timed(lambda: find_patterns(store, run="after"), args.repeat)
        from veralith.patterns.core import SAMPLE
        from veralith.patterns.reference import reference_sections
        from veralith.store.patterns import PatternScope
        alone, _ = timed(lambda: reference_sections(store, PatternScope(), limit=5, examples=3, min_traces=2,
                                                    sample=SAMPLE), args.repeat)
        figures = {"store": url.split(":", 1)[0], "traces": found.traces, "failing": found.failing,
                   "fill_s": round(fill_s, 1), "copy_s": copy_s, "baseline_compare_before_after": baseline,
                   "patterns_whole_log": whole, "planted_whole_log": ranks(found),
                   "patterns_run_after_with_transitions": run, "planted_run_after": ranks(found_run),
                   "reference_rate": args.reference_rate, "reference_sections_whole_log": alone,
                   "ratio_whole_to_compare": round(whole["median_s"] / baseline["median_s"], 1),
                   "ratio_run_to_compare": round(run["median_s"] / baseline["median_s"], 1)}
        print(json.dumps(figures, indent=2))
    finally:
        if server is not None:
            from veralith.store import _stores
            for opened in _stores.values():
                opened.close()
            server.stop()


if __name__ == "__main__":
    main()
