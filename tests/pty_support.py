"""A child process on a pseudo-terminal of its own, read as a person at that terminal would see it."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import termios
import time

__all__ = ["Terminal", "readable"]


def readable(fd: int, timeout: float) -> bool:
    """Whether `fd` has something to read within `timeout` seconds. poll, not select: select() refuses a
    descriptor numbered 1,024 or more, which a test process holding many files hands a new pty."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


class Terminal:
    """`argv` with a pty as its controlling terminal (a session of its own), as in a real terminal: a key
    is read from /dev/tty in raw mode. `until` reads what it writes; `press` types."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.leader, follower = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True,
                                     start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(follower)
        self.seen = b""

    def until(self, text: bytes, after: int = 0, timeout: float = 90) -> int:
        """Read until `text` appears after offset `after`; the offset just past it."""
        end = time.monotonic() + timeout
        while text not in self.seen[after:]:
            assert time.monotonic() < end, self.seen.decode(errors="replace")[-2000:]
            if readable(self.leader, 0.5):
                try:
                    self.seen += os.read(self.leader, 65536)
                except OSError:
                    break
        return self.seen.index(text, after) + len(text)

    def press(self, keys: bytes) -> None:
        os.write(self.leader, keys)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        os.close(self.leader)
