"""Leases: who is working on a trace, and when that claim has gone stale.

A lease is (host, pid, token, time). The time is the *database's* clock (`epoch(db)`, unix seconds
as the database server reads them), both when a lease is taken or renewed and when its age is
judged: a worker whose own clock runs minutes ahead or behind neither takes others' fresh leases nor
loses its own. The token is random per process (prefixed by the pid's start time where the OS tells
it, for people reading the table), so:

- a lease naming this host and *our* pid but another token belongs to an earlier process that had
  our pid (a container restarted as pid 1 on the same host name): it is gone, the lease is stale;
- a lease naming another pid of this host is stale when that pid is gone;
- any lease is stale when it has not been renewed for the timeout (another host; a reused pid —
  comparing start times would also catch that sooner, but an exact start time is not available on
  every OS and the renewed lease makes the timeout short anyway).

A running evaluation renews its lease (`Renewer`), so the timeout can be short without a slow but
live evaluation ever being taken over.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Callable

__all__ = ["LEASE_TIMEOUT_S", "RENEW_EVERY_S", "Renewer", "claimable", "is_mine", "mine", "owner",
           "process_alive", "process_start", "stale", "token"]

# A lease not renewed for this long is taken over. Renewal runs every RENEW_EVERY_S, so only a
# process that is gone (or hung so badly it cannot write) loses its traces.
LEASE_TIMEOUT_S = 5 * 60.0
RENEW_EVERY_S = 30.0

_HOST = socket.gethostname()


def process_start(pid: int) -> str:
    """The start time of `pid` in clock ticks since boot (Linux), or '' where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return ""


_TOKEN: tuple[int, str] | None = None
# The first token of a process is often asked for by two threads at once (log()'s caller, which names
# its spool segment with it, and the shipper); without the lock each could draw its own, and the spool
# would take the caller's next append for a forked child's and forget the segment it had written.
_TOKEN_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a fork while another thread held it must not leave the child stuck
    os.register_at_fork(after_in_child=lambda: globals().__setitem__("_TOKEN_LOCK", threading.Lock()))


def token() -> str:
    """This process's lease token: '<pid start time>-<random hex>'; new after a fork."""
    global _TOKEN
    pid = os.getpid()
    made = _TOKEN
    if made is None or made[0] != pid:
        with _TOKEN_LOCK:
            made = _TOKEN
            if made is None or made[0] != pid:
                made = _TOKEN = (pid, f"{process_start(pid)}-{secrets.token_hex(8)}")
    return made[1]


def mine() -> tuple[str, int, str]:
    """This process as a lease holder: (host, pid, token). The lease's time is the database's
    (the SQL that takes or renews a lease writes the database's own clock)."""
    return _HOST, os.getpid(), token()


def owner() -> str:
    """This process as one string (for id blocks and messages)."""
    return f"{_HOST}/{os.getpid()}/{token()}"


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


def is_mine(host: str | None, pid: int | None, lease_token: str | None) -> bool:
    return host == _HOST and pid == os.getpid() and lease_token == token()


def stale(host: str | None, pid: int | None, lease_token: str | None, at: float | None, now: float, *,
          timeout_s: float | None = None) -> bool:
    """Whether a lease no longer protects its trace; `now` is the database's clock (as `at` is)."""
    if pid is None or host is None or at is None:
        return True
    if is_mine(host, pid, lease_token):
        return False
    timeout = LEASE_TIMEOUT_S if timeout_s is None else timeout_s
    if now - at > timeout:
        return True
    if host != _HOST:
        return False
    if pid == os.getpid():
        return True  # our pid, another token: an earlier process with this pid, now gone
    return not process_alive(pid)


def claimable(status: str, host: str | None, pid: int | None, lease_token: str | None, at: float | None,
              now: float, *, timeout_s: float | None = None, own_is_fresh: bool = False) -> bool:
    """May this process take the trace now?

    A pending trace reserved by this very process is in our own queue: the worker claims it
    (`own_is_fresh=False`), but a resume sweep leaves it alone (`own_is_fresh=True`), since it is
    about to be evaluated anyway.
    """
    ours = is_mine(host, pid, lease_token)
    if status == "pending":
        if ours:
            return not own_is_fresh
        return stale(host, pid, lease_token, at, now, timeout_s=timeout_s)
    if status == "running":
        return not ours and stale(host, pid, lease_token, at, now, timeout_s=timeout_s)
    return False


class Renewer:
    """Renews this process's running leases every RENEW_EVERY_S while evaluations run.

    `hold(key)` / `drop(key)` bracket one evaluation; `renew(keys)` is the store's function that
    bumps the lease time of those traces (and only while they are still ours). One daemon thread
    per process, started on first use and idle (no writes) while nothing is held.
    """

    def __init__(self, renew: Callable[[set[tuple[str, int]]], None], every_s: float = RENEW_EVERY_S) -> None:
        self._renew, self.every_s = renew, every_s
        self._held: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._held[key] = self._held.get(key, 0) + 1
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                thread = threading.Thread(target=self._run, name="veralith-lease-renewer", daemon=True)
                try:
                    thread.start()
                except RuntimeError:   # interpreter shutdown (Python 3.12+): the at-exit drain is bounded
                    return             # by its own deadline, far shorter than the lease timeout
                self._thread = thread

    def drop(self, key: tuple[str, int]) -> None:
        with self._lock:
            left = self._held.get(key, 0) - 1
            if left > 0:
                self._held[key] = left
            else:
                self._held.pop(key, None)

    def held(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self._held)

    def renew_now(self) -> None:
        """Renew at once (tests; also what the thread does every `every_s`)."""
        keys = self.held()
        if keys:
            self._renew(keys)

    def _run(self) -> None:
        while not self._wake.wait(self.every_s):
            try:
                self.renew_now()
            except Exception:  # a locked or vanished file: try again next round; never raise
                continue
