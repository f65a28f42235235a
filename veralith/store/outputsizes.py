"""The `output_sizes` table: what real runs' judge calls wrote, per task, model and prompt version.

Written in the transaction that saves a result (veralith.store.repository.save_result), read by
`veralith eval --dry-run` through the store's `output_sizes()` (veralith.llm.estimate.LearntOutput).
Rows are sums, one per (task, model, prompt version), so reading them costs a handful of rows
whatever the history's size. The same SQL runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

from veralith.store.rows import now_iso
from veralith.store.sql import Db
from veralith.usage import OutputSize

__all__ = ["add_output_sizes", "copy_output_sizes", "read_output_sizes"]


def add_output_sizes(db: Db, sizes: Sequence[OutputSize], now: str) -> None:
    """Add one result's figures to the sums (inside the caller's write transaction)."""
    if not sizes:
        return
    # In key order, so two writers never take row locks in opposite orders.
    ordered = sorted(sizes, key=lambda s: (s.task, s.model, s.prompt_version))
    db.executemany(
        "INSERT INTO output_sizes (task, model, prompt_version, traces, planned_calls, calls, allowance_tokens,"
        " output_tokens, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task, model, prompt_version)"
        " DO UPDATE SET traces = output_sizes.traces + excluded.traces,"
        " planned_calls = output_sizes.planned_calls + excluded.planned_calls,"
        " calls = output_sizes.calls + excluded.calls,"
        " allowance_tokens = output_sizes.allowance_tokens + excluded.allowance_tokens,"
        " output_tokens = output_sizes.output_tokens + excluded.output_tokens, updated_at = excluded.updated_at",
        [(s.task, s.model, s.prompt_version, s.traces, s.planned_calls, s.calls, s.allowance_tokens, s.output_tokens,
          now)
         for s in ordered])


def read_output_sizes(db: Db) -> list[OutputSize]:
    """Every (task, model, prompt version)'s sums."""
    rows = db.execute("SELECT task, model, prompt_version, traces, planned_calls, calls, allowance_tokens,"
                      " output_tokens FROM output_sizes ORDER BY task, model, prompt_version").fetchall()
    return [OutputSize(task=str(r[0]), model=str(r[1]), prompt_version=str(r[2]), traces=int(r[3]),
                       planned_calls=int(r[4]), calls=int(r[5]), allowance_tokens=int(r[6]), output_tokens=int(r[7]))
            for r in rows]


def copy_output_sizes(src: Db, dst: Db) -> int:
    """Copy the source's sums into the target (`veralith migrate --to`), keeping a (task, model, prompt
    version) the target already has as it is: a copy run twice then adds nothing twice. Returns the
    rows copied."""
    sizes = read_output_sizes(src)
    if not sizes:
        return 0
    with dst.write():
        before = len(read_output_sizes(dst))
        dst.executemany(
            "INSERT INTO output_sizes (task, model, prompt_version, traces, planned_calls, calls, allowance_tokens,"
            " output_tokens, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (task, model, prompt_version) DO NOTHING",
            [(s.task, s.model, s.prompt_version, s.traces, s.planned_calls, s.calls, s.allowance_tokens,
              s.output_tokens, now_iso()) for s in sizes])
        return len(read_output_sizes(dst)) - before
