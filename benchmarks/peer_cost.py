"""What a trace costs with the original `veralith` 0.2.7 from the package index and with this Veralith, on
the six traces of issue 39, against one scripted server that bills schemas as OpenAI does (issue 39 item 4).

    .venv/bin/python benchmarks/peer_cost.py [--venv DIR] [--fresh] [--markdown]

Both packages install `import veralith`, so the original runs in a virtual environment of its own, outside
the repository (default: ~/.cache/veralith-bench/veralith-0.2.7; `--venv` chooses another, `--fresh` builds it
again), made with `python -m venv` and `pip install veralith==0.2.7` from the package index: the first run
needs the network, later runs reuse it. Not run by the tests or CI for that reason
(tests/test_peer_cost.py covers the scripted answers). `--original-json spaced|indented` writes the
original's replies as its prompts show their shape, or indented, instead of compact like Veralith's.

How the original is configured (read from its installed source, veralith/llm.py and config.py): an
`openai.OpenAI(api_key=OPENAI_API_KEY)` client, so `OPENAI_BASE_URL` points it at the scripted server;
`VERALITH_JUDGE_MODEL` (default gpt-4o) judges and `VERALITH_DECOMPOSER_MODEL` (default gpt-4o-mini)
decomposes; `response_format={"type": "json_object"}` with the reply's shape described in each system
prompt, judge batches of 5 (`VERALITH_BATCH_SIZE`). Its five calls: the query split into
`{"sub_questions": [text]}`, the response into `{"claims": [{"text", "type"}]}` (answer, elaboration or
conversational; only the first two are judged), sufficiency and faithfulness per batch of 5 as
`{"results": [...]}` with 0-based indices and Y/N verdicts, and one completeness call mapping each claim to
at most one sub-question index. It runs with `persist=False`, in a directory of its own, with none of this
process's VERALITH_* settings.

One server (benchmarks/six_traces.py: ScriptedServer) answers all three runs, each request from the same
oracle per trace: Veralith's structured-output requests with the oracle cut to the schema they send, the
original's JSON-mode requests with the same oracle in the original's shape (`original_answer`: the same
sub-questions, claims, verdicts, chunks and one-sentence reasons). Every request is counted as OpenAI bills
it: messages plus the strict schema (the original sends none) as input, the reply as output, tiktoken
o200k_base offline; priced at gpt-4o $2.50 / $10 and gpt-4o-mini $0.15 / $0.60 per million tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from six_traces import ORACLES, ScriptedServer, answer_schema, row, usd

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VERALITH_SHARED_DIR") or REPO.parent / "shared")
VERSION = "0.2.7"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
DEFAULT_VENV = CACHE / "veralith-bench" / f"veralith-{VERSION}"

# Run with the original's interpreter: every trace through its evaluate(), one JSON line of outcomes back.
_CHILD = """
import json, sys
import veralith
assert veralith.__version__ == sys.argv[1], veralith.__version__
out = []
for t in json.load(sys.stdin):
    r = veralith.evaluate(t["query"], t["context"], t["response"], persist=False)
    out.append([t["name"], r.diagnosis.failure_cell.value if r.diagnosis else None, sorted(r.errors)])
print(json.dumps(out))
"""


# ---------------------------------------------------------------- the original's scripted answers

_TASKS = (("You decompose a user query", "questions"), ("You decompose a generated response", "claims"),
          ("You are a Sufficiency judge", "sufficiency"), ("You are a Faithfulness judge", "faithfulness"),
          ("You are a Completeness judge", "completeness"))


def original_task(body: dict[str, Any]) -> str:
    system = str(body["messages"][0]["content"])
    return next((task for opening, task in _TASKS if system.startswith(opening)), "unknown")


def _numbered(user: str, label: str) -> list[str]:
    """The texts of the `[Q0] ...` (or `[R0] ...`) lines of the original's user message, in order."""
    return [m.group(2).strip() for m in re.finditer(rf"^\[{label}(\d+)\] (.*)$", user, re.MULTILINE)]


def original_answer(oracle: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The oracle's answer to one of the original's requests, in the shape its prompt asks for."""
    task, user = original_task(body), str(body["messages"][1]["content"])
    claims = [text for text, _ in oracle["claims"]]
    if task == "questions":
        return {"sub_questions": list(oracle["sub_questions"])}
    if task == "claims":   # a claim that answers is an "answer", one that supports an "elaboration"
        return {"claims": [{"text": text, "type": "answer" if role == "answers" else "elaboration"}
                           for text, (role, _) in zip(claims, oracle["roles"], strict=True)]}
    if task == "sufficiency":
        results = []
        for n, text in enumerate(_numbered(user, "Q")):
            v = oracle["sufficiency"][oracle["sub_questions"].index(text)]
            results.append({"sub_question_idx": n, "verdict": "Y" if v["sufficient"] == "yes" else "N",
                            "reasoning": v["why"], "supporting_chunk_ranks": sorted({c for c, _ in v["evidence"]})})
        return {"results": results}
    if task == "faithfulness":   # the original has two labels: only a supported claim is grounded
        results = []
        for n, text in enumerate(_numbered(user, "R")):
            v = oracle["faithfulness"][claims.index(text)]
            results.append({"claim_idx": n, "verdict": "Y" if v["relation"] == "supported" else "N",
                            "reasoning": v["why"], "grounding_chunk_ranks": list(v["grounding"])})
        return {"results": results}
    if task == "completeness":   # a claim covers the first sub-question it answers or supports; extra: none
        asked = _numbered(user, "Q")
        assignments = []
        for n, text in enumerate(_numbered(user, "R")):
            _, sqs = oracle["roles"][claims.index(text)]
            covers = asked.index(oracle["sub_questions"][sqs[0] - 1]) if sqs else None
            assignments.append({"claim_idx": n, "covers_sub_question_idx": covers})
        return {"claim_assignments": assignments, "reasoning": " ".join(why for _, why in oracle["statuses"])}
    raise ValueError(f"not a request of the original's: {str(body['messages'][0]['content'])[:80]!r}")


# How the original's replies are written out: as Veralith's (compact, the default: the same answers cost
# the same characters), or as the original's prompts show their shape (spaced), or indented; a model in
# JSON mode may write any of them, and output tokens cost four times input on gpt-4o.
WRITTEN = {"compact": {"separators": (",", ":")}, "spaced": {}, "indented": {"indent": 2}}


def answerer(original_json: str = "compact") -> Callable[[dict[str, Any], dict[str, Any]], Any]:
    """The server's answer to either package's request: a strict schema is Veralith's (compact JSON), JSON
    mode without one the original's (written as `original_json` says)."""
    def answer(oracle: dict[str, Any], body: dict[str, Any]) -> Any:
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return answer_schema(oracle, body)
        return json.dumps(original_answer(oracle, body), **WRITTEN[original_json])
    return answer


# ---------------------------------------------------------------- the original, in its own environment

def original_python(venv: Path, fresh: bool) -> Path:
    """The interpreter of a virtual environment holding veralith==VERSION from the package index."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import veralith; print(veralith.__version__)"]
    if not fresh and python.exists():
        done = subprocess.run(check, capture_output=True, text=True, cwd=tempfile.gettempdir())
        if done.returncode == 0 and done.stdout.strip() == VERSION:
            return python
    print(f"installing veralith=={VERSION} from the package index into {venv} ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"veralith=={VERSION}"], check=True)
    return python


def run_original(python: Path, server: ScriptedServer) -> list[list[Any]]:
    """The six traces through the original's evaluate() against `server`: [name, cell, errors] each."""
    traces = [{k: o[k] for k in ("name", "query", "context", "response")} for o in ORACLES]
    with tempfile.TemporaryDirectory(prefix="veralith-original-") as tmp:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "OPENAI_BASE_URL": server.base_url,
               "OPENAI_API_KEY": "bench", "VERALITH_JUDGE_MODEL": "gpt-4o",
               "VERALITH_DECOMPOSER_MODEL": "gpt-4o-mini", "VERALITH_DB_PATH": str(Path(tmp) / "veralith.db"),
               "TIKTOKEN_CACHE_DIR": os.environ["TIKTOKEN_CACHE_DIR"]}   # its budget guard counts with tiktoken
        done = subprocess.run([str(python), "-c", _CHILD, VERSION], input=json.dumps(traces), capture_output=True,
                              text=True, env=env, cwd=tmp, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the original veralith {VERSION} failed:\n{done.stderr[-2000:]}")
    outcomes: list[list[Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcomes


# ---------------------------------------------------------------- report

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the original's virtual environment")
    parser.add_argument("--fresh", action="store_true", help="build that environment again")
    parser.add_argument("--original-json", choices=sorted(WRITTEN), default="compact",
                        help="how the original's replies are written (default: compact, as Veralith's)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "tests"), str(REPO)]
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))
    from reply_cost import measure

    python = original_python(args.venv, args.fresh)
    with ScriptedServer(answerer(args.original_json)) as server:
        original = run_original(python, server)
        runs = {"original": server.calls()}
        mini = measure("gpt-4o-mini", server)
        runs["mini"] = mini["calls"]
        runs["one"] = measure(None, server)["calls"]
    bad = [o for o in original if o[2]]
    if bad:
        raise SystemExit(f"the original reported judge errors: {bad}")
    base = usd(runs["original"])
    print(f"### Six traces, one scripted server, schemas billed as input (original: veralith=={VERSION}, its "
          f"replies written {args.original_json})\n")
    print("| | calls | gpt-4o in / out | gpt-4o-mini in / out | USD per trace |")
    print("|---|---:|---:|---:|---:|")
    print(row(f"the original `veralith` {VERSION} (JSON mode, no schema)", runs["original"], warm=False))
    for key, name in (("mini", "Veralith, `VERALITH_DECOMPOSER_MODEL=gpt-4o-mini`"), ("one", "Veralith, one model")):
        cost = usd(runs[key])
        print(row(name, runs[key], warm=False).removesuffix(" |") + f" ({cost / base - 1:+.0%}) |")
    print("\nCells (original / Veralith): " + "; ".join(
        f"{name}: {cell} / {ours[1]}" for (name, cell, _), ours in zip(original, mini["cells"], strict=True)))
    cost = usd(runs["mini"])
    print(f"Issue 39's must-hold, with the decomposer model at or below the original: ${cost:.5f} against "
          f"${base:.5f} — {'met' if cost <= base else 'MISSED'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
