"""Secrets out of text: API keys and the password (user info) of a URL.

One place for the rule, used wherever text may reach a person or a file: `repr(settings)`, the
CLI's error lines, the OpenAI client's repr and the judge errors it records. This module knows no
settings; `veralith.config.redact_configured` applies it with the configured key.

    redact_url("http://user:pw@host:8000/v1")      # 'http://***@host:8000/v1'
    redact("GET http://u:p@h/v1 key sk-abc", ["sk-abc"])   # 'GET http://***@h/v1 key ***'
    redact_url("user:pw@host/v1")                  # '***@host/v1' (no scheme: still user info)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MASK", "has_userinfo", "redact", "redact_url"]

MASK = "***"

# scheme://userinfo@ — userinfo runs up to the last '@' before the host part ends; a user name alone
# can be a token too (https://TOKEN@host), so all of it goes, not only what follows a ':'.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^\s/?#@]*(?:@[^\s/?#@]*)*)@")
# user:password@host with no scheme in front (a base URL typed without http://). A colon is required,
# so an e-mail address (bob@example.com) is left alone.
_BARE_USERINFO = re.compile(r"(?<![\w.+\-:/@])[^\s/?#@:'\"]+:[^\s/?#@'\"]+@(?=[\w\[])")
# Authorization headers echoed back by a server in an error body.
_AUTH = re.compile(r"(?i)(?P<head>\b(?:authorization|api[-_]?key|x-api-key)\b[\"']?\s*[:=]\s*[\"']?"
                   r"(?:bearer\s+|basic\s+)?)(?P<value>[^\s\"',;}]+)")


def redact_url(url: str | None) -> str | None:
    """The URL with its user info (user name and password) replaced by ***; None stays None.

    A URL without a scheme counts too: whatever precedes the last '@' before the first '/' is user info.
    """
    if url is None:
        return None
    if "://" not in url:
        head, slash, tail = url.partition("/")
        if "@" in head:
            return f"{MASK}@{head.rsplit('@', 1)[1]}{slash}{tail}"
        return url
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", url)


def has_userinfo(url: str) -> bool:
    """True when `url` carries user info (a user name, a password or a token before '@')."""
    return redact_url(url) != url


def redact(text: object, secrets: Iterable[str | None] = ()) -> str:
    """`text` as a string with every given secret, any URL user info and any echoed
    Authorization/API-key header value replaced by ***.

    Secrets shorter than 4 characters are ignored: masking "a" would garble the message and
    protect nothing.
    """
    out = str(text)
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        out = out.replace(secret, MASK)
    out = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", out)
    out = _BARE_USERINFO.sub(f"{MASK}@", out)
    return _AUTH.sub(lambda m: f"{m.group('head')}{MASK}", out)

