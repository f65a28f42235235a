"""Shared by benchmarks/train_local.py and benchmarks/judge_quality.py: the labelled dev data, the
group folds and the likelihood fit of the local backend's two logistic models.

Data: the dev split of ../shared/data (the holdout split is never read). The response and the
context of each record go through the same decomposition the pipeline runs.

* faithfulness: one instance per claim, one bag per response. Where the set annotates spans
  (FaithBench, RAGTruth) a claim is positive iff its character span overlaps an annotated span,
  and it is fitted on its own. Where only the response is labelled (HaluEval, BEGIN, RGB, WiCE;
  WiCE `partially_supported` and `not_supported` are positive) the response is a bag fitted by
  the noisy-OR multiple-instance likelihood P(response hallucinated) = 1 - prod(1 - p_claim).
  No label is derived from the features.
* sufficiency: one instance per sub-question, the query a bag with the same noisy-OR likelihood,
  positive iff `not context_sufficient`. Features come from
  veralith.llm.local.sufficiency.question_features (owned by that module).

Fit: plain maximum likelihood with a fixed L2 penalty (L2 below, on standardised features),
one model per judge on the pooled sets. Records are weighted so that each set, and within a set
each class of response, carries the same total weight (the benchmark scores balanced accuracy per
set); a response's weight is shared equally by its claims. Sign constraints (SIGNS) keep evidence
from ever raising p(unsupported). The threshold is 0.5. No step looks at the benchmark targets.

Folds: K-fold group cross-validation per set; records sharing a query and a context stay in one
fold (`assign_folds`). Deterministic: the same data gives the same folds and the same fit.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from veralith.llm.local import LocalClient  # noqa: E402
from veralith.llm.local.align import Context, context_of  # noqa: E402
from veralith.llm.local.evidence import ChunkIndex  # noqa: E402
from veralith.llm.local.grounding import FEATURES as F_FEATURES, Analysis, analyse  # noqa: E402
from veralith.llm.tasks import ClaimIn  # noqa: E402
from veralith.pipeline.decompose import decompose  # noqa: E402
from veralith.pipeline.inputs import normalize_context  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data"
F_SETS = ["faithfulness_halueval_qa", "faithfulness_begin_wow", "faithfulness_rgb_counterfactual",
          "faithfulness_faithbench", "claims_wice", "ragtruth_qa", "ragtruth_summary"]
S_SETS = ["sufficiency_clapnq", "sufficiency_squad2"]
SPAN_SETS = {"faithfulness_faithbench", "ragtruth_qa", "ragtruth_summary"}
K = 5
L2 = 0.01
VERSION = "4"
# Direction each feature may push p(failure): -1 only down, +1 only up, 0 free.
SIGNS = {"cov_sent": -1, "cov_pair": -1, "cov_ctx": -1, "miss_w": 1, "order": -1, "num_absent": 1, "ent_absent": 1,
         "contra": 1, "personal": 1, "subjective": 1, "n_terms": 0, "anchor": -1, "bare": 0, "cov_new": -1,
         "miss_new": 1, "miss_name": 1, "ctx_size": 0,
         # sufficiency (names as that module defines them; a name not listed here is left free)
         "cov_win": -1, "cons_miss": 1, "type_gap": 1, "name_miss": 1, "word_miss": 1, "subject": -1}


@dataclass
class Record:
    """One labelled trace with its instances (claims or sub-questions) as feature rows."""

    set: str
    row: dict
    group: str
    positive: bool
    x: list[list[float]] = field(default_factory=list)
    labels: list[bool] | None = None       # per-instance labels (span sets), else None: a bag
    fold: int = -1
    analyses: list[Analysis] = field(default_factory=list)  # per claim, only when asked for (`extra`)


def data_parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the `--data DIR` option every benchmark over the dev sets takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with the *.dev.jsonl files")
    return parser


def no_data(data: Path) -> bool:
    """True, having said so on stderr, when `data` is not a folder (the shared data is optional)."""
    if data.is_dir():
        return False
    print(f"no data folder at {data}: pass --data DIR (the folder with the *.dev.jsonl files)", file=sys.stderr)
    return True


def rows_of(data: Path, name: str) -> list[dict]:
    with (data / f"{name}.dev.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def positive(name: str, row: dict) -> bool:
    """The failure each set labels: hallucinated content, or a context that cannot answer."""
    labels = row["labels"]
    if name == "claims_wice":
        return labels["claim_label"] != "supported"
    if name.startswith("sufficiency_"):
        return not labels["context_sufficient"]
    return bool(labels["hallucinated"])


# The API refuses an empty query; a set without one (claims only) is judged under this stand-in,
# which has no content words, so nothing in it can ground or excuse a claim.
NO_QUERY = "What is it?"


def query_of(row: dict) -> str:
    return row["query"] if row["query"].strip() else NO_QUERY


def group_of(row: dict) -> str:
    """Records sharing a question and a context (a right/wrong answer pair, the responses of
    several models to one source) share a group, so no fold splits them."""
    return (row["query"] or "") + "\x00" + "\x00".join(c if isinstance(c, str) else json.dumps(c, sort_keys=True)
                                                       for c in row["context"])


def assign_folds(records: list[Record], k: int = K) -> None:
    """Group k-fold per set: a set's groups, ordered by a hash of their key, dealt round-robin."""
    by_set: dict[str, list[str]] = {}
    for r in records:
        groups = by_set.setdefault(r.set, [])
        if r.group not in groups:
            groups.append(r.group)
    fold_of = {}
    for name, groups in by_set.items():
        for i, g in enumerate(sorted(groups, key=lambda g: (zlib.crc32(g.encode("utf-8")), g))):
            fold_of[(name, g)] = i % k
    for r in records:
        r.fold = fold_of[(r.set, r.group)]


# Extra candidate features for one claim, from what the judge computed: (claim, query, context, analysis).
Extra = Callable[[ClaimIn, str, Context, Analysis], dict[str, float]]


def faithfulness_records(data: Path, limit: int | None = None, extra: Extra | None = None) -> list[Record]:
    """One Record per response with a feature row per claim (grounding.FEATURES order). With `extra`
    (benchmarks/local_ablation.py), each claim's Analysis is kept in `analyses`, its features
    extended by what `extra` returns, so other feature sets can be fitted and decided by `decide`."""
    client = LocalClient()
    out = []
    for name in F_SETS:
        for row in rows_of(data, name)[:limit]:
            parts = decompose(client, query_of(row), row["response"])
            ctx = context_of(tuple(c.text for c in normalize_context(row["context"])))
            spans = row["labels"].get("hallucinated_spans") or []
            rec = Record(name, row, group_of(row), positive(name, row))
            labels = []
            for claim in parts.claims:
                notes = getattr(parts, "context_notes", {}) or {}
                claim_in = ClaimIn(id=claim.id, text=claim.text, context_note=notes.get(claim.id))
                analysis = analyse(claim_in, query_of(row), ctx)  # what grounding.claim_features returns
                feats = analysis.features
                if extra is not None:
                    feats.update(extra(claim_in, query_of(row), ctx, analysis))
                    rec.analyses.append(analysis)
                rec.x.append([feats[f] for f in F_FEATURES])
                start, end = claim.char_start, claim.char_end
                labels.append(start is not None and end is not None
                              and any(s < end and start < e for s, e, *_ in spans))
            if name in SPAN_SETS:
                rec.labels = labels
            out.append(rec)
    assign_folds(out)
    return out


def sufficiency_records(data: Path, limit: int | None = None) -> tuple[list[Record], list[str]]:
    from veralith.llm.local.sufficiency import FEATURES as S_FEATURES, question_features

    client = LocalClient()
    out = []
    for name in S_SETS:
        for row in rows_of(data, name)[:limit]:
            parts = decompose(client, query_of(row), "")
            chunks = normalize_context(row["context"])
            index = ChunkIndex([c.id for c in chunks], [c.text for c in chunks])
            rec = Record(name, row, group_of(row), positive(name, row))
            for sq in parts.sub_questions:
                values = question_features(sq.text, index)[0]
                rec.x.append([float(values[f]) for f in S_FEATURES])
            out.append(rec)
    assign_folds(out)
    return out, list(S_FEATURES)


def _weights(records: list[Record]) -> np.ndarray:
    """Each set, and each class within a set, gets the same total weight."""
    counts: dict[tuple[str, bool], int] = {}
    for r in records:
        counts[(r.set, r.positive)] = counts.get((r.set, r.positive), 0) + 1
    n_sets = len({r.set for r in records})
    return np.array([1.0 / (n_sets * 2 * counts[(r.set, r.positive)]) for r in records])


def fit(records: list[Record], features: list[str], l2: float = L2, steps: int = 4000,
        balance_instances: bool = False, rule: Callable[[dict[str, float]], str | None] | None = None) -> dict:
    """Maximum-likelihood logistic fit, instance-level where labels exist, noisy-OR bags elsewhere.

    Weights: each set, and each response class within a set, carries the same total; a response's
    weight is shared by its claims. `balance_instances` instead balances claim classes in the
    span-annotated sets (tried; it flags many more real multi-claim answers, see docs/benchmarks.md).

    Projected Adam on the full batch (deterministic; a dozen parameters converge well within `steps`).
    """
    records = [r for r in records if r.x]
    rec_w = _weights(records)
    x = np.array([row for r in records for row in r.x], dtype=float)
    bag = np.array([b for b, r in enumerate(records) for _ in r.x])
    inst = np.array([r.labels is not None for r in records for _ in r.x])
    y_inst = np.array([float(lab) for r in records for lab in (r.labels or [False] * len(r.x))])
    n_inst = np.array([len(r.x) for r in records], dtype=float)
    w_inst = (rec_w / n_inst)[bag]        # instance terms: the record's weight shared by its instances
    if balance_instances:
        # span-labelled sets: positive and negative claims of a set carry equal weight
        sets = np.array([r.set for r in records])[bag]
        for name in set(sets[inst]):
            for lab in (0.0, 1.0):
                sel = inst & (sets == name) & (y_inst == lab)
                if sel.any():
                    w_inst[sel] = w_inst[inst & (sets == name)].sum() / 2 / sel.sum()
    bag_pos = np.array([r.positive for r in records])
    means = x.mean(axis=0)
    scales = x.std(axis=0)
    scales[scales == 0] = 1.0
    z = (x - means) / scales
    signs = np.array([SIGNS.get(f, 0) for f in features], dtype=float)
    theta = np.zeros(len(features) + 1)
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    total = rec_w.sum()
    lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
    for step in range(1, steps + 1):
        logits = np.clip(theta[0] + z @ theta[1:], -30, 30)
        p = 1.0 / (1.0 + np.exp(-logits))
        grad_logit = np.zeros_like(p)
        # instance-labelled: d(-loglik)/dlogit = p - y
        grad_logit[inst] = (p[inst] - y_inst[inst]) * w_inst[inst]
        # bags: S = sum log(1 - p); negative bag -> -S, positive bag -> -log(1 - e^S)
        mil = ~inst
        log1m = -np.logaddexp(0.0, logits)
        s = np.bincount(bag, weights=np.where(mil, log1m, 0.0), minlength=len(records))
        es = np.exp(s)
        pos_factor = np.where(bag_pos, es / np.maximum(1.0 - es, 1e-12), 0.0)
        g_mil = np.where(bag_pos[bag], -p * pos_factor[bag], p) * rec_w[bag]
        grad_logit[mil] = g_mil[mil]
        grad = np.concatenate([[grad_logit.sum()], z.T @ grad_logit]) / total
        grad[1:] += l2 * theta[1:]
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        theta -= lr * (m / (1 - b1 ** step)) / (np.sqrt(v / (1 - b2 ** step)) + eps)
        w = theta[1:]
        w[signs * w < 0] = 0.0  # projection onto the sign constraints
    spec = dict(features=list(features), weights=[round(float(t), 6) for t in theta[1:]],
                bias=round(float(theta[0]), 6), means=[round(float(t), 6) for t in means],
                scales=[round(float(t), 6) for t in scales], threshold=0.5, version=VERSION)
    if rule is not None:
        spec["rules"] = rule_precision(records, features, rule)
    return spec


def rule_precision(records: list[Record], features: list[str], rule: Callable[[dict[str, float]], str | None]
                   ) -> dict[str, float]:
    """Per rule: the weighted share of the claims it fires on that are labelled positive (the
    claim's own label where spans exist, else its response's), with one pseudo-claim of each kind
    (Laplace). This is the confidence of a verdict the rule takes against the score."""
    rec_w = _weights([r for r in records if r.x])
    hits: dict[str, list[float]] = {}
    unit = float(np.mean([w / len(r.x) for r, w in zip([r for r in records if r.x], rec_w, strict=False)]))
    for r, w in zip([r for r in records if r.x], rec_w, strict=False):
        for k, row in enumerate(r.x):
            name = rule(dict(zip(features, row, strict=False)))
            if name is None:
                continue
            label = r.labels[k] if r.labels is not None else r.positive
            tally = hits.setdefault(name, [0.0, 0.0])
            tally[0] += w / len(r.x) * float(label)
            tally[1] += w / len(r.x)
    return {name: round((pos + unit) / (total + 2 * unit), 4) for name, (pos, total) in sorted(hits.items())}


def log_loss(records: list[Record], spec: dict) -> float:
    """Weighted mean negative log-likelihood of `records` under `spec` (same likelihood as `fit`)."""
    records = [r for r in records if r.x]
    w = _weights(records)
    total = 0.0
    for r, rw in zip(records, w, strict=False):
        z = (np.array(r.x) - spec["means"]) / spec["scales"]
        p = 1.0 / (1.0 + np.exp(-np.clip(spec["bias"] + z @ np.array(spec["weights"]), -30, 30)))
        p = np.clip(p, 1e-9, 1 - 1e-9)
        if r.labels is not None:
            y = np.array(r.labels, dtype=float)
            total += rw * float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
        else:
            q = 1.0 - float(np.prod(1.0 - p))
            q = min(max(q, 1e-9), 1 - 1e-9)
            total += rw * -(np.log(q) if r.positive else np.log(1.0 - q))
    return total / float(w.sum())


def scores(records: list[Record], spec: dict) -> dict[int, list[float]]:
    """p of every instance of `records` under `spec` (the model's score, before any calibration)."""
    from veralith.llm.local.model import Logistic

    model = Logistic({**spec, "calibration": None})
    return {id(r): [model.probability(dict(zip(spec["features"], row, strict=True))) for row in r.x]
            for r in records}


def out_of_fold(records: list[Record], features: list[str], rule: Callable[[dict[str, float]], str | None] | None,
                k: int = K - 1) -> dict[int, list[float]]:
    """Every instance's score from a model fitted without its record's group: group k-fold inside
    `records` (folds dealt as `assign_folds` deals them, on a copy)."""
    inner = [Record(r.set, r.row, r.group, r.positive, r.x, r.labels) for r in records]
    assign_folds(inner, k)
    out: dict[int, list[float]] = {}
    for fold in range(k):
        train = [r for r in inner if r.fold != fold]
        held = [r for r in inner if r.fold == fold]
        if not train or not held:
            continue
        spec = fit(train, features, rule=rule)
        for r, original in zip(inner, records, strict=True):
            if r.fold == fold:
                out[id(original)] = scores([r], spec)[id(r)]
    return out


def calibration(records: list[Record], oof: dict[int, list[float]]) -> dict[str, float]:
    """Platt scaling fitted on out-of-fold scores: p_cal = sigmoid(intercept + slope * logit(p)), by
    the same likelihood and weighting as `fit` (instance labels where the set has them, noisy-OR
    bags elsewhere). The shipped and cross-validated models store it as their "calibration"."""
    eps = 1e-6
    logits = [Record(r.set, r.row, r.group, r.positive,
                     [[float(np.log(min(max(p, eps), 1 - eps) / (1 - min(max(p, eps), 1 - eps))))]
                      for p in oof[id(r)]], r.labels) for r in records if id(r) in oof and r.x]
    spec = fit(logits, ["logit"])
    w, scale, mean = spec["weights"][0], spec["scales"][0], spec["means"][0]
    return {"slope": round(w / scale, 6), "intercept": round(spec["bias"] - w * mean / scale, 6)}


def clear_caches() -> None:
    """Empty every functools cache in veralith, so each timed pass starts cold like new traces."""
    for name, module in list(sys.modules.items()):
        if name == "veralith" or name.startswith("veralith."):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()
