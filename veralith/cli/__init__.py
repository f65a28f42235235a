"""The `veralith` command line, a package private to it: the typer app (`app`), reading and
running batches (`batch`, `records`) and everything the commands show (`render`, pure functions of
the models). The library never imports it.

Exit codes: 0 clean; 1 missing or empty input, unknown trace, bad invocation; 2 finished with
per-record errors (bad lines, failed records, judge errors), an option value no command can use
(an unknown --status, --cell, --kb or --since, as for click's own checks), an invalid VERALITH_*
setting, or a database that stopped accepting writes (full disk, read-only); 130 interrupted by Ctrl-C.
"""

from veralith.cli.app import app, main

__all__ = ["app", "main"]
