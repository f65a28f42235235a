"""The `veralith` command line, a package private to it: the typer app (`app`), reading and
running batches (`batch`, `records`) and everything the commands show (`render`, pure functions of
the models). The library never imports it.

Exit codes: one table, veralith.cli.exits.ExitCode (0 ok, 1 not found, 2 error, 3 check failed,
130 interrupted), rendered in docs/cli.md.
"""

from veralith.cli.app import app, main

__all__ = ["app", "main"]
