"""A long list of changes, grouped by the kind of failure each one's reason names.

834 regressions listed one by one say less than "612: a claim the context contradicts; 200: a
sub-question not answered (the context does answer it); …". The kind is read from the reason line
(veralith.compare.reasons.reason_kind), so a run's stored reasons group as well as fresh ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from veralith.compare.core import Change
from veralith.compare.reasons import reason_kind

__all__ = ["ChangeGroup", "group_changes"]


@dataclass(frozen=True)
class ChangeGroup:
    kind: str                     # what failed, without the trace's own words
    changes: list[Change]         # in the order of the list they came from


def group_changes(changes: Sequence[Change]) -> list[ChangeGroup]:
    """The changes grouped by kind, the largest group first (ties in the order the kinds first appear)."""
    groups: dict[str, list[Change]] = {}
    for change in changes:
        groups.setdefault(reason_kind(change.reason), []).append(change)
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))   # stable: first appearance breaks ties
    return [ChangeGroup(kind, members) for kind, members in ordered]
