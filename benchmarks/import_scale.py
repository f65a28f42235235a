"""`veralith import` of a 10,000-span OTLP JSON file: the grouping alone, and the whole command.

    .venv/bin/python benchmarks/import_scale.py [--spans 10000] [--repeat 3]

The file is tests/otlp_synthetic.py's export: traces of five spans each (a root chain, a retriever
with three documents, an embedding, a model call, a tool call), shuffled across seven resourceSpans
blocks, so grouping has to go by trace id; every text is invented. Measured, best and median of
`--repeat` runs:

- `read`: veralith.importers.read_file (JSON parse, spans read, grouped, each trace assembled),
  in this process; the groupings are checked against the generator (every trace's question,
  documents and answer), so a fast wrong answer cannot pass;
- `command`: the whole `veralith import FILE --no-persist --backend local` as a subprocess (start-up,
  reading, the eval runner and the offline judge on every trace), and the same storing every
  result in a fresh database (`--backend local`, no --no-persist);
- the baseline: `veralith eval` of the same records written as JSONL (what import hands the eval
  runner), both ways, so `import / eval` is what reading spans adds to judging the same traces.

The target (issue 28): the 10,000-span import groups traces correctly in under 10 s. Prints one
JSON object. No data set is needed.

    .venv/bin/python benchmarks/import_scale.py --memory-mb 200 [--code DIR]

Memory (issue 35): writes an OTLP file of about that many MB (the same synthetic traces, spans
shuffled over 7 resourceSpans blocks, written block by block so the writer holds no file-sized
value), then reads it in a fresh process under `/usr/bin/time -v` (veralith.importers.read_file and
every trace assembled, as `veralith import` does before judging) and reports the peak resident
memory and the time; `--code DIR` reads with the veralith package found in DIR instead (a checkout
of another version: the before/after comparison). The target: memory proportional to one trace, not
the file (peak well under the file's size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from otlp_synthetic import SPANS_PER_TRACE, answer, documents, export, question  # noqa: E402


def _check(imported: object, traces: int) -> None:
    records = list(imported.traces)  # type: ignore[attr-defined]
    assert len(records) == traces, len(records)
    for i, record in enumerate(records):
        assert (record["query"], record["response"]) == (question(i), answer(i)), i
        assert [c["text"] for c in record["context"]] == documents(i), i


def _command(command: str, path: Path, env: dict[str, str], *extra: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "veralith.cli", command, str(path), "--backend", "local", *extra],
                          env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"veralith {command} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def _figures(samples: list[float]) -> dict[str, float]:
    return {"best_s": round(min(samples), 3), "median_s": round(statistics.median(samples), 3)}


def write_large(path: Path, megabytes: float, *, blocks: int = 7, seed: int = 1) -> int:
    """An OTLP JSON file of about `megabytes` MB: traces' spans shuffled over `blocks` resourceSpans,
    written block by block; how many traces it holds."""
    import random

    from otlp_synthetic import spans_of

    per_trace = len(json.dumps(spans_of(0))) + SPANS_PER_TRACE * 2
    traces = max(1, int(megabytes * 1e6 / per_trace))
    where = [(i, k) for i in range(traces) for k in range(SPANS_PER_TRACE)]
    random.Random(seed).shuffle(where)
    size = -(-len(where) // blocks)
    with open(path, "w", encoding="utf-8") as out:
        out.write('{"resourceSpans": [')
        for b in range(blocks):
            out.write(("," if b else "") + '{"resource": {"attributes": [{"key": "service.name", "value": '
                      f'{{"stringValue": "svc-{b}"}}}}]}}, "scopeSpans": [{{"scope": {{"name": "synthetic"}}, '
                      '"spans": [')
            for n, (i, k) in enumerate(where[b * size:(b + 1) * size]):
                out.write(("," if n else "") + json.dumps(spans_of(i)[k]))
            out.write("]}]}")
        out.write("]}")
    return traces


_READ_ALL = """
import sys, time
from pathlib import Path
from veralith.importers import read_file
t0 = time.perf_counter()
imported = read_file(Path(sys.argv[1]))
n = sum(1 for item in imported.traces if isinstance(item, dict))
print(n, len(imported.traces), round(time.perf_counter() - t0, 1))
"""


def memory(megabytes: float, code: Path | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spans.json"
        traces = write_large(path, megabytes)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
        env["PYTHONPATH"] = str(code or REPO)
        done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", _READ_ALL, str(path)], env=env,
                              capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            raise SystemExit(f"reading failed ({done.returncode}): {done.stderr[-2000:]}")
        peak_kb = next(int(line.split(":")[1]) for line in done.stderr.splitlines()
                       if "Maximum resident set size" in line)
        judged, listed, seconds = done.stdout.split()
        assert int(judged) == int(listed) == traces, (judged, listed, traces)
        return {"file_mb": round(path.stat().st_size / 1e6, 1), "traces": traces, "spans": traces * SPANS_PER_TRACE,
                "code": str(code or REPO), "peak_rss_mb": round(peak_kb / 1024, 1), "read_s": float(seconds),
                "cpus": os.cpu_count(), "python": sys.version.split()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-mb", type=float, default=None, help="measure peak memory on a file this large")
    parser.add_argument("--code", type=Path, default=None, help="read with the veralith package in this folder")
    args = parser.parse_args(argv)
    if args.memory_mb is not None:
        print(json.dumps(memory(args.memory_mb, args.code), indent=2))
        return 0
    from veralith.importers import read_file

    traces = args.spans // SPANS_PER_TRACE
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spans.json"
        path.write_text(json.dumps(export(traces, blocks=7, seed=1)), encoding="utf-8")
        reads = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            imported = read_file(path)
            reads.append(time.perf_counter() - t0)
            _check(imported, traces)
        records = Path(tmp) / "records.jsonl"
        records.write_text("".join(json.dumps(r) + "\n" for r in imported.traces), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
        runs: dict[str, list[float]] = {}
        for n in range(args.repeat):  # alternating, so load on the machine falls on each alike
            for name, command, source, extra in (("import_no_persist", "import", path, ["--no-persist"]),
                                                 ("eval_no_persist", "eval", records, ["--no-persist"]),
                                                 ("import_stored", "import", path, []),
                                                 ("eval_stored", "eval", records, [])):
                env["VERALITH_DB_PATH"] = str(Path(tmp) / f"{name}{n}.db")
                runs.setdefault(name, []).append(_command(command, source, env, *extra))
        result = {"spans": traces * SPANS_PER_TRACE, "traces": traces, "file_mb": round(path.stat().st_size / 1e6, 1),
                  "read": _figures(reads), **{name: _figures(samples) for name, samples in runs.items()},
                  "import_over_eval": {kind: round(statistics.median(runs[f"import_{kind}"])
                                                   / statistics.median(runs[f"eval_{kind}"]), 2)
                                       for kind in ("no_persist", "stored")},
                  "target_s": 10, "met": {"read": min(reads) < 10, "import_stored": min(runs["import_stored"]) < 10},
                  "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
