"""Large inputs on the offline judge: time per trace as the response grows, and the refusal above the limit.

    .venv/bin/python benchmarks/local_large.py [--sizes 25 50 100 200] [--repeat 3]

Synthetic English traces (no dataset text): a context of five short chunks about a town's
buildings, and a response of generated sentences in three shapes that stress different parts of
the judge: `sentences` (many ordinary claims), `one sentence` (the same text joined by commas into
one very long claim: the contradiction checks' name and number scans), and `open request` (the
same claims under "Summarise ...": completeness spreads the request over every on-topic claim),
and `large context` (a three-sentence answer over a context of that size, in 2 KB chunks).
Each size runs with VERALITH_LOCAL_MAX_CHARS raised above it, so the judging itself is timed (best
of `--repeat`, CPU seconds, every cache emptied before each run); the ratio to the next smaller
size shows how the cost grows (2.0 per doubling is linear). Last, a 1,000,000-character response at
the default limit: refused, and how fast.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_fit import clear_caches  # noqa: E402

import veralith  # noqa: E402
from veralith.config import settings  # noqa: E402

_PLACES = "river harbour council market bridge museum library station garden tower school hospital ferry".split()
_NAMES = "Acme Borel Calder Dunmore Eston Fairlie Garnet Holm Ivers Jarrow Kessel Lorne".split()
QUERY = "When did the museum open and how many visitors came?"
OPEN_QUERY = "Summarise the history of the museum."


def _sentence(rng: random.Random, i: int, end: str) -> str:
    return (f"The {rng.choice(_PLACES)} of {rng.choice(_NAMES)} {rng.choice(_NAMES)} opened in {1900 + i % 120} "
            f"with {i} {rng.choice(_PLACES)}s and {rng.randint(2, 900)} visitors{end}")


def text(chars: int, end: str = ".", seed: int = 1) -> str:
    rng, parts, size, i = random.Random(seed), [], 0, 0
    while size < chars:
        parts.append(_sentence(rng, i, end))
        size += len(parts[-1]) + 1
        i += 1
    return " ".join(parts)[:chars]


CONTEXT = [text(700, seed=s) for s in range(5)]


def timed(query: str, response: str, repeat: int, context: list[str] = CONTEXT) -> tuple[float, str]:
    best, reason = float("inf"), ""
    for _ in range(repeat):
        clear_caches()   # each run reads its texts afresh, as a new trace would
        started = time.process_time()
        result = veralith.evaluate(query, context, response, persist=False)
        best = min(best, time.process_time() - started)
        reason = result.status.reason
    return best, reason


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25, 50, 100, 200], help="response sizes in KB")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (the best is reported)")
    args = parser.parse_args(argv)
    shapes = {"sentences": (QUERY, "."), "one sentence": (QUERY, ","), "open request": (OPEN_QUERY, ".")}
    print("| shape | response | CPU seconds | × previous size | status reason |")
    print("|---|---:|---:|---:|---|")
    with settings.override(backend="local"):
        veralith.evaluate(QUERY, CONTEXT, "The museum opened in 1901.", persist=False)  # imports, warm-up
        for shape, (query, end) in shapes.items():
            previous = None
            for kb in args.sizes:
                with settings.override(local_max_chars=kb * 1000 + 10_000):
                    seconds, reason = timed(query, text(kb * 1000, end), args.repeat)
                ratio = f"{seconds / previous:.2f}" if previous else "-"
                print(f"| {shape} | {kb} KB | {seconds:.2f} | {ratio} | {reason} |")
                previous = seconds
        previous = None
        answer = text(300, seed=7)
        for kb in args.sizes:
            whole = text(kb * 1000, seed=3)
            chunks = [whole[i:i + 2000] for i in range(0, len(whole), 2000)]
            with settings.override(local_max_chars=kb * 1000 + 10_000):
                seconds, reason = timed(QUERY, answer, args.repeat, chunks)
            ratio = f"{seconds / previous:.2f}" if previous else "-"
            print(f"| large context | {kb} KB context | {seconds:.2f} | {ratio} | {reason} |")
            previous = seconds
        big = text(1_000_000)
        started = time.perf_counter()
        result = veralith.evaluate(QUERY, CONTEXT, big, persist=False)
        print(f"\n1,000,000-character response at the default limit ({settings.local_max_chars:,}): "
              f"{result.status.quality_gate.value}, reason {result.status.reason}, "
              f"in {time.perf_counter() - started:.3f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
