"""Context recall and answer correctness (reference answers, issue 42) on the labelled dev sets in ../shared/data.

    .venv/bin/python benchmarks/reference_quality.py [--data DIR] [--limit N]
    .venv/bin/python benchmarks/judge_quality.py --reference        (the same report)

What is measured, and against what (every figure printed is out of sample or says it is not):

* Context recall, SQuAD 2.0 and ClapNQ (`sufficiency_squad2`, `sufficiency_clapnq`): each answerable
  question's first reference answer is judged as the trace's `reference` against two contexts: its own
  passage (the answer is in it: label "retrieved") and another passage (label "not retrieved"): for
  SQuAD a passage of the same article (another paragraph), for ClapNQ another question's passage; a
  pairing whose passage holds the answer verbatim is skipped. The trace is evaluated by the public
  `veralith.evaluate(query, context, "", reference=..., persist=False)` on the offline judge with its
  shipped models (fitted on the faithfulness sets, never on these). Two decisions are scored by
  balanced accuracy: the fixed rule "every reference fact retrieved" (context_recall == 1; nothing
  fitted) and a cut on context_recall fitted on the training folds.
* Answer correctness, RAGChecker pairs (`completeness_ragchecker_pairs`): both responses of a pair are
  evaluated with the pair's reference answer (no retrieved context is stored; recall is then "not
  retrieved" and is not scored). Each response scores (stated - contradicted) / facts; the response
  with the higher score is predicted more correct. Scored on the pairs where both annotators'
  correctness scores have the same sign (a strict human preference): accuracy, a predicted tie
  counting half. Nothing is fitted.
* Word-overlap baseline, computed here on the same records: recall = share of the reference's content
  words found in the context (cut fitted on the training folds; and the in-sample best cut, an upper
  bound); correctness = share of the reference's content words found in the response (same
  preference rule). A judge figure below its baseline is printed "below baseline".
* Folds: 5 folds by a hash of the question (both pairings of a reference stay in one fold).
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_fit import data_parser, no_data, rows_of  # noqa: E402

import veralith  # noqa: E402
from veralith.config import settings  # noqa: E402
from veralith.llm.local.lexicon import content_terms  # noqa: E402

K = 5
RECALL_SETS = ("sufficiency_squad2", "sufficiency_clapnq")
PAIRS_SET = "completeness_ragchecker_pairs"


def _norms(text: str) -> set[str]:
    return {t.norm for t in content_terms(text)}


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def _fold(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % K


def overlap(reference: str, texts: list[str]) -> float:
    """Share of the reference's content words that occur in `texts`."""
    words = _norms(reference)
    seen = set().union(*(_norms(t) for t in texts)) if texts else set()
    return len(words & seen) / len(words) if words else 1.0


_NUMBER = re.compile(r"\b\d+\b")


def changed_number(reference: str) -> str | None:
    """The reference with its first number changed (+1, or a year moved by 10), or None without one: a
    reference the passage no longer states although almost every word of it is still there."""
    match = _NUMBER.search(reference)
    if match is None:
        return None
    value = int(match.group())
    new = value + 10 if 1000 <= value <= 2100 else value + 1
    return reference[:match.start()] + str(new) + reference[match.end():]


def recall_items(data: Path, name: str, limit: int | None) -> list[dict]:
    """(query, context, reference, label, fold) pairs: each answerable question's reference against its own
    passage (True) and against another passage (False)."""
    rows = [r for r in rows_of(data, name) if r["labels"].get("answerable") and r["labels"].get("reference_answers")]
    rows = rows[:limit] if limit else rows
    everyone = rows_of(data, name)
    items = []
    for row in rows:
        reference = row["labels"]["reference_answers"][0]
        title = row["labels"].get("info", {}).get("title")
        others = [r for r in everyone if r["id"] != row["id"] and r["context"] != row["context"]]
        same = [r for r in others if title is not None and r["labels"].get("info", {}).get("title") == title]
        pool = same or others
        # A fixed pick per question: the first of the pool in an order the question's id decides.
        pool = sorted(pool, key=lambda r: hashlib.sha256((row["id"] + r["id"]).encode()).hexdigest())
        other = next((r for r in pool if _flat(reference) not in _flat(" ".join(r["context"]))), None)
        fold = _fold(row["id"])
        items.append(dict(set=name, query=row["query"], context=row["context"], reference=reference, label=True,
                          fold=fold, group=row["id"], kind="own passage"))
        if other is not None:
            items.append(dict(set=name, query=row["query"], context=other["context"], reference=reference,
                              label=False, fold=fold, group=row["id"], kind="other passage"))
        wrong = changed_number(reference)
        if wrong is not None and _flat(wrong) not in _flat(" ".join(row["context"])):
            items.append(dict(set=name, query=row["query"], context=row["context"], reference=wrong, label=False,
                              fold=fold, group=row["id"], kind="number changed"))
    return items


def balanced(pairs: list[tuple[bool, bool]]) -> float:
    pos = [p for p, y in pairs if y]
    neg = [p for p, y in pairs if not y]
    if not pos or not neg:
        return 0.0   # one class only: no balanced accuracy (never a NaN)
    return (sum(pos) / len(pos) + sum(not p for p in neg) / len(neg)) / 2


def _best_cut(scored: list[tuple[float, bool]]) -> float:
    """The cut (predict True at or above it) with the best balanced accuracy on `scored`."""
    values = sorted({s for s, _ in scored})
    cuts = [values[0] - 1e-9] + [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)] + [values[-1] + 1e-9]
    scores = [balanced([(s >= c, y) for s, y in scored]) for c in cuts]
    best = max(scores)
    winners = [c for c, v in zip(cuts, scores, strict=True) if v == best]
    return winners[len(winners) // 2]


def _cross_validated(items: list[dict], key: str) -> float:
    pairs = []
    for k in range(K):
        train = [(it[key], it["label"]) for it in items if it["fold"] != k]
        held = [it for it in items if it["fold"] == k]
        if not train or not held:
            continue
        cut = _best_cut(train)
        pairs += [(it[key] >= cut, it["label"]) for it in held]
    return balanced(pairs)


def measure_recall(items: list[dict]) -> dict[str, dict]:
    """Per kind of negative (another passage; the reference with a number changed), scored with every
    positive: the judge's verdicts are computed once."""
    _judge_recall(items)
    out = {}
    for kind in ("other passage", "number changed"):
        chosen = [it for it in items if it["label"] or it["kind"] == kind]
        if any(not it["label"] for it in chosen):
            out[kind] = _scores(chosen)
    return out


def _judge_recall(items: list[dict]) -> None:
    for it in items:
        result = veralith.evaluate(it["query"], it["context"], "", reference=it["reference"], persist=False)
        ref = result.reference
        it["recall"] = ref.context_recall if ref is not None and ref.context_recall is not None else 0.0
        it["overlap"] = overlap(it["reference"], it["context"])
        it["undecided"] = ref is None or ref.context_recall is None


def _scores(items: list[dict]) -> dict:
    fixed = balanced([(it["recall"] >= 1.0, it["label"]) for it in items])
    scored = [(it["overlap"], it["label"]) for it in items]
    in_sample = balanced([(s >= _best_cut(scored), y) for s, y in scored])
    return dict(n=len(items), positives=sum(it["label"] for it in items), fixed=fixed,
                fitted=_cross_validated(items, "recall"), baseline=_cross_validated(items, "overlap"),
                baseline_in_sample=in_sample, undecided=sum(it["undecided"] for it in items))


def _score(result: veralith.EvaluationResult) -> float | None:
    ref = result.reference
    judged = [f for f in ref.facts if f.correctness is not None] if ref is not None else []
    if not judged:
        return None
    stated = sum(f.correctness.value == "stated" for f in judged)
    wrong = sum(f.correctness.value == "contradicted" for f in judged)
    return (stated - wrong) / len(judged)


def _credit(a: float | None, b: float | None, human_b: bool) -> float:
    if a is None or b is None or a == b:
        return 0.5
    return 1.0 if (b > a) == human_b else 0.0


def measure_correctness(data: Path, limit: int | None) -> dict:
    rows = rows_of(data, PAIRS_SET)
    rows = rows[:limit] if limit else rows
    strict = [r for r in rows if len(r["labels"]["correctness_scores"]) == 2
              and (all(s > 0 for s in r["labels"]["correctness_scores"])
                   or all(s < 0 for s in r["labels"]["correctness_scores"]))]
    judge = base = 0.0
    unscored = 0
    for row in strict:
        reference = row["labels"]["reference_answer"]
        human_b = row["labels"]["correctness_scores"][0] > 0
        scores = []
        for response in (row["response"], row["labels"]["response_b"]):
            result = veralith.evaluate(row["query"], [], response, reference=reference, persist=False)
            scores.append(_score(result))
        unscored += sum(s is None for s in scores)
        judge += _credit(scores[0], scores[1], human_b)
        base += _credit(overlap(reference, [row["response"]]), overlap(reference, [row["labels"]["response_b"]]),
                        human_b)
    n = len(strict)
    return dict(n=n, judge=judge / n if n else 0.0, baseline=base / n if n else 0.0, unscored=unscored)


def render(recall: dict[str, dict[str, dict]], correct: dict) -> str:
    lines = ["Context recall (balanced accuracy; labels by construction: the reference against its own passage vs "
             "another passage, or with a number changed)", "",
             "| set | negatives | items (answer in context) | judge: recall = 1 | judge: cut fitted in folds | "
             "overlap: cut fitted in folds | overlap: in-sample best | verdict |", "|---|---|---|---|---|---|---|---|"]
    for name, kinds in recall.items():
        for kind, r in kinds.items():
            best = max(r["fixed"], r["fitted"])
            verdict = "above baseline" if best > r["baseline"] else "below baseline"
            lines.append(f"| {name} | {kind} | {r['n']} ({r['positives']}) | {r['fixed']:.3f} | {r['fitted']:.3f} | "
                         f"{r['baseline']:.3f} | {r['baseline_in_sample']:.3f} | {verdict} |")
    verdict = "above baseline" if correct["judge"] > correct["baseline"] else "below baseline"
    lines += ["", "Answer correctness (pairwise: the response humans scored more correct, on pairs both annotators "
              "agree on; a predicted tie counts half; nothing fitted)", "",
              "| set | pairs | judge | overlap baseline | responses without a verdict | verdict |",
              "|---|---|---|---|---|---|",
              f"| {PAIRS_SET} | {correct['n']} | {correct['judge']:.3f} | {correct['baseline']:.3f} | "
              f"{correct['unscored']} | {verdict} |"]
    return "\n".join(lines)


def report(data: Path, limit: int | None = None) -> str:
    with settings.override(backend="local"):
        recall = {name: measure_recall(recall_items(data, name, limit)) for name in RECALL_SETS}
        correct = measure_correctness(data, limit)
    return render(recall, correct)


def main(argv: list[str] | None = None) -> int:
    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="questions / pairs per set (default: all)")
    args = parser.parse_args(argv)
    if no_data(args.data):
        return 1
    print(report(args.data, args.limit))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
