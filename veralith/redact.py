"""Secrets out of text: API keys, the user info of a URL and password parameters.

One place for the rule, used wherever text may reach a person or a file: `repr(settings)`, the
CLI's error lines, the OpenAI client's repr and the judge errors it records, the store's URL in
every message, the log records of Veralith's own loggers and of its PostgreSQL pool
(`SecretFilter`, installed by veralith.config and veralith.store.postgres), and the web view's
error pages. This module knows no settings; `veralith.config.redact_configured` applies it with
the configured key.

    redact_url("http://user:pw@host:8000/v1")      # 'http://***@host:8000/v1'
    redact("GET http://u:p@h/v1 key sk-abc", ["sk-abc"])   # 'GET http://***@h/v1 key ***'
    redact_url("user:pw@host/v1")                  # '***@host/v1' (no scheme: still user info)
    redact_url("postgresql://h/db?password=pw")    # 'postgresql://h/db?password=***'
    redact("host=h password='p w' dbname=d")       # "host=h password=*** dbname=d" (a libpq DSN)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

__all__ = ["MASK", "SecretFilter", "has_userinfo", "redact", "redact_url"]

MASK = "***"

# scheme://userinfo@ — userinfo runs up to the last '@' before the host part ends; a user name alone
# can be a token too (https://TOKEN@host), so all of it goes, not only what follows a ':'.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^\s/?#@]*(?:@[^\s/?#@]*)*)@")
# user:password@host with no scheme in front (a base URL typed without http://). A colon is required,
# so an e-mail address (bob@example.com) is left alone.
_BARE_USERINFO = re.compile(r"(?<![\w.+\-:/@])[^\s/?#@:'\"]+:[^\s/?#@'\"]+@(?=[\w\[])")
# libpq's secret parameters, in a URL's query string (?password=pw&…) or a key=value DSN
# (password=pw, password='p w', password = pw): the value runs to the next separator, or is a quoted
# libpq string with backslash escapes (an unquoted value may hold any other character, ')' and '#'
# included, so only whitespace, '&' and a quote end it). passfile names a file, not a secret, but a file of passwords is
# where an attacker looks next.
_PASSWORD_PARAM = re.compile(r"(?i)(?P<key>(?<![\w-])(?:ssl)?password|(?<![\w-])passfile)(?P<eq>\s*=\s*)"
                             r"(?P<value>'(?:[^'\\]|\\.)*'?|[^\s&'\"]*)")
# Authorization headers echoed back by a server in an error body.
_AUTH = re.compile(r"(?i)(?P<head>\b(?:authorization|api[-_]?key|x-api-key)\b[\"']?\s*[:=]\s*[\"']?"
                   r"(?:bearer\s+|basic\s+)?)(?P<value>[^\s\"',;}]+)")


def redact_url(url: str | None) -> str | None:
    """The URL with its user info (user name and password) and its password parameters (`password=`,
    `sslpassword=`, `passfile=`) replaced by ***; None stays None.

    A URL without a scheme counts too: whatever precedes the last '@' before the first '/' is user info.
    """
    if url is None:
        return None
    return _mask_params(_mask_userinfo(url))


def _mask_userinfo(url: str) -> str:
    if "://" not in url:
        head, slash, tail = url.partition("/")
        if "@" in head:
            return f"{MASK}@{head.rsplit('@', 1)[1]}{slash}{tail}"
        return url
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", url)


def _mask_params(text: str) -> str:
    return _PASSWORD_PARAM.sub(lambda m: f"{m.group('key')}{m.group('eq')}{MASK}", text)


def has_userinfo(url: str) -> bool:
    """True when `url` carries user info (a user name, a password or a token before '@')."""
    return _mask_userinfo(url) != url


def redact(text: object, secrets: Iterable[str | None] = ()) -> str:
    """`text` as a string with every given secret, any URL user info, any password parameter
    (`password=`, `sslpassword=`, `passfile=`, in a URL or a libpq DSN) and any echoed
    Authorization/API-key header value replaced by ***.

    Secrets shorter than 4 characters are ignored: masking "a" would garble the message and
    protect nothing.
    """
    out = str(text)
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        out = out.replace(secret, MASK)
    out = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", out)
    out = _BARE_USERINFO.sub(f"{MASK}@", out)
    out = _mask_params(out)
    return _AUTH.sub(lambda m: f"{m.group('head')}{MASK}", out)


class SecretFilter(logging.Filter):
    """A logging filter that masks secrets (`redact`) in a record's message and traceback before any
    handler formats it, so a host app's handlers never see a password or key Veralith held.

    `secrets` returns the extra strings to mask (the configured API key), read at each record so a
    key set after the filter was installed is masked too. Installed on a logger, a filter sees only
    the records logged on that very logger, not on its children: install it on each one.
    """

    def __init__(self, secrets: Callable[[], Iterable[str | None]] = tuple) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        masked = self.mask(record)
        if masked is not record:  # a handler may hold the record: the masked copy replaces it
            record.__dict__.update(masked.__dict__)
        return True

    def mask(self, record: logging.LogRecord) -> logging.LogRecord:
        """The record with its message (and formatted traceback) masked; `record` itself when it held
        nothing to mask."""
        secrets = list(self._secrets())
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging reports it itself, later
            return record
        shown = redact(message, secrets)
        trace = record.exc_text or (logging.Formatter().formatException(record.exc_info) if record.exc_info else None)
        shown_trace = redact(trace, secrets) if trace else None
        if shown == message and shown_trace == trace:
            return record
        out = logging.makeLogRecord(record.__dict__)
        out.msg, out.args = shown, None
        if shown_trace is not None:
            # Formatters use exc_text when it is set; exc_info is dropped so none formats the raw one.
            out.exc_text, out.exc_info = shown_trace, None
        return out

