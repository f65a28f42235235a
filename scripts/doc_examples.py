"""The worked examples of the docs that show what a command prints, produced by running the commands.

    python scripts/doc_examples.py           # rewrite every marked example from a fresh run
    python scripts/doc_examples.py --check   # exit 1, naming each example that differs from a fresh run

An example is a fenced block right under a line `<!-- example: NAME -->` in README.md or a page of
docs/; NAME is a key of EXAMPLES. Its text is what the commands print: each scene (a list of
examples sharing one history) runs its commands in order, in this process (typer's CliRunner, 100
columns, no colour), on the offline backend, against a fresh temporary database, from the
repository's root (so paths read `examples/traces.jsonl`). tests/test_doc_examples.py runs the
check, so an example cannot drift from what the code prints and an edit by hand fails the tests.

What differs from one run to the next (times, rates, durations) is left as printed in the page and
ignored by the comparison (VOLATILE); a page is rewritten only where something else changed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COLUMNS = 100
MARK = re.compile(r"^<!-- example: (?P<name>[\w-]+) -->\n(?P<fence>`{3,})(?P<info>[^\n]*)\n(?P<body>.*?)"
                  r"^(?P=fence)[ \t]*$", re.M | re.S)
# Text that changes from run to run, each with what it reads as in a comparison.
VOLATILE = [
    (re.compile(r"wall time( +)\d+(\.\d+)? s \(\d+(\.\d+)? traces/s\)"), r"wall time\1N s (N traces/s)"),
    (re.compile(r"\b\d\d-\d\d \d\d:\d\d\b"), "MM-DD HH:MM"),                   # `veralith runs`: started
    (re.compile(r"created \d{4}-\d\d-\d\d \d\d:\d\d UTC"), "created <time>"),  # `veralith inspect`
    (re.compile(r"\d+ ms\b"), "N ms"),
]


@dataclass(frozen=True)
class Example:
    name: str
    make: Callable[[Session], str]


class Session:
    """One scene's history: a temporary database, the offline judge, commands run in this process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def command(self, line: str, *, stream: str = "stdout", after: str | None = None) -> str:
        """`$ veralith LINE` and what it printed on `stream` ("stdout", "stderr" or "both"), each line's
        trailing spaces dropped; a non-zero exit code is said after the command. `after`: a command
        run first, its output not shown."""
        import shlex

        from typer.testing import CliRunner

        from veralith.cli import app

        if after is not None:
            self.command(after)
        done = CliRunner(env={"COLUMNS": str(COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}).invoke(
            app, shlex.split(line), catch_exceptions=False)
        printed = {"stdout": done.stdout, "stderr": done.stderr, "both": done.stderr + done.stdout}[stream]
        said = f"$ veralith {line}" + (f"      # exit code {done.exit_code}" if done.exit_code else "")
        return "\n".join([said, *(text.rstrip() for text in printed.splitlines())]) + "\n"

    def python(self, code: str) -> str:
        """What `code` prints when run."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<doc example>", "exec"), {"__name__": "__main__"})
        return out.getvalue()


@contextlib.contextmanager
def _session() -> Iterator[Session]:
    from veralith.config import settings

    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="veralith-doc-") as tmp:
        folder = Path(tmp)
        with settings.override(backend="local", db_path=str(folder / "veralith.db"), db_url=None,
                               spool_dir=str(folder / "spool")):
            os.chdir(REPO)
            try:
                yield Session(folder)
            finally:
                os.chdir(previous)


def _readme_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.search(r"^```python\n(.*?)^```", text, re.M | re.S).group(1)  # type: ignore[union-attr]


def _diagnosis_mismatch(session: Session) -> str:
    """A failing `assert_diagnosis` as pytest reports it: the quickstart's P/E question, expected to pass."""
    from veralith.testing import DiagnosisMismatch, assert_diagnosis

    try:
        assert_diagnosis("What is a P/E ratio and what was Apple's P/E in 2023?",
                         ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings "
                          "per share."],
                         "A P/E ratio divides share price by earnings per share. Apple's P/E in 2023 was 42.7.")
    except DiagnosisMismatch as mismatch:
        first, *rest = str(mismatch).splitlines()
        return "\n".join([f"E       veralith.testing.DiagnosisMismatch: {first}",
                          *(f"E       {line}".rstrip() for line in rest)]) + "\n"
    raise AssertionError("the quickstart's P/E trace passed assert_diagnosis; docs/ci.md needs another example")


# Scenes run in this order; the examples of one scene share its database, in the order listed.
SCENES: list[list[Example]] = [
    [Example("compare-eval-baseline", lambda s: s.command("eval examples/traces.jsonl --run-name baseline")),
     Example("compare-eval-candidate", lambda s: s.command("eval examples/traces_v2.jsonl --run-name candidate")),
     Example("compare-runs", lambda s: s.command("runs")),
     Example("compare-text", lambda s: s.command("compare baseline candidate")),
     Example("compare-markdown", lambda s: s.command("compare baseline candidate --format markdown")
             .split("\n", 1)[1]),
     Example("patterns-after-compare", lambda s: s.command("patterns"))],
    [Example("ci-gate", lambda s: s.command("eval examples/traces_v2.jsonl --run-name pr-123 --fail-under 0.75 "
                                            "--max-cell incomplete_ungrounded=0")),
     Example("ci-diagnosis-mismatch", _diagnosis_mismatch)],
    [Example("quickstart-inspect", lambda s: (s.command("eval examples/traces.jsonl"), s.command("inspect 7"))[1]),
     Example("readme-evaluate", lambda s: s.python(_readme_block()))],
]
EXAMPLES = {example.name: example for scene in SCENES for example in scene}


def generate(names: set[str] | None = None) -> dict[str, str]:
    """The text of every example (of `names` only, when given), from fresh runs."""
    out = {}
    for scene in SCENES:
        if names is not None and not names & {e.name for e in scene}:
            continue
        with _session() as session:
            for example in scene:
                out[example.name] = example.make(session)
    return {name: text for name, text in out.items() if names is None or name in names}


def marked(text: str) -> dict[str, str]:
    """The marked examples of a page: name -> body of its block."""
    return {m.group("name"): m.group("body") for m in MARK.finditer(text)}


def comparable(text: str) -> str:
    """`text` with what changes from run to run written as placeholders; a `latency` line (inspect's
    last) and what it wraps onto are read as one line, their digits moving where it wraps."""
    for pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    head, found, tail = text.partition("\nlatency ")
    return head + found + " ".join(tail.split()) if found else text


def stale(page_text: str, fresh: dict[str, str]) -> list[str]:
    """The names of the page's examples that differ from `fresh` (an unknown name counts as stale)."""
    return [name for name, body in marked(page_text).items()
            if name not in fresh or comparable(body) != comparable(fresh[name])]


def rewritten(page_text: str, fresh: dict[str, str]) -> str:
    """`page_text` with each stale example replaced by its fresh text (the others left as they are)."""
    changed = set(stale(page_text, fresh)) & set(fresh)

    def replace(m: re.Match[str]) -> str:
        if m.group("name") not in changed:
            return m.group(0)
        return f"<!-- example: {m.group('name')} -->\n{m.group('fence')}{m.group('info')}\n{fresh[m.group('name')]}" \
               f"{m.group('fence')}"
    return MARK.sub(replace, page_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the examples that differ")
    args = parser.parse_args(argv)
    fresh = generate()
    problems = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        unknown = [name for name in marked(text) if name not in EXAMPLES]
        problems += [f"{page.name}: unknown example {name!r}" for name in unknown]
        found = [name for name in stale(text, fresh) if name not in unknown]
        if not found:
            continue
        if args.check:
            problems += [f"{page.name}: example {name!r} differs from what the commands print" for name in found]
        else:
            page.write_text(rewritten(text, fresh), encoding="utf-8")
            print(f"wrote {page.relative_to(REPO)}: {', '.join(found)}")
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.check and problems:
        print("run: python scripts/doc_examples.py", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    # The examples show the offline judge's output: nothing of the caller's own configuration applies.
    for name in [n for n in os.environ if n.startswith(("VERALITH_", "OPENAI_"))]:
        del os.environ[name]
    sys.path.insert(0, str(REPO))
    from veralith.config import settings

    settings.reload()
    raise SystemExit(main())
