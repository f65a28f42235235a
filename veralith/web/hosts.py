"""Which host names only this machine can reach: the one rule behind `veralith serve`'s refusal of a
non-loopback `--host` without a token and the web view's Host check (DNS-rebinding defence); and
which addresses another machine can open when the server listens on all of them.

Imports nothing of the optional web extra, so the command line can apply it before loading the app.
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["is_loopback", "is_wildcard", "reachable_addresses"]


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


def is_wildcard(host: str) -> bool:
    """True for the addresses that mean "every address of this machine" (0.0.0.0, ::): a server can
    listen on them, but no browser can open them."""
    try:
        return ipaddress.ip_address(host.strip().removeprefix("[").removesuffix("]")).is_unspecified
    except ValueError:
        return False


def reachable_addresses(host: str) -> list[str]:
    """The host names or addresses another machine can use to reach a server listening on `host`:
    `host` itself, unless it is a wildcard; then this machine's own addresses that are not loopback,
    the one its default route leaves by first (found without sending anything: a UDP socket's
    connect only picks a route), then its host name if that resolves to such an address. IPv6
    addresses come bracketed for a URL. Empty when none is known (no network)."""
    if not is_wildcard(host):
        return [f"[{host}]" if ":" in host and not host.startswith("[") else host]
    families = [socket.AF_INET] + ([socket.AF_INET6] if ":" in host else [])
    found: list[str] = []
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        if family in families:
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as sock:
                    sock.connect((probe, 9))
                    found.append(sock.getsockname()[0])
            except OSError:
                pass
    name = socket.gethostname()
    try:
        named = {str(info[4][0]) for info in socket.getaddrinfo(name, None) if info[0] in families}
    except OSError:
        named = set()
    found += sorted(named)
    out: list[str] = []
    for address in found:
        shown = f"[{address}]" if ":" in address else address
        if not is_loopback(address) and not ipaddress.ip_address(address).is_link_local and shown not in out:
            out.append(shown)
    if named and not any(is_loopback(a) for a in named) and name not in out:
        out.append(name)
    return out
