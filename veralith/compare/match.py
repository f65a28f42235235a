"""Which trace of run A is the same question as which trace of run B.

Traces are matched by external id within a knowledge base when both have one, then the rest by
knowledge base and query text (duplicates pair up in id order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veralith.compare.core import TraceRow

__all__ = ["match", "pair_rows"]


def pair_rows(rows_a: Sequence[TraceRow], rows_b: Sequence[TraceRow]) -> list[tuple[TraceRow, TraceRow]]:
    """The traces of run A and run B that are the same question, matched as `compare_rows` matches
    them (external id, then knowledge base + query), as (A's row, B's row)."""
    return match(rows_a, rows_b)[0]


def match(rows_a: Sequence[TraceRow], rows_b: Sequence[TraceRow]
           ) -> tuple[list[tuple[TraceRow, TraceRow]], int, list[TraceRow], list[TraceRow]]:
    # Each key maps to B's rows in reverse order, so pop() hands them out first to last.
    by_ext: dict[tuple[str, str], list[TraceRow]] = {}
    for row in reversed(rows_b):
        if row.external_id is not None:
            by_ext.setdefault((row.knowledge_base, row.external_id), []).append(row)
    pairs: list[tuple[TraceRow, TraceRow]] = []
    rest_a: list[TraceRow] = []
    for row in rows_a:
        queue = by_ext.get((row.knowledge_base, row.external_id)) if row.external_id is not None else None
        if queue:
            pairs.append((row, queue.pop()))
        else:
            rest_a.append(row)
    by_external = len(pairs)
    only_a: list[TraceRow] = []
    if rest_a:
        used = {b.id for _, b in pairs}
        by_query: dict[tuple[str, str], list[TraceRow]] = {}
        for row in reversed(rows_b):
            if row.id not in used:
                by_query.setdefault((row.knowledge_base, row.query), []).append(row)
        for row in rest_a:
            queue = by_query.get((row.knowledge_base, row.query))
            if queue:
                pairs.append((row, queue.pop()))
            else:
                only_a.append(row)
    used = {b.id for _, b in pairs}
    only_b = [row for row in rows_b if row.id not in used]
    return pairs, by_external, only_a, only_b
