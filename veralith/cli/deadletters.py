"""`veralith dead-letters`: the records a store refused, set aside with their reason; retried or dropped.

The shipper sets aside a spooled trace the store refuses (or that holds text no store can hold, from
a spool written before that rule), and `migrate` a trace it cannot copy; every other record around
them is stored (veralith.work.deadletter). This command lists them, stores them again once the cause
is fixed (`--retry`; `--clean` first replaces text no store can hold with U+FFFD), or gives them up
(`--drop ID`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal

__all__ = ["dead_letters_command"]


def dead_letters_command(
    retry: Annotated[bool, typer.Option("--retry", help="Store the records set aside again (all, or the IDs "
                                        "given), each under the trace id it had when that id is free.")] = False,
    clean: Annotated[bool, typer.Option("--clean", help="With --retry: first replace text no store can hold "
                                        "(NUL characters, lone surrogates) with U+FFFD.")] = False,
    drop: Annotated[list[int] | None, typer.Option("--drop", metavar="ID", help="Give up these records "
                                                   "(repeatable): delete them from the dead-letter place.",
                                                   show_default=False)] = None,
    ids: Annotated[list[int] | None, typer.Argument(metavar="ID", help="Only these records (with --retry).",
                                                    show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="List them as JSON.")] = False,
) -> None:
    """List the records the store refused and set aside with their reason; --retry stores them again
    after a fix, --drop ID gives one up.

    The shipper sets aside a spooled trace the store refuses (a constraint such as an external id
    already taken, or text no store can hold from a spool an older version wrote), and `migrate --to` a
    trace holding such text; everything around them is stored. Each keeps the trace id it was logged
    under, which --retry reuses when it is free. Exit 2 when the store still refuses a record retried.
    """
    from veralith.cli.runs import existing_db

    if clean and not retry:
        raise fail("--clean only applies with --retry", ExitCode.ERROR)
    if ids and not retry:
        raise fail("record IDs select what --retry stores; without --retry every record is listed", ExitCode.ERROR)
    out = Console(highlight=False)
    found = existing_db()
    if found is None:
        if drop:
            raise fail(f"no record {drop[0]} in the dead-letter place: no database yet")
        out.print("nothing set aside (no database yet)")
        return
    if drop or retry:
        from veralith.store import open_store

        store = open_store()
        if drop:
            _drop(store, drop, out)
        if retry:
            _retry(store, ids or None, clean=clean, out=out)
        return
    _list(found, out, as_json=as_json)


def _list(store: Any, out: Console, *, as_json: bool) -> None:
    from veralith.store import deadletters

    rows = store.read(deadletters.listing)
    if as_json:
        out.print_json(json.dumps(rows), highlight=False)   # (the reasons are one escaped line each)
        return
    if not rows:
        out.print("nothing set aside: the store took every record")
        return
    table = Table("id", "source", "trace", "knowledge base", "set aside (UTC)", "retries", "reason",
                  title=f"{len(rows)} record(s) set aside", title_justify="left")
    for row in rows:
        table.add_row(str(row["id"]), row["source"], "—" if row["trace_id"] is None else str(row["trace_id"]),
                      literal(row["knowledge_base"] or "—"), row["created_at"][:19].replace("T", " "),
                      str(row["attempts"]), literal(row["reason"]))
    out.print(table)
    out.print("`veralith dead-letters --retry` stores them again once the cause is fixed (`--clean` replaces "
              "text no store can hold); `--drop ID` gives one up")


def _drop(store: Any, ids: list[int], out: Console) -> None:
    from veralith.store import deadletters

    gone = store.write(deadletters.drop, ids)
    missing = [i for i in ids if i not in set(gone)]
    if gone:
        out.print(f"dropped {len(gone)} record(s): {', '.join(map(str, gone))}")
    if missing:
        raise fail(f"no record {missing[0]} in the dead-letter place (`veralith dead-letters` lists them)")


def _retry(store: Any, ids: list[int] | None, *, clean: bool, out: Console) -> None:
    from veralith.store import deadletters
    from veralith.work import shipper

    if ids:
        known = {row["id"] for row in store.read(deadletters.listing)}
        missing = [i for i in ids if i not in known]
        if missing:
            raise fail(f"no record {missing[0]} in the dead-letter place (`veralith dead-letters` lists them)")
    stored, still = shipper.retry(store, ids, clean=clean)
    out.print(f"stored {len(stored)} record(s) set aside" + (f", {len(still)} refused again" if still else ""))
    if still:
        reasons = {row["id"]: row["reason"] for row in store.read(deadletters.listing)}
        raise fail(f"the store still refuses {len(still)} record(s), e.g. record {still[0]}: "
                   f"{reasons.get(still[0], '?')}" + ("" if clean else " (--clean replaces text no store can hold)"),
                   ExitCode.ERROR)
