"""The golden suite: hand-written traces (tests/golden/traces.jsonl) with the verdicts a careful human
judge would give ("oracle") and the cell and gate those verdicts must produce ("expected").

(a) Fed the oracle verdicts through the scripted fake client, the pipeline must reproduce every
    expected cell, gate and reason exactly: this pins the semantics of classify and the gate.
(b) On the offline `local` backend, the same traces measure the judges end to end: cell accuracy,
    gate accuracy and false passes on number/negation/entity swaps, held to floors set from the
    measured figures.

The traces are invented for this suite (fictional products, people and places). Each oracle lists,
in 1-based indices: sub-questions; claims and gaps with the response sentences (as split by
`veralith.llm.text.sentence_spans`) they come from; per sub-question sufficiency and completeness
status; per claim faithfulness and its role with the sub-questions it concerns; per gap the
sub-questions it declines. `_reference` below restates the semantics (docs/concepts.md) in a few
lines of plain Python only to cross-check the data file against itself; the product's code is what
test (a) tests.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from fakes import CHUNK_START, FakeClient

GOLDEN = Path(__file__).parent / "golden" / "traces.jsonl"
# Written by someone else after the offline judges were tuned on traces.jsonl, and never looked at
# while tuning: the local figures on it are the out-of-sample ones.
HOLDOUT = Path(__file__).parent / "golden" / "holdout.jsonl"

# Floors for test (b), the local backend, set a little below the measured figures (traces.jsonl:
# cell 0.866, gate 0.907 on 97 traces, no false pass on a swap; holdout.jsonl: cell 0.571, gate 0.762) so that a
# change that makes the offline judges worse fails here. They are floors, not the goals (cell 0.80,
# gate 0.90): raise them as the judges improve, never lower them to let a change through.
LOCAL_CELL_ACCURACY_FLOOR = 0.85
LOCAL_GATE_ACCURACY_FLOOR = 0.89
LOCAL_MAX_FALSE_PASSES_ON_SWAPS = 0
HELD_OUT_CELL_ACCURACY_FLOOR = 0.55
HELD_OUT_GATE_ACCURACY_FLOOR = 0.74

SWAP_TAGS = {"number_swap", "negation_flip", "entity_swap"}
TAGS = SWAP_TAGS | {"comparison_flip", "multi_part_one_claim", "paraphrase", "partial_refusal_correct",
                    "partial_refusal_wrong", "full_refusal_correct", "full_refusal_wrong", "offtopic_shared_words",
                    "middle_of_chunk", "two_chunks", "conflicting_chunks", "empty_context", "empty_response", "plain",
                    "stale"}
CELLS = [f"{row}_{col}" for row in ("complete", "incomplete", "extra") for col in ("grounded", "ungrounded")]


def load_traces(path: Path = GOLDEN) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


TRACES = load_traces()
HELD_OUT = load_traces(HOLDOUT)


# ---------------------------------------------------------------- the semantics, restated for the data check

def _reference(oracle: dict) -> tuple[str, str, str]:
    """(cell, gate, reason) that the semantics give for an oracle. Pure Python, no product code."""
    claims, gaps = oracle["claims"], oracle["gaps"]
    grounded = [f == "supported" for f in oracle["faithfulness"]]
    roles = oracle["roles"]
    n_sq = len(oracle["sub_questions"])

    def covered(k: int) -> bool:  # k is 1-based
        return oracle["statuses"][k - 1] == "answered" and any(
            role == "answers" and k in sqs and grounded[i] for i, (role, sqs) in enumerate(roles))

    uncovered = [k for k in range(1, n_sq + 1) if not covered(k)]
    extra = any(role == "extra" for role, _ in roles)
    row = "incomplete" if uncovered else "extra" if extra else "complete"
    column = "grounded" if all(grounded) else "ungrounded"
    cell = f"{row}_{column}"

    if claims:
        kind = "partial_refusal" if any(oracle["gap_links"]) else "answer"
    else:
        kind = "full_refusal" if gaps else "no_factual_content"
    if not claims and kind != "full_refusal":
        return cell, "fail", "no_assessable_claims"
    if cell == "complete_grounded":
        return cell, "pass", "complete_grounded"
    if kind in ("full_refusal", "partial_refusal"):
        if column == "ungrounded":
            return cell, "fail", cell
        if any(oracle["sufficiency"][k - 1] == "yes" for k in uncovered):
            return cell, "fail", "unnecessary_refusal"
        if extra:
            return cell, "fail", "refusal_with_extra_claims"
        return cell, "pass", "correct_partial_refusal" if kind == "partial_refusal" else "correct_refusal"
    return cell, "fail", cell


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _data_problems(trace: dict) -> list[str]:
    """What is inconsistent in one trace's oracle (indices, lengths, the task contracts)."""
    from veralith.llm.text import sentence_spans

    o, problems = trace["oracle"], []
    n_sq, n_claims, n_gaps = len(o["sub_questions"]), len(o["claims"]), len(o["gaps"])
    spans = sentence_spans(trace["response"])
    sentences = [trace["response"][a:b] for a, b in spans]
    if not trace["query"].strip() or n_sq == 0:
        problems.append("needs a query and at least one sub-question")
    if set(trace["tags"]) - TAGS or not trace["tags"]:
        problems.append(f"unknown or missing tags {sorted(set(trace['tags']) - TAGS)}")
    for label, n, key in (("sufficiency", n_sq, "sufficiency"), ("statuses", n_sq, "statuses"),
                          ("faithfulness", n_claims, "faithfulness"), ("roles", n_claims, "roles"),
                          ("gap_links", n_gaps, "gap_links")):
        if len(o[key]) != n:
            problems.append(f"{label} has {len(o[key])} entries, expected {n}")
    for kind, items in (("claim", o["claims"]), ("gap", o["gaps"])):
        for i, item in enumerate(items, 1):
            if not item["sentences"] or any(not 1 <= s <= len(sentences) for s in item["sentences"]):
                problems.append(f"{kind} {i} cites sentences {item['sentences']}; the response has {len(sentences)}")
                continue
            if kind == "claim":  # the claims task rejects numbers its sentences (or the query) lack
                source = " ".join(sentences[s - 1] for s in item["sentences"]) + " " + trace["query"]
                have = {n.replace(",", "") for n in _NUMBER.findall(source)}
                new = [n for n in _NUMBER.findall(item["text"]) if n.replace(",", "") not in have]
                if new:
                    problems.append(f"claim {i} has numbers {new} its sentences do not contain")
    for i, (role, sqs) in enumerate(o["roles"], 1):
        if role not in ("answers", "supports", "extra") or (role == "extra") != (not sqs):
            problems.append(f"claim {i}: role {role} with sub-questions {sqs}")
        if any(not 1 <= k <= n_sq for k in sqs):
            problems.append(f"claim {i} names sub-questions {sqs} out of range")
    for j, sqs in enumerate(o["gap_links"], 1):
        if any(not 1 <= k <= n_sq for k in sqs):
            problems.append(f"gap {j} names sub-questions {sqs} out of range")
    for k, status in enumerate(o["statuses"], 1):
        answered = any(role == "answers" and k in sqs for role, sqs in o["roles"])
        if status not in ("answered", "partial", "unanswered") or answered != (status != "unanswered"):
            problems.append(f"sub-question {k} is {status} but answering claims exist: {answered}")
    if any(v not in ("yes", "no") for v in o["sufficiency"]):
        problems.append("sufficiency must be yes/no")
    if any(v not in ("supported", "unsupported", "contradicted", "conflicting", "stale") for v in o["faithfulness"]):
        problems.append("unknown faithfulness relation")
    # The pipeline decides these in code for an empty context: nothing suffices, nothing is grounded.
    if not trace["context"] and ("yes" in o["sufficiency"] or any(f != "unsupported" for f in o["faithfulness"])):
        problems.append("an empty context suffices for nothing and grounds nothing")
    if o["asks_clarification"] and n_claims:
        problems.append("asks_clarification is for responses without claims here")
    got = _reference(o)
    want = (trace["expected"]["cell"], trace["expected"]["gate"], trace["expected"]["reason"])
    if got != want:
        problems.append(f"expected {want} but the semantics give {got}")
    return problems


def test_golden_data_is_consistent() -> None:
    """The file itself: ids, indices, contracts, coverage of cells/tags, and expected == semantics(oracle)."""
    ids = [t["id"] for t in TRACES]
    assert len(set(ids)) == len(ids), "duplicate ids"
    bad = {t["id"]: p for t in TRACES if (p := _data_problems(t))}
    assert not bad, "\n".join(f"{i}: {'; '.join(p)}" for i, p in bad.items())
    cells = Counter(t["expected"]["cell"] for t in TRACES)
    assert len(TRACES) >= 60 and all(cells[c] >= 10 for c in CELLS), cells
    tags = Counter(tag for t in TRACES for tag in t["tags"])
    assert all(tags[tag] for tag in TAGS), {tag for tag in TAGS if not tags[tag]}
    held = Counter(t["expected"]["cell"] for t in HELD_OUT)
    assert not set(ids) & {t["id"] for t in HELD_OUT}, "held-out ids repeat development ids"
    bad = {t["id"]: p for t in HELD_OUT if (p := _data_problems(t))}
    assert not bad and all(held[c] >= 7 for c in CELLS), (bad, held)


# ---------------------------------------------------------------- (a) oracle verdicts through the fake client

def _index(item_id: str, texts: dict[str, int], text: str) -> int:
    """0-based position of an item the pipeline sent back to a judge: by its text, else by its id."""
    if text in texts:
        return texts[text]
    return int(re.sub(r"\D", "", item_id)) - 1


def oracle_client(trace: dict) -> FakeClient:
    """A fake judge that answers every task from the trace's oracle, whatever the batching."""
    o = trace["oracle"]
    sq_texts = {t: k for k, t in enumerate(o["sub_questions"])}
    claim_texts = {c["text"]: i for i, c in enumerate(o["claims"])}
    gap_texts = {g["text"]: j for j, g in enumerate(o["gaps"])}
    sq_id = {k: f"q{k + 1}" for k in range(len(o["sub_questions"]))}

    def questions(payload):
        return {"sub_questions": [{"id": sq_id[k], "text": t} for k, t in enumerate(o["sub_questions"])]}

    def claims(payload):
        return {"claims": [{"id": f"c{i + 1}", "source_sentence_ids": [f"S{s}" for s in c["sentences"]],
                            "text": c["text"], "note": ""} for i, c in enumerate(o["claims"])],
                "gaps": [{"id": f"g{j + 1}", "source_sentence_ids": [f"S{s}" for s in g["sentences"]],
                          "text": g["text"]} for j, g in enumerate(o["gaps"])],
                "asks_clarification": o["asks_clarification"]}

    def sufficiency(payload):
        chunk = payload.chunks[0].id
        items = []
        for q in payload.sub_questions:
            yes = o["sufficiency"][_index(q.id, sq_texts, q.text)] == "yes"
            items.append({"sub_question_id": q.id, "evidence": [{"chunk_id": chunk, "quote": CHUNK_START}] if yes else [],
                          "missing_facts": [] if yes else [q.text], "reasoning": "oracle",
                          "sufficient": "yes" if yes else "no"})
        return {"items": items}

    def faithfulness(payload):
        first, last = payload.chunks[0].id, payload.chunks[-1].id
        items = []
        for c in payload.claims:
            relation = o["faithfulness"][_index(c.id, claim_texts, c.text)]
            if relation == "stale":
                # Answered as a judge blind to dates would (it states it; a later chunk, if any, says
                # otherwise), quoting each chunk's opening words: the pipeline's date review must make it stale.
                blind = "conflicting" if len(payload.chunks) > 1 else "supported"
                items.append({"claim_id": c.id, "reasoning": "oracle", "relation": blind,
                              "evidence": [{"chunk_id": k.id, "quote": CHUNK_START} for k in payload.chunks],
                              "contradicting_chunk_ids": [last] if blind == "conflicting" else []})
                continue
            # A verdict's grounding chunks are the ones its evidence quotes (schemas.FaithfulnessItem).
            quoted = [first] if relation in ("supported", "conflicting") else []
            items.append({"claim_id": c.id, "evidence": [{"chunk_id": k, "quote": CHUNK_START} for k in quoted],
                          "reasoning": "oracle", "relation": relation,
                          "contradicting_chunk_ids": [last] if relation in ("contradicted", "conflicting") else []})
        return {"items": items}

    def completeness(payload):
        sq_of = {_index(q.id, sq_texts, q.text): q.id for q in payload.sub_questions}
        return {
            "claims": [{"claim_id": c.id, "role": role,
                        "sub_question_ids": [sq_of[k - 1] for k in sqs]}
                       for c in payload.claims
                       for role, sqs in [o["roles"][_index(c.id, claim_texts, c.text)]]],
            "gaps": [{"gap_id": g.id, "sub_question_ids": [sq_of[k - 1] for k in o["gap_links"][
                _index(g.id, gap_texts, g.text)]]} for g in payload.gaps],
            "sub_questions": [{"sub_question_id": q.id, "reasoning": "oracle",
                               "status": o["statuses"][_index(q.id, sq_texts, q.text)]}
                              for q in payload.sub_questions],
        }

    fake = FakeClient()
    for name, fn in (("questions", questions), ("claims", claims), ("sufficiency", sufficiency),
                     ("faithfulness", faithfulness), ("completeness", completeness)):
        fake.respond(name, fn)
    return fake


def _outcome(result) -> tuple[str | None, str, str]:
    cell = result.failure_cell.value if result.failure_cell is not None else None
    return cell, result.status.quality_gate.value, result.status.reason


def _expected(trace: dict) -> tuple[str, str, str]:
    e = trace["expected"]
    return e["cell"], e["gate"], e["reason"]


def _table(rows: list[tuple]) -> str:
    return "\n".join(f"{i:9} {','.join(tags):42} want {want!s:62} got {got!s}{extra}"
                     for i, tags, want, got, extra in rows)


def test_golden_oracle_reproduces_every_cell_and_gate() -> None:
    from veralith.pipeline.evaluate import evaluate

    mismatches = []
    for trace in TRACES + HELD_OUT:
        result = evaluate(trace["query"], trace["context"], trace["response"], persist=False,
                          client=oracle_client(trace), metadata=trace.get("metadata"))
        got = _outcome(result)
        relations = [j.relation.value for j in result.faithfulness]
        if relations != trace["oracle"]["faithfulness"]:
            got = (*got, f"relations {relations}")
        errors = "".join(f" [{e.phase.value}: {e.kind}: {e.message[:160]}]" for e in result.errors)
        if got != _expected(trace) or result.errors:
            mismatches.append((trace["id"], trace["tags"], _expected(trace), got, errors))
    assert not mismatches, f"{len(mismatches)} of {len(TRACES) + len(HELD_OUT)} traces differ:\n{_table(mismatches)}"


# ---------------------------------------------------------------- (b) the offline judges, measured

def _local_figures(traces: list[dict]) -> tuple[float, float, list[str], int, list[tuple]]:
    import veralith
    from veralith.config import settings

    rows, cell_ok, gate_ok, false_passes = [], 0, 0, []
    with settings.override(backend="local"):
        for trace in traces:
            result = veralith.evaluate(trace["query"], trace["context"], trace["response"], persist=False,
                                       metadata=trace.get("metadata"))
            got, want = _outcome(result), _expected(trace)
            cell_ok += got[0] == want[0]
            gate_ok += got[1] == want[1]
            if got[1] == "pass" and want[1] == "fail" and SWAP_TAGS & set(trace["tags"]):
                false_passes.append(trace["id"])
            if got != want:
                rows.append((trace["id"], trace["tags"], want, got, ""))
    n_swaps = sum(bool(SWAP_TAGS & set(t["tags"])) for t in traces)
    return cell_ok / len(traces), gate_ok / len(traces), false_passes, n_swaps, rows


def test_golden_local_backend_accuracy() -> None:
    cell_acc, gate_acc, false_passes, n_swaps, rows = _local_figures(TRACES)
    report = (f"local backend on {len(TRACES)} golden traces: cell accuracy {cell_acc:.3f}, gate accuracy "
              f"{gate_acc:.3f}, false passes on swaps {len(false_passes)}/{n_swaps} {false_passes}")
    print(report)
    print(_table(rows))
    assert cell_acc >= LOCAL_CELL_ACCURACY_FLOOR, report
    assert gate_acc >= LOCAL_GATE_ACCURACY_FLOOR, report
    if LOCAL_MAX_FALSE_PASSES_ON_SWAPS is not None:
        assert len(false_passes) <= LOCAL_MAX_FALSE_PASSES_ON_SWAPS, report


def test_held_out_local_backend_accuracy() -> None:
    """The same measurement on traces the heuristics were never tuned on; figures only (no table)."""
    cell_acc, gate_acc, false_passes, n_swaps, _ = _local_figures(HELD_OUT)
    report = (f"local backend on {len(HELD_OUT)} held-out traces: cell accuracy {cell_acc:.3f}, gate accuracy "
              f"{gate_acc:.3f}, false passes on swaps {len(false_passes)}/{n_swaps}")
    print(report)
    assert cell_acc >= HELD_OUT_CELL_ACCURACY_FLOOR, report
    assert gate_acc >= HELD_OUT_GATE_ACCURACY_FLOOR, report
