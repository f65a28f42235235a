"""The filter options shared by the read commands (`--status`, `--cell`, `--kb`, `--since`), checked in
one place so every command accepts and refuses the same values with the same message.

Each check returns the value to filter on or raises BadOption, whose text is the one line a person
sees: what is wrong and which values would work.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence

__all__ = ["BadOption", "cell", "knowledge_base", "since", "status"]

# "7d", "24h", "90m", "2w", "1d12h": a time before now. Seconds are accepted for scripts and tests.
_DURATION = re.compile(r"(?:\d+[smhdw])+")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class BadOption(ValueError):
    """An option value the command cannot use; str() is the message for the person who typed it."""


def status(value: str | None) -> str | None:
    from veralith.store.queries import STATUSES

    if value is not None and value not in STATUSES:
        raise BadOption(f"--status {value!r} is not a status; use one of {', '.join(STATUSES)}")
    return value


def cell(value: str | None) -> str | None:
    from veralith.models import FailureCell

    if value is not None and value not in FailureCell.__members__:
        raise BadOption(f"--cell {value!r} is not a failure cell; use one of {', '.join(FailureCell.__members__)}")
    return value


def knowledge_base(value: str | None, known: Callable[[], Sequence[str]]) -> str | None:
    """`value` if some trace is stored under it; otherwise BadOption naming the ones that have traces.
    `known` lists those (sorted); it is called only when there is a value to check."""
    if value is None:
        return value
    names = known()
    if value not in names:
        listed = ", ".join(names) if names else "none (the database holds no traces)"
        raise BadOption(f"--kb {value!r}: the knowledge base {value!r} has no traces; "
                        f"knowledge bases with traces: {listed}")
    return value


def since(value: str | None, *, now: dt.datetime | None = None, option: str = "--since") -> str | None:
    """The UTC instant `value` names, as ISO text comparable with the stored `created_at`.

    `value` is an ISO date or date-time (`2026-01-31`, `2026-01-31T12:00`, `...+02:00`, `...Z`;
    a time without a zone is UTC, the zone traces are stored in) or a duration back from `now`
    (`30m`, `24h`, `7d`, `2w`, `1d12h`). `option` names the option in the error (`--until` reads
    the same way)."""
    if value is None:
        return None
    text = value.strip()
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        if _DURATION.fullmatch(text):
            seconds = sum(int(n) * _UNIT_S[unit] for n, unit in re.findall(r"(\d+)([smhdw])", text))
            when = now - dt.timedelta(seconds=seconds)
        else:
            # Python 3.10's fromisoformat does not read a trailing Z.
            when = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" and text else text)
            when = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
        return when.astimezone(dt.timezone.utc).isoformat(timespec="microseconds")
    except (ValueError, OverflowError):
        raise BadOption(f"{option} {value!r} is neither an ISO date/time nor a duration; use e.g. 2026-01-31, "
                        "2026-01-31T12:00, 7d, 24h or 30m") from None
