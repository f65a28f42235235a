"""Reading a child's pseudo-terminal in tests."""

from __future__ import annotations

import select

__all__ = ["readable"]


def readable(fd: int, timeout: float) -> bool:
    """Whether `fd` has something to read within `timeout` seconds. poll, not select: select() refuses a
    descriptor numbered 1,024 or more, which a test process holding many files hands a new pty."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))
