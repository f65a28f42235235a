"""The exit codes of every `veralith` command, defined once here (MEANING; docs/cli.md renders it as
a table and tests/test_exit_codes.py checks every command against it), and the one way an error
reaches the person: a single `error: ...` line on stderr, secrets masked.

When several codes apply, the more serious wins: 2 over 3 (a gate computed over a run that lost
records is no verdict), and 130 over everything.
"""

from __future__ import annotations

import sqlite3
from enum import IntEnum
from typing import NoReturn

import typer
from rich.console import Console

from veralith.cli.render import literal

__all__ = ["MEANING", "ExitCode", "code_for", "database_message", "exit_for_error", "fail", "print_error"]


class ExitCode(IntEnum):
    OK = 0
    NOT_FOUND = 1
    ERROR = 2
    CHECK_FAILED = 3
    INTERRUPTED = 130


MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "the command did what was asked (and a gate or comparison asked for held)",
    ExitCode.NOT_FOUND: "what the command was pointed at is not there or not usable as a whole: a missing, "
    "empty or unreadable input file, an unknown or ambiguous trace id, an unknown run, no database yet",
    ExitCode.ERROR: "a usage or configuration error (an unknown option or value, an invalid VERALITH_* setting, "
    "a missing extra), or errors while working: bad input lines, failed records, judge errors, a database that "
    "cannot be read or written (locked past its bound, damaged, vanished, full, read-only)",
    ExitCode.CHECK_FAILED: "a check asked for on the command line failed: the quality gate of "
    "`eval --fail-under/--max-cell`, or more regressions than `compare --max-regressions`",
    ExitCode.INTERRUPTED: "stopped by Ctrl-C: what finished is kept, the rest is left for `veralith resume`",
}


def code_for(exc: BaseException) -> ExitCode:
    """The exit code for an error that ends a command: a lookup that finds nothing is NOT_FOUND,
    every other Veralith or database error is ERROR."""
    from veralith.store.errors import AmbiguousTraceId, TraceNotEvaluated, TraceNotFound
    from veralith.store.runs import RunNotFound

    if isinstance(exc, (TraceNotFound, TraceNotEvaluated, AmbiguousTraceId, RunNotFound)):
        return ExitCode.NOT_FOUND
    return ExitCode.ERROR


def print_error(message: object) -> None:
    """One line on stderr, `error: ...` in red, with the API key and URL passwords masked; user text
    in it is shown literally (never markup, never terminal control)."""
    from veralith.config import redact_configured

    Console(stderr=True, highlight=False).print(literal(f"error: {redact_configured(message)}", "red"),
                                                soft_wrap=True)


def fail(message: object, code: ExitCode = ExitCode.NOT_FOUND) -> typer.Exit:
    """Print `message` as the one error line and return the typer.Exit to raise with `code`."""
    print_error(message)
    return typer.Exit(int(code))


def database_message(exc: sqlite3.Error) -> str:
    """A raw database error as the one line a person reads, naming the database file."""
    from veralith.config import ConfigError, settings

    try:
        where = f" at {settings.db_path}"
    except ConfigError:
        where = ""
    return f"the database{where} cannot be used: {exc}"


def exit_for_error(exc: BaseException) -> NoReturn:
    """End the command for an error raised out of it (VeralithGroup): one line, then the code."""
    if isinstance(exc, sqlite3.Error):
        raise fail(database_message(exc), ExitCode.ERROR) from None
    raise fail(exc, code_for(exc)) from None
