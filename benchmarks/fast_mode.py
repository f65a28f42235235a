"""The single-call mode against the full mode: agreement on the golden suite with the same labels, and
the cost and latency of one round trip instead of two.

    .venv/bin/python benchmarks/fast_mode.py [--latency 0.2] [--suite golden|held_out|both]

Both modes run in this process through the real OpenAI SDK against the scripted fake server
(tests/fake_openai_server.py), whose replies are the golden suite's oracle labels
(tests/test_golden.oracle_client): each request's data blocks are read back into the task input the
prompt was rendered from, and the oracle answers it; the `fast` task's reply is the same labels
written as one (tests/fast_oracle.py). So any difference in cell or gate is the mode's reading of its
replies, not a different judgment: what a real model does differently in one call (it sees everything
at once, the judges are not isolated) is not measured here and needs a labelled run against a real
model. Usage is counted by the fake with tiktoken (prompt messages plus the response_format schema in,
the reply's JSON out) and priced with Veralith's own table for the judge model; the oracle's
reasoning fields are one word, so output tokens are below a real model's in both modes. Latency: each
request waits `--latency` seconds at the server; traces are judged one after another, so the wall time
per trace is the mode's round trips plus client overhead (the client is allowed 16 requests in flight,
as for a hosted API: the full mode's calls of one round trip run at once). The reply cache is off. The dry run's
estimate of the same traces is printed beside the measured cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))   # the offline copy of the encodings

JUDGE = "gpt-4o"


def _payload(task: str, body: dict[str, Any]) -> Any:
    """The task input a request's prompt was rendered from, read back from its data blocks."""
    from fake_openai_server import blocks

    from veralith.llm import tasks as t

    b = blocks(body)
    query = b.get("question", [({}, "")])[0][1]
    sentences = [t.Sentence(id=a["id"], text=text) for a, text in b.get("s", [])]
    chunks = [t.ChunkIn(id=a["id"], text=text, source=a.get("source"), date=a.get("date"))
              for a, text in b.get("chunk", [])]
    sqs = [t.SubQuestionIn(id=a["id"], text=text, cutoff=a.get("cutoff")) for a, text in b.get("subq", [])]
    claims = [t.ClaimIn(id=a["id"], text=text, context_note=a.get("note"), cutoff=a.get("cutoff"))
              for a, text in b.get("claim", [])]
    gaps = [t.GapIn(id=a["id"], text=text) for a, text in b.get("gap", [])]
    return {
        "questions": lambda: t.QuestionsInput(query=query),
        "claims": lambda: t.ClaimsInput(query=query, response=" ".join(s.text for s in sentences),
                                        sentences=sentences),
        "sufficiency": lambda: t.SufficiencyInput(query=query, sub_questions=sqs, chunks=chunks),
        "faithfulness": lambda: t.FaithfulnessInput(query=query, claims=claims, chunks=chunks),
        "completeness": lambda: t.CompletenessInput(query=query, sub_questions=sqs, claims=claims, gaps=gaps),
        "fast": lambda: t.FastInput(query=query, sentences=sentences, chunks=chunks),
    }[task]()


def _responder(trace: dict) -> Any:
    from fake_openai_server import task_of
    from fakes import _quoted
    from fast_oracle import fast_oracle_client

    oracle = fast_oracle_client(trace)

    def answer(body: dict[str, Any]) -> Any:
        task = task_of(body)
        if task == "fast_reask":   # never needed with the oracle's labels, which pass every check
            return None
        payload = _payload(task, body)
        # The oracle quotes a chunk's opening words where it needs a quote (tests/fakes.py's CHUNK_START).
        return _quoted(oracle._responders[task](payload), payload)
    return answer


def _run(traces: list[dict], server: Any, mode: str) -> dict[str, Any]:
    import veralith
    from veralith.config import settings
    from veralith.llm.backends import forget_clients
    from veralith.pipeline.budget import estimate_trace

    forget_clients()
    results, estimates, started = [], [], time.perf_counter()
    with settings.override(backend="openai", base_url=server.base_url, api_key="bench", judge_model=JUDGE,
                           cache=False, max_retries=0, mode=mode, logprobs="off",
                           # A hosted API's concurrency: unset, a server on 127.0.0.1 gets one request at a
                           # time (a local model's), which would serialise the full mode's calls.
                           server_concurrency=16):
        for trace in traces:
            server.responder = _responder(trace)
            results.append(veralith.evaluate(trace["query"], trace["context"], trace["response"], persist=False))
        seconds = time.perf_counter() - started
        estimates = [estimate_trace(t["query"], t["context"], t["response"]) for t in traces]
    return {"results": results, "seconds": seconds,
            "calls": sum(r.usage.calls for r in results),
            "input": sum(r.usage.input_tokens for r in results), "output": sum(r.usage.output_tokens for r in results),
            "usd": sum(r.usage.usd or 0 for r in results), "estimated_usd": sum(e.usd or 0 for e in estimates)}


def _outcome(result: Any) -> tuple[str | None, str]:
    return (result.failure_cell.value if result.failure_cell else None, result.status.quality_gate.value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--latency", type=float, default=0.2, help="seconds each request waits at the server")
    parser.add_argument("--suite", choices=("golden", "held_out", "both"), default="both")
    args = parser.parse_args(argv)
    from fake_openai_server import FakeOpenAIServer
    from test_golden import HELD_OUT, TRACES

    traces = {"golden": TRACES, "held_out": HELD_OUT, "both": TRACES + HELD_OUT}[args.suite]
    server = FakeOpenAIServer(latency_s=args.latency, count_tokens=True, auto=False).start()
    try:
        full = _run(traces, server, "full")
        fast = _run(traces, server, "fast")
    finally:
        server.stop()
    n = len(traces)
    pairs = list(zip(full["results"], fast["results"], strict=True))
    same_cell = sum(_outcome(a)[0] == _outcome(b)[0] for a, b in pairs)
    same_gate = sum(_outcome(a)[1] == _outcome(b)[1] for a, b in pairs)
    expected = [(t["expected"]["cell"], t["expected"]["gate"]) for t in traces]
    print(f"{n} golden traces ({args.suite}), judge model {JUDGE}, the same oracle labels scripted for both modes; "
          f"fake server, {args.latency:.3f} s per request, tokens counted with tiktoken")
    print(f"agreement fast vs full: same cell {same_cell}/{n} ({same_cell / n:.1%}), "
          f"same gate {same_gate}/{n} ({same_gate / n:.1%})")
    for name, run in (("full", full), ("fast", fast)):
        cell_ok = sum(_outcome(r)[0] == e[0] for r, e in zip(run["results"], expected, strict=True))
        gate_ok = sum(_outcome(r)[1] == e[1] for r, e in zip(run["results"], expected, strict=True))
        errors = sum(bool(r.errors) for r in run["results"])
        print(f"  {name}: expected cell {cell_ok}/{n}, expected gate {gate_ok}/{n}, results with judge errors {errors}")
    print(f"{'mode':<6}{'calls/trace':>12}{'prompt tok/trace':>18}{'output tok/trace':>18}{'USD/trace':>11}"
          f"{'dry-run USD/trace':>19}{'s/trace':>9}")
    for name, run in (("full", full), ("fast", fast)):
        print(f"{name:<6}{run['calls'] / n:>12.2f}{run['input'] / n:>18,.0f}{run['output'] / n:>18,.0f}"
              f"{run['usd'] / n:>11.5f}{run['estimated_usd'] / n:>19.5f}{run['seconds'] / n:>9.3f}")
    estimated = fast["estimated_usd"] / full["estimated_usd"]
    print(f"fast / full: cost {fast['usd'] / full['usd']:.3f} (dry run {estimated:.3f}),"
          f" prompt tokens {fast['input'] / full['input']:.3f}, calls {fast['calls'] / full['calls']:.3f}, "
          f"wall time {fast['seconds'] / full['seconds']:.3f}")


if __name__ == "__main__":
    main()
