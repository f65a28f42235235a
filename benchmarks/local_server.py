"""Judge the example traces with a model server of your own, and see what each trace cost and came to.

    .venv/bin/python benchmarks/local_server.py --base-url http://127.0.0.1:8080/v1 [--model NAME]
        [--file examples/traces.jsonl] [--limit N] [--json report.json]
    .venv/bin/python benchmarks/local_server.py --fake prose --fake enum_case    # the self-test

Each trace is judged on its own, one after the other, through `veralith.evaluate` with the `openai`
backend pointed at `--base-url` (no cache, nothing stored, every model priced at 0), so the figures
are the server's: per trace the judge calls (HTTP requests, re-asks and retries included), prompt
and output tokens as the server counted them, wall time, the failure cell and gate, judge errors,
replies read leniently (repairs), and whether any verdict carried a confidence. The totals at the
end say how many traces were classified, how many judge calls timed out (a timed-out request to a
local server is never sent again), and the whole run's wall time, learning the server's habits
included (the first trace pays for it unless the server notes already hold them; `--fresh` forgets
them first). The settings in force (VERALITH_STRUCTURED, VERALITH_SYSTEM_PROMPT, VERALITH_LOGPROBS,
VERALITH_BATCH_SIZE, VERALITH_TIMEOUT_S, VERALITH_SERVER_NOTES, ...) apply, so the same script
compares set-ups; what the client learnt about the server (how it takes the schema, instructions in
the user turn, log-probabilities dropped) is logged once, on stderr.

After the traces, a table per judge task (questions, claims, sufficiency, faithfulness,
completeness): the requests it sent, the prompt and output tokens and seconds of those answered, its
timed-out attempts, and the requests re-sent after a timeout (never, to a local server); and the
load average (1, 5, 15 minutes) at the start and the end, since other work on the machine slows a
CPU server down.

`--fake HABIT` (repeatable) starts tests/fake_openai_server.py with those habits instead of using
`--base-url`: it checks the script and the client, not a model (its verdicts are trivially
optimistic).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


_FAILED = re.compile(r"^(\w+): attempt \d+ failed: (\w+)")
_RESENT = re.compile(r"^(\w+): attempt \d+ re-sent after a timeout")
_TIMEOUTS = ("APITimeoutError", "DeadlinePassed")
_COUNTED = ("requests", "answered", "prompt_tokens", "output_tokens", "seconds", "timeouts", "resent")


class Tally(logging.Handler):
    """Per judge task, from the client's request records (veralith.llm.requests): requests, tokens and
    seconds of the answered ones, timed-out attempts, requests re-sent after a timeout."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.tasks: dict[str, dict[str, float]] = {}

    def _task(self, name: str) -> dict[str, float]:
        return self.tasks.setdefault(name, dict.fromkeys(_COUNTED, 0))

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("{"):
            try:
                reply = json.loads(text)
            except ValueError:
                return
            task = self._task(str(reply.get("task")))
            task["requests"] += 1
            task["answered"] += 1
            task["prompt_tokens"] += reply.get("prompt_tokens") or 0
            task["output_tokens"] += reply.get("output_tokens") or 0
            task["seconds"] += reply.get("seconds") or 0
        elif failed := _FAILED.match(text):
            task = self._task(failed.group(1))
            task["requests"] += 1
            task["timeouts"] += failed.group(2) in _TIMEOUTS
        elif resent := _RESENT.match(text):
            self._task(resent.group(1))["resent"] += 1

    def table(self) -> str:
        head = f"{'task':<14}{'requests':>9}{'in tok':>9}{'out tok':>9}{'s':>9}{'s/request':>10}{'out tok/s':>10}" \
               f"{'timeouts':>9}{'re-sent':>8}"
        lines = [head, "-" * len(head)]
        order = ["questions", "claims", "sufficiency", "faithfulness", "completeness"]
        def line(name: str, t: dict[str, float]) -> str:
            speed = f"{t['output_tokens'] / t['seconds']:.1f}" if t["seconds"] >= 0.1 else "-"
            return (f"{name:<14}{t['requests']:>9.0f}{t['prompt_tokens']:>9.0f}{t['output_tokens']:>9.0f}"
                    f"{t['seconds']:>9.1f}{t['seconds'] / max(t['answered'], 1):>10.1f}{speed:>10}"
                    f"{t['timeouts']:>9.0f}{t['resent']:>8.0f}")

        for name in sorted(self.tasks, key=lambda t: (order.index(t) if t in order else len(order), t)):
            lines.append(line(name, self.tasks[name]))
        total = {k: sum(t[k] for t in self.tasks.values()) for k in _COUNTED}
        lines += ["-" * len(head), line("all", total), f"requests re-sent after a timeout: {total['resent']:.0f}"]
        return "\n".join(lines)


def served_model(base_url: str) -> str | None:
    """The one model the server at `base_url` lists (`/models`), else None (none, several, or no answer):
    what it serves is what is asked and what the results are labelled with."""
    import urllib.request

    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=10) as reply:
            listed = [m.get("id") for m in json.load(reply).get("data") or [] if isinstance(m, dict)]
    except (OSError, ValueError, AttributeError):
        return None
    return listed[0] if len(listed) == 1 and isinstance(listed[0], str) else None


def _load() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


def judge(records: list[dict[str, Any]], base_url: str, model: str | None) -> list[dict[str, Any]]:
    """One row per record: what judging it cost and came to."""
    from veralith import evaluate
    from veralith.config import settings

    overrides: dict[str, Any] = {"backend": "openai", "base_url": base_url, "cache": False,
                                 "pricing": {"*": {"input": 0, "output": 0}}}
    if model:
        overrides["judge_model"] = model
    rows = []
    with settings.override(**overrides):
        for n, record in enumerate(records, 1):
            started = time.perf_counter()
            result = evaluate(record["query"], record.get("context") or [], record.get("response") or "",
                              persist=False)
            rows.append({
                "trace": str(record.get("id", n)), "seconds": round(time.perf_counter() - started, 2),
                "calls": result.usage.calls, "input_tokens": result.usage.input_tokens,
                "output_tokens": result.usage.output_tokens,
                "cell": result.failure_cell.value if result.failure_cell else None,
                "gate": result.status.quality_gate.value, "reason": result.status.reason,
                "errors": [f"{e.phase.value}:{e.kind}" for e in result.errors],
                "error_messages": [f"{e.phase.value}:{e.kind}: {e.message}" for e in result.errors],
                "timeouts": sum(e.kind == "timeout" for e in result.errors),
                "repairs": len(result.repairs),
                "confidence": any(j.confidence is not None for j in [*result.faithfulness, *result.sufficiency]),
                "judge_model": result.judge_model})
            row = rows[-1]
            print(f"{row['trace']}: {row['seconds']:.1f} s, {row['calls']} calls, {row['cell'] or '-'} "
                  f"{' '.join(row['errors'])}", file=sys.stderr, flush=True)   # progress: a real server is slow
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    head = f"{'trace':<14}{'s':>7}{'calls':>6}{'in tok':>8}{'out tok':>8}  {'cell':<22}{'gate':<14}errors / repairs"
    lines = [head, "-" * len(head)]
    for r in rows:
        notes = ", ".join(r["errors"]) + (f" ({r['repairs']} repairs)" if r["repairs"] else "")
        lines.append(f"{r['trace'][:13]:<14}{r['seconds']:>7.2f}{r['calls']:>6}{r['input_tokens']:>8}"
                     f"{r['output_tokens']:>8}  {r['cell'] or '-':<22}{r['gate']:<14}{notes}")
    classified = sum(r["cell"] is not None for r in rows)
    total_s = sum(r["seconds"] for r in rows)
    malformed = sum(e.endswith(":malformed_reply") for r in rows for e in r["errors"])
    lines += ["-" * len(head),
              f"{len(rows)} traces, {classified} classified, {sum(bool(r['errors']) for r in rows)} with judge "
              f"errors, {sum(r['confidence'] for r in rows)} with confidences; {sum(r['calls'] for r in rows)} "
              f"calls, {sum(r['input_tokens'] for r in rows)} prompt and {sum(r['output_tokens'] for r in rows)} "
              f"output tokens, {total_s:.1f} s ({total_s / max(len(rows), 1):.1f} s per trace); model "
              f"{rows[0]['judge_model'] if rows else '-'}",
              f"malformed replies: {malformed}; judge calls timed out: {sum(r.get('timeouts', 0) for r in rows)} "
              "(a timed-out request to a local server is not sent again)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="the server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", help="model name to send (default: VERALITH_JUDGE_MODEL, else the server's)")
    parser.add_argument("--file", type=Path, default=REPO / "examples" / "traces.jsonl")
    parser.add_argument("--limit", type=int, default=None, help="only the first N records")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--fake", action="append", default=[], metavar="HABIT",
                        help="start the fake server with this habit instead of --base-url (repeatable)")
    parser.add_argument("--verbose", "-v", action="store_true", help="also log each re-ask and its reason")
    parser.add_argument("--calls", type=Path, metavar="FILE",
                        help="write every request's form, cap, timing, tokens and the reply's raw text to FILE "
                             "(JSON lines), with each re-ask's reason")
    parser.add_argument("--fresh", action="store_true",
                        help="forget what the server notes hold about this server first (learn it again)")
    args = parser.parse_args(argv)
    if not args.base_url and not args.fake:
        parser.error("give --base-url (a server of yours) or --fake HABIT (the self-test)")
    records = [json.loads(line) for line in args.file.read_text(encoding="utf-8").splitlines() if line.strip()]
    records = records[:args.limit] if args.limit else records
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    tally = Tally()
    requests_log = logging.getLogger("veralith.llm.requests")
    requests_log.setLevel(logging.DEBUG)
    requests_log.addHandler(tally)
    requests_log.propagate = False   # each request's record goes to the tally and --calls, not to stderr
    if args.calls:
        to_file = logging.FileHandler(args.calls, mode="w", encoding="utf-8")
        to_file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        for name, level in (("veralith.llm.requests", logging.DEBUG), ("veralith.llm.client", logging.INFO)):
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.addHandler(to_file)
    server = None
    base_url = args.base_url
    if args.fake:
        command = [sys.executable, str(REPO / "tests" / "fake_openai_server.py"), "--port", "0", "--auto"]
        for habit in args.fake:
            command += ["--habit", habit]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        ready = (server.stdout.readline() if server.stdout else "").split()
        if not ready or ready[0] != "READY":
            server.terminate()
            print(f"the fake server did not start: {ready}", file=sys.stderr)
            return 1
        base_url = ready[1]
    model = args.model or ("fake-model" if args.fake else None) or os.environ.get("VERALITH_JUDGE_MODEL") \
        or served_model(base_url)
    if args.fresh:
        from veralith.config import settings
        from veralith.llm.notes import forget

        forget(base_url, model or settings.judge_model)
    started, load_at_start = time.perf_counter(), _load()
    try:
        rows = judge(records, base_url, model)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    print(report(rows))
    print()
    print(tally.table())
    print(f"whole run: {time.perf_counter() - started:.1f} s for {len(rows)} traces; load average (1, 5, 15 min) "
          f"{load_at_start} at the start, {_load()} at the end")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
