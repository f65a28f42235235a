"""Which host names only this machine can reach: the one rule behind `veralith serve`'s refusal of a
non-loopback `--host` without a token and the web view's Host check (DNS-rebinding defence).

Imports nothing of the optional web extra, so the command line can apply it before loading the app.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """True for `localhost` (any case) and loopback address literals: all of 127.0.0.0/8 and ::1,
    brackets allowed (`[::1]`). A host name is never loopback (it may resolve to anything), nor is a
    number another parser would read as an address (`2130706433`, `0x7f000001`)."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False
