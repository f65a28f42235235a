"""How every `veralith` command presents itself: plain help text wrapped at word boundaries, an
example under each command's help, and the one place where an error raised out of a command becomes
one line and an exit code (veralith.cli.exits).

Help is click's plain layout rather than typer's rich panels: the same text on a terminal, in a pipe
and in a CI log, with placeholders a person can read (`FILE`, `N`, `ID`), never `<bool>` or
`[1<=x<=9223372036854775807]`. Lines break only between words, so an option name such as
`--dry-run` or a long path is never split across lines.
"""

from __future__ import annotations

import contextlib
import sqlite3
import textwrap
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import typer
from typer._click import Context, HelpFormatter  # typer runs on a click of its own, vendored here
from typer.core import TyperCommand, TyperGroup

from veralith.cli.exits import exit_for_error

__all__ = ["EXAMPLES", "VeralithCommand", "VeralithGroup", "default_text", "epilog", "one_line_warnings",
           "placeholder"]

# One or two lines a person can copy, per command; shown under its help and in docs/cli.md.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "eval": ("veralith eval traces.jsonl --run-name main", "veralith eval traces.jsonl --batch",
             "veralith eval traces.jsonl --fail-under 0.9 --max-cell extra_ungrounded=0",
             "veralith eval labelled.jsonl --expect --min-agreement 0.9"),
    "resume": ("veralith resume", "veralith resume --failed"),
    "inspect": ("veralith inspect 12", "veralith inspect my-record-id --json", "veralith inspect 12 --explain"),
    "list": ("veralith list --cell incomplete_ungrounded --since 24h",),
    "stats": ("veralith stats --kb default",),
    "export": ("veralith export --format csv -o results.csv", "veralith export --labelled -o labelled.jsonl"),
    "serve": ("veralith serve --open", "veralith serve --review"),
    "runs": ("veralith runs --limit 10",),
    "compare": ("veralith compare main feature-branch --format markdown",),
    "patterns": ("veralith patterns --kb default --since 7d", "veralith patterns --run main --markdown > patterns.md"),
    "worker": ("VERALITH_DB_URL=postgresql://veralith@db/veralith veralith worker --concurrency 8",
               "veralith worker --once"),
    "migrate": ("veralith migrate --to postgresql://veralith@db.internal/veralith",),
    "import": ("veralith import spans.json --run-name imported",),
    "batch": ("veralith batch status", "veralith batch collect job-3f2a9c1e7b04"),
    "dead-letters": ("veralith dead-letters", "veralith dead-letters --retry --clean",
                     "veralith dead-letters --drop 3"),
    "label": ("veralith label 42 --claim k2 unsupported --by alice", "veralith label 42 --cell incomplete_grounded "
              "--note 'q2 is not in the docs'"),
    "labels": ("veralith labels export -o labels.jsonl", "veralith labels import scores.json --format langfuse"),
    "review": ("veralith review --by alice", "veralith review --kb support --since 7d --limit 20"),
    "agreement": ("veralith agreement", "veralith agreement --kb support --markdown >> $GITHUB_STEP_SUMMARY"),
}


def epilog(name: str) -> str:
    """The "Examples:" block of a command's help; `\\b` keeps click from re-wrapping the lines."""
    lines = EXAMPLES.get(name, ())
    return "\b\nExample" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {line}" for line in lines)


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Paragraphs of `text` wrapped to `width` between words only; a paragraph opening with `\\b`
    keeps its lines as written (indented), as click's own formatter does."""
    out: list[str] = []
    for paragraph in textwrap.dedent(text).split("\n\n"):
        if out:
            out.append("")
        if paragraph.startswith("\b"):
            out += [indent + line for line in paragraph.split("\n")[1:]]
            continue
        out += textwrap.wrap(" ".join(paragraph.split()), width=max(width, 20), initial_indent=indent,
                             subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [""]
    return out


_NARROWEST = 24  # the narrowest column a meaning is wrapped into beside the option names


class _Formatter(HelpFormatter):
    """click's help layout with word-boundary wrapping only."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write("\n".join(_wrap(text, self.width, indent)) + "\n")

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((len(term) for term, _ in rows), default=0), col_max) + col_spacing
        pad = " " * (first_col + self.current_indent)
        for term, meaning in rows:
            self.write(" " * self.current_indent + term)
            if not meaning:
                self.write("\n")
                continue
            room = self.width - first_col - self.current_indent
            if room < _NARROWEST:  # too narrow beside the names: the meaning goes under them
                pad = " " * (self.current_indent + 4)
                room = self.width - len(pad)
                self.write("\n" + pad)
            elif len(term) <= first_col - col_spacing:
                self.write(" " * (first_col - len(term)))
            else:
                self.write("\n" + pad)
            lines = _wrap(meaning, room)
            self.write(lines[0] + "\n" + "".join(f"{pad}{line}\n" if line else "\n" for line in lines[1:]))


class _Context(typer.Context):
    formatter_class = _Formatter


_PLACEHOLDER = {"int": "N", "float": "X", "Path": "PATH", "str": "TEXT"}


def placeholder(param: Any) -> str:
    """What stands for a parameter's value in help and docs: its metavar, else its choices
    (`auto|openai|local`), else a word for its type (N, X, PATH, TEXT); `ID...` for a list."""
    descriptor = param.type_descriptor
    if param.metavar:
        word = param.metavar
    elif descriptor.is_choice:
        word = "|".join(str(getattr(c, "value", c)) for c in descriptor.choices or ())
    else:
        annotation = descriptor.annotation
        inner = getattr(annotation, "__args__", (annotation,))[0]
        word = _PLACEHOLDER.get(getattr(inner, "__name__", ""), "TEXT")
    if param.param_type_name == "argument" and param.nargs == -1:
        return f"[{word}]..." if not param.required else f"{word}..."
    return word


def default_text(param: Any) -> str:
    """`(default: X)` for an option whose default a person needs to know; "" for flags, None and lists."""
    default = getattr(param.default, "value", param.default)
    if param.param_type_name != "option" or getattr(param, "is_flag", False) or default in (None, [], ()):
        return ""
    return f" (default: {default})"


class VeralithCommand(TyperCommand):
    """A subcommand: plain, word-wrapped help whose placeholders are words (`placeholder`)."""

    context_class = _Context

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        arguments = [placeholder(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]
        return ["[OPTIONS]", *arguments]

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            if getattr(param, "hidden", False):
                continue
            meaning = (getattr(param, "help", None) or "") + default_text(param)
            if param.param_type_name == "argument":
                arguments.append((placeholder(param), meaning))
                continue
            names = ", ".join([*param.opts, *param.secondary_opts])
            flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
            options.append((names if flag else f"{names} {placeholder(param)}", meaning))
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class VeralithGroup(TyperGroup):
    """The `veralith` group: plain help, and every Veralith or database error raised out of a command
    becomes one `error: ...` line and the exit code of veralith.cli.exits (never a traceback)."""

    context_class = _Context

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        # Each command's whole first sentence, wrapped, rather than click's cut-off "...".
        rows = [(name, command.get_short_help_str(limit=10**6)) for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: Context) -> Any:
        from veralith.errors import VeralithError

        with one_line_warnings():
            try:
                return super().invoke(ctx)
            except (VeralithError, sqlite3.Error) as exc:
                exit_for_error(exc)


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Within the block, each of Veralith's own warnings (veralith.errors.VeralithWarning: an unknown
    price, a call an adapter could not log) is one line on stderr, `warning: ...`, with its control
    characters written out; Python's file, line number and source line are for its programmers, not
    for a person at a terminal. Other warnings are shown as Python shows them."""
    from veralith.errors import VeralithWarning
    from veralith.safe_text import visible

    python_shows = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, VeralithWarning):
            typer.echo(f"warning: {visible(' '.join(str(message).split()))}", err=True)
        else:
            python_shows(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():   # restores the previous showwarning (and filters) on exit
        warnings.showwarning = show
        yield
