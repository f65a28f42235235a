"""Leases: who is working on a trace, and when that claim has gone stale.

A lease is (host, pid, unix time). It is stale when its process is gone from this host (checked
directly, so a crash is recovered at once) or when it is older than the timeout (the only way to
tell for a lease taken on another host, or when a pid has been reused).
"""

from __future__ import annotations

import os
import socket
import time

__all__ = ["LEASE_TIMEOUT_S", "claimable", "mine", "process_alive"]

# Longer than any one evaluation can take with default settings (timeouts x retries x phases),
# so a slow but live evaluation is never taken over; short enough that work is not lost forever.
LEASE_TIMEOUT_S = 15 * 60.0

_HOST = socket.gethostname()


def mine() -> tuple[str, int, float]:
    return _HOST, os.getpid(), time.time()


def process_alive(pid: int) -> bool:
    """True if `pid` runs on this host. A zombie (exited, not yet reaped) counts as gone."""
    if pid <= 0:
        return False
    if os.name == "nt":
        # os.kill(pid, 0) on Windows sends CTRL_C_EVENT instead of probing; rely on the timeout.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:  # no procfs (macOS, Windows): kill(0) succeeding is the best evidence
        return True


def stale(host: str | None, pid: int | None, at: float | None, *, timeout_s: float | None = None) -> bool:
    """Whether a lease no longer protects its trace."""
    if pid is None or host is None or at is None:
        return True
    timeout = LEASE_TIMEOUT_S if timeout_s is None else timeout_s
    if time.time() - at > timeout:
        return True
    return host == _HOST and not process_alive(pid)


def claimable(status: str, host: str | None, pid: int | None, at: float | None, *,
              timeout_s: float | None = None, own_is_fresh: bool = False) -> bool:
    """May this process take the trace now?

    A pending trace reserved by this very process is in our own queue: the worker claims it
    (`own_is_fresh=False`), but a resume sweep leaves it alone (`own_is_fresh=True`), since it is
    about to be evaluated anyway.
    """
    ours = host == _HOST and pid == os.getpid()
    if status == "pending":
        if ours:
            return not own_is_fresh
        return stale(host, pid, at, timeout_s=timeout_s)
    if status == "running":
        return not ours and stale(host, pid, at, timeout_s=timeout_s)
    return False
