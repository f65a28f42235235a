"""Untrusted text made inert for a reader: the one list of characters that must never reach a screen raw.

C0/C1 controls (but newline and tab), DEL, the bidi overrides/isolates and the invisible bidi marks
(U+061C ALM, U+200E LRM, U+200F RLM), which a terminal or browser obeys and which can reorder what a
reader sees ("Trojan Source"), and the Unicode line/paragraph separators. Each is written out as
\\xNN or \\uNNNN, so the text stays plain and its meaning visible. The terminal (veralith.cli.render)
and the web view (veralith.web.views) both use this list.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["DIRECTION_MARKS", "UNSAFE", "json_safe", "laid_out", "visible"]

UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
DIRECTION_MARKS = frozenset("\u061c\u200e\u200f")  # ALM, LRM, RLM: weak marks, not overrides
_LINE_BREAKS = re.compile("\r\n?|\f")


def visible(text: Any) -> str:
    """`text` (any value, as str) with every unsafe character written out as \\xNN / \\uNNNN."""
    value = text if isinstance(text, str) else str(text)
    return UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                      else f"\\u{ord(m.group()):04x}", value)


def json_safe(text: str) -> str:
    """Like `visible`, but always \\uNNNN, which is also a valid escape inside a JSON string, so a
    JSON line written to a terminal stays JSON."""
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def laid_out(text: Any) -> str:
    """`visible` for a page that lays text out: line breaks (CR LF, CR, form feed) become newlines and
    the direction marks stay; every other unsafe character is written out as `visible` does."""
    value = _LINE_BREAKS.sub("\n", text if isinstance(text, str) else str(text))
    return UNSAFE.sub(lambda m: m.group() if m.group() in DIRECTION_MARKS else visible(m.group()), value)
