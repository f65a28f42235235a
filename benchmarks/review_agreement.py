"""The offline judge against the hand-labelled golden traces, the way a team would measure it:
judged with `veralith eval`, labelled with `veralith label` (each trace's expected gate and cell),
then `veralith agreement --json`.

    .venv/bin/python benchmarks/review_agreement.py [--markdown]

Nothing is fitted here, and the shipped local models were not fitted on tests/golden, so every
figure is out of sample. The gate figures must equal benchmarks/judge_quality.py's golden figures
(local_calibration.golden: "gate right" and "right among the unflagged" per file), computed here
from the same evaluate() call: one source of truth for "how right is the judge". The script exits 1
when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GOLDEN = REPO / "tests" / "golden"


def _cli(runner, args: list[str]) -> str:  # type: ignore[no-untyped-def]
    from veralith.cli import app

    out = runner.invoke(app, args)
    if out.exit_code not in (0, 1):
        raise SystemExit(f"veralith {' '.join(args)} failed ({out.exit_code}): {out.output}")
    return str(out.output)


def measure(stem: str, folder: Path) -> dict:
    """One golden file through eval, label and agreement, in a fresh store under `folder`."""
    from typer.testing import CliRunner

    from veralith.config import settings

    os.environ["VERALITH_DB_PATH"] = str(folder / f"{stem}.db")
    os.environ["VERALITH_BACKEND"] = "local"
    os.environ["VERALITH_SPOOL_DIR"] = str(folder / f"{stem}-spool")
    settings.reload()
    rows = [json.loads(line) for line in (GOLDEN / f"{stem}.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    records = folder / f"{stem}-records.jsonl"
    records.write_text("".join(json.dumps({k: r[k] for k in ("id", "query", "context", "response")}) + "\n"
                               for r in rows), encoding="utf-8")
    runner = CliRunner()
    _cli(runner, ["eval", str(records)])
    for row in rows:
        _cli(runner, ["label", row["id"], "--gate", row["expected"]["gate"], "--by", "golden"])
        if row["expected"].get("cell"):
            _cli(runner, ["label", row["id"], "--cell", row["expected"]["cell"], "--by", "golden"])
    return json.loads(_cli(runner, ["agreement", "--json"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    import local_calibration

    import veralith

    reference = local_calibration.golden(lambda q, c, resp: veralith.evaluate(q, c, resp, persist=False))
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        for stem in sorted(p.stem for p in GOLDEN.glob("*.jsonl")):
            data = measure(stem, Path(tmp))
            gate, cell = data["judges"]["gate"], data["judges"].get("cell")
            unflagged = data["by_review"]["gate"].get("not_flagged", {"labels": 0, "agree": 0})
            ref = reference[stem]
            match = (gate["labels"], gate["agree"], unflagged["labels"], unflagged["agree"]) == (
                ref["n"], ref["right"], ref["unflagged"], ref["unflagged_right"])
            same = same and match
            low, high = gate["interval_95"]
            print(f"{stem}: gate agreement {gate['agree']}/{gate['labels']} = {gate['agreement']:.3f} "
                  f"(95 % {low:.3f}–{high:.3f}, kappa {gate['kappa']:.2f}); among not flagged "
                  f"{unflagged['agree']}/{unflagged['labels']}"
                  + (f"; cell {cell['agree']}/{cell['labels']} = {cell['agreement']:.3f} (kappa {cell['kappa']:.2f})"
                     if cell else "")
                  + f"; judge_quality golden: {ref['right']}/{ref['n']}, unflagged {ref['unflagged_right']}/"
                    f"{ref['unflagged']} -> {'same' if match else 'DIFFERENT'}")
            from veralith.review.report import review_flag_line

            for name, figures in data["review_flag"].items():   # the review cut-off fitted to these labels
                print(f"{stem}: {review_flag_line(name, figures)}")
            if args.markdown:
                from veralith.review.report import markdown

                print(markdown(data))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
