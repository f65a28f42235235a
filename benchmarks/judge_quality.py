"""Judge quality of the local backend on the labelled dev sets in ../shared/data.

Every record goes through the public `veralith.evaluate(..., persist=False)` with the local
backend, and the trace-level decision is compared with the set's label:

* faithfulness_*: the trace has an ungrounded claim  vs  labels.hallucinated
* sufficiency_*:  some sub-question judged insufficient  vs  not labels.context_sufficient
* claims_wice:    every claim grounded  vs  labels.claim_label == "supported"

The score is balanced accuracy (mean of the recall on each class), so a judge that always says
the same thing scores 0.5. completeness_ragchecker_pairs is skipped: it has no retrieved context.

    .venv/bin/python benchmarks/judge_quality.py [--data DIR] [--limit N] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from veralith.config import settings  # noqa: E402
from veralith.models import Verdict  # noqa: E402
import veralith  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data"
# Targets the shipped configuration must reach, and a plain token-overlap score at its *oracle*
# threshold (the bar "a lexical judge must not be worse than").
TARGETS = {
    "faithfulness_halueval_qa": (0.93, 0.93), "faithfulness_begin_wow": (0.88, 0.90),
    "faithfulness_rgb_counterfactual": (0.95, 0.99), "faithfulness_faithbench": (0.62, 0.63),
    "sufficiency_clapnq": (0.75, 0.70), "sufficiency_squad2": (0.60, 0.55), "claims_wice": (0.70, 0.70),
}
SKIPPED = {"completeness_ragchecker_pairs": "no retrieved context (pairwise completeness against a reference)"}


def load(path: Path, limit: int | None = None) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


def predict(name: str, row: dict) -> tuple[bool, bool]:
    """(predicted positive, labelled positive) for one record; positive = the failure the set labels."""
    result = veralith.evaluate(row["query"], row["context"], row["response"], persist=False)
    if result.errors:
        raise RuntimeError(f"{name} {row['id']}: judge errors {result.errors}")
    ungrounded = any(j.verdict is Verdict.N for j in result.faithfulness)
    if name.startswith("faithfulness_"):
        return ungrounded, bool(row["labels"]["hallucinated"])
    if name.startswith("sufficiency_"):
        return any(j.verdict is Verdict.N for j in result.sufficiency), not row["labels"]["context_sufficient"]
    return ungrounded, row["labels"]["claim_label"] != "supported"


def balanced_accuracy(pairs: list[tuple[bool, bool]]) -> float:
    pos = [p for p, y in pairs if y]
    neg = [p for p, y in pairs if not y]
    tpr = sum(pos) / len(pos) if pos else 0.0
    tnr = sum(not p for p in neg) / len(neg) if neg else 0.0
    return (tpr + tnr) / 2


def run(data: Path, limit: int | None = None) -> list[dict]:
    rows_out = []
    with settings.override(backend="local"):
        for path in sorted(data.glob("*.dev.jsonl")):
            name = path.name.removesuffix(".dev.jsonl")
            if name in SKIPPED or name not in TARGETS:
                continue
            rows = load(path, limit)
            started = time.perf_counter()
            pairs = [predict(name, row) for row in rows]
            elapsed = time.perf_counter() - started
            pos = [p for p, y in pairs if y]
            neg = [p for p, y in pairs if not y]
            target, baseline = TARGETS[name]
            score = balanced_accuracy(pairs)
            rows_out.append(dict(set=name, n=len(pairs), balanced_accuracy=score,
                                 tpr=sum(pos) / max(1, len(pos)), tnr=sum(not p for p in neg) / max(1, len(neg)),
                                 target=target, baseline=baseline, met=score >= target, seconds=elapsed))
    return rows_out


def markdown(rows: list[dict]) -> str:
    lines = ["| set | n | balanced acc. | TPR (failure caught) | TNR (good passed) | target | overlap@oracle | met |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['n']} | **{r['balanced_accuracy']:.3f}** | {r['tpr']:.3f} | {r['tnr']:.3f} | "
                     f"{r['target']:.2f} | {r['baseline']:.2f} | {'yes' if r['met'] else 'no'} |")
    for name, why in SKIPPED.items():
        lines.append(f"| {name} | - | skipped: {why} | | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with the *.dev.jsonl files")
    parser.add_argument("--limit", type=int, default=None, help="records per set (default: all)")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"no data folder at {args.data}; pass --data", file=sys.stderr)
        return 1
    rows = run(args.data, args.limit)
    print(markdown(rows))
    for name, why in SKIPPED.items():
        print(f"skipped {name}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
