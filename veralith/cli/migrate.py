"""`veralith migrate --to URL`: copy a history into another store (veralith.store.copy)."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from veralith.cli.render import literal

__all__ = ["migrate_command"]


def migrate_command(
    to: Annotated[str, typer.Option("--to", metavar="URL", help="The store to copy into: postgresql://user@host/db "
                                    "(or sqlite:///path/to/file.db).", show_default=False)],
    source: Annotated[str | None, typer.Option("--from", metavar="URL", help="The store to copy from (default: the "
                                               "configured one, VERALITH_DB_URL or VERALITH_DB_PATH).",
                                               show_default=False)] = None,
    on_conflict: Annotated[str, typer.Option("--on-conflict", metavar="skip|fail",
                                             help="A trace whose external id the target holds for another trace "
                                             "in the same knowledge base: skip it (each one reported) or fail "
                                             "before copying anything (exit 2).")] = "skip",
) -> None:
    """Copy every trace, result, run, history entry and cached judge reply into another store, e.g.
    a laptop's SQLite history into the team's PostgreSQL, even while apps log into it (a copied
    trace keeps its id only where no host can have been handed it). Running it again copies nothing
    twice, and finishes a copy that was stopped; it ends by comparing counts (exit 1 when they
    differ; traces skipped as conflicts are left out). One copy into a store at a time: another
    exits 2.
    """
    from veralith.config import redact_configured
    from veralith.errors import StoreError
    from veralith.store import open_store, store_url
    from veralith.store.sqlstore import SqlStore
    from veralith.work.migrate import ON_CONFLICT, copy

    err, out = Console(stderr=True, highlight=False), Console(highlight=False)
    if on_conflict not in ON_CONFLICT:
        err.print(literal(f"error: --on-conflict must be one of {', '.join(ON_CONFLICT)}, not {on_conflict!r}",
                          "red"), soft_wrap=True)
        raise typer.Exit(2)
    try:
        src_url, dst_url = store_url(source), store_url(to)
        if src_url == dst_url:
            err.print(literal("error: --to names the store being copied from; nothing to do", "red"), soft_wrap=True)
            raise typer.Exit(2)
        if src_url.startswith("sqlite:///") and not os.path.exists(src_url[len("sqlite:///"):]):
            err.print(literal(f"error: no database at {src_url[len('sqlite:///'):]} to copy from", "red"),
                      soft_wrap=True)
            raise typer.Exit(1)
        src, dst = open_store(src_url), open_store(dst_url)
        if not (isinstance(src, SqlStore) and isinstance(dst, SqlStore)):
            raise StoreError("both stores must be SQL stores")
        out.print(literal(f"copying {src.url} into {dst.url}"), soft_wrap=True)
        report = copy(src, dst, report=lambda line: err.print(literal(line, "dim"), soft_wrap=True),
                      on_conflict=on_conflict)
    except StoreError as exc:
        err.print(literal(f"error: {redact_configured(exc)}", "red"), soft_wrap=True)
        raise typer.Exit(2) from None
    except typer.Exit:
        raise
    except Exception as exc:   # a database error the store did not name: one line, what was copied is whole
        first = (str(exc).strip().splitlines() or [""])[0]
        err.print(literal(f"error: the copy stopped: {type(exc).__name__}: {redact_configured(first)}; what was "
                          "copied is kept whole, run the same command again to finish", "red"), soft_wrap=True)
        raise typer.Exit(2) from None
    for conflict in report.conflicts:
        err.print(literal(f"skipped: {conflict.line()}", "yellow"), soft_wrap=True)
    out.print(literal(f"copied {report.traces:,} traces ({report.skipped:,} already there"
                      + (f", {report.renumbered:,} under a new id: theirs was taken or may have been handed out"
                         if report.renumbered else "")
                      + (f", {len(report.conflicts):,} skipped: their external id is another trace's"
                         if report.conflicts else "")
                      + f"), {report.runs:,} runs, {report.cache_entries:,} cached replies"))
    table = Table("", "in the source", "in the target", title="Counts", title_justify="left")
    for what, (have, found) in report.counts.items():
        aside = report.aside.get(what, 0)
        table.add_row(what, f"{have:,}", literal(f"{found:,}" + (f" + {aside:,} set aside" if aside else ""),
                                                 "green" if have == found + aside else "red"))
    out.print(table)
    if report.aside.get("traces"):
        err.print(literal(f"warning: {report.aside['traces']:,} trace(s) hold text no store can hold (a NUL "
                          "character or a lone surrogate) and were set aside in the target's dead-letter place "
                          "with the reason; `veralith dead-letters` lists them, `--retry --clean` stores them",
                          "yellow"), soft_wrap=True)
    if report.mismatches:
        err.print(literal("error: the target does not hold everything the source does (see the counts); run the "
                          "same command again to finish the copy", "red"), soft_wrap=True)
        raise typer.Exit(1)
