"""Token counts as OpenAI bills them: tiktoken loading (never hanging on the network) and counting.

Tokens come from tiktoken (o200k_base for gpt-4o / 4.1 / o-series / gpt-5 and unknown models,
cl100k_base for gpt-4 / gpt-3.5). An encoding file already in tiktoken's cache directory (with the
right checksum) is loaded at once; otherwise tiktoken's download, which has no timeout, runs in a
background thread that is waited for at most LOAD_WAIT_S once. Until an encoding is there (and for
good when it cannot be had) tokens are counted as ceil(characters / 4), with one CostWarning; a
count never hangs and never fails an evaluation.

Chat input is counted as OpenAI counts it: per message 3 + tokens(role + content), 3 to prime the
reply, plus the strict JSON Schema sent as `response_format` (structured outputs bill it as input).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import tempfile
import threading
import warnings
from collections.abc import Sequence
from typing import Any

from veralith.observability.pricing import CostWarning

__all__ = ["LOAD_WAIT_S", "count_tokens", "encoding_for", "estimate_prompt_tokens", "most_prompt_tokens",
           "prompt_tokens"]

# sha256 of each encoding file, as tiktoken itself checks it (tiktoken_ext/openai_public.py).
_ENCODINGS = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_CL100K_FAMILIES = ("gpt-4-", "gpt-3.5", "text-embedding-")

LOAD_WAIT_S = 3.0
_encodings: dict[str, Any] = {}   # name -> Encoding, or None when it could not be loaded
_loaders: dict[str, tuple[threading.Thread, bool]] = {}  # name -> (loader, file already on disk)
_enc_lock = threading.Lock()
_fallback_warned = False


def encoding_for(model: str) -> str:
    """The tiktoken encoding OpenAI uses for `model` (o200k_base for unknown models)."""
    name = model.strip().lower()
    return "cl100k_base" if name == "gpt-4" or name.startswith(_CL100K_FAMILIES) else "o200k_base"


def _cached_file_ok(encoding: str) -> bool:
    """True when tiktoken will find `encoding` in its cache without downloading (same rules as tiktoken)."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:  # tiktoken treats "" as "never cache": every load would download
        return False
    path = os.path.join(cache_dir, hashlib.sha1(_URL.format(encoding).encode()).hexdigest())
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest() == _ENCODINGS[encoding]
    except OSError:
        return False


def _load(name: str) -> None:
    try:
        import tiktoken  # lazy: never at `import veralith`

        encoding = tiktoken.get_encoding(name)
    except Exception:  # offline, a proxy page, a broken install: the estimate falls back, never fails
        encoding = None
    with _enc_lock:
        _encodings[name] = encoding


def _encoding(name: str, wait: bool = True) -> Any | None:
    """The tiktoken encoding, or None while (or because) it cannot be had without waiting on the network.

    `wait=False` starts the load if needed but never waits for it (None until it is there).
    """
    with _enc_lock:
        if name in _encodings:
            return _encodings[name]
        first = name not in _loaders
        if first:
            loader = threading.Thread(target=_load, args=(name,), daemon=True, name=f"veralith-tiktoken-{name}")
            _loaders[name] = (loader, _cached_file_ok(name))
            loader.start()
        loader, from_disk = _loaders[name]
    # A load from disk takes about a second, so every caller waits for it; a download may hang
    # (tiktoken sets no timeout), so only its first caller waits, and only LOAD_WAIT_S.
    loader.join((LOAD_WAIT_S if first or from_disk else 0) if wait else 0)
    with _enc_lock:
        return _encodings.get(name)


def _warn_fallback(name: str) -> None:
    global _fallback_warned
    if not _fallback_warned:
        _fallback_warned = True
        warnings.warn(f"tiktoken encoding {name} is not available offline (set TIKTOKEN_CACHE_DIR to a folder "
                      "holding it); token counts for the budget are estimated as ceil(characters / 4).",
                      CostWarning, stacklevel=4)


def count_tokens(text: str, model: str, *, wait: bool = True) -> tuple[int, str]:
    """(tokens in `text` for `model`, method used).

    `wait=False` (the judge client's truncation check, which must not stall a call) counts
    characters / 4 until the encoding has loaded in the background, without a warning.
    """
    name = encoding_for(model)
    enc = _encoding(name, wait)
    if enc is None:
        if wait:
            _warn_fallback(name)
        return math.ceil(len(text) / 4), "chars/4"
    return len(enc.encode(text, disallowed_special=())), f"tiktoken:{name}"


@functools.lru_cache(maxsize=64)
def _count_static(text: str, model: str) -> tuple[int, str]:
    """count_tokens for texts every call repeats (system prompts, schemas), counted once each."""
    return count_tokens(text, model)


def estimate_prompt_tokens(messages: Sequence[dict[str, Any]], schema: dict[str, Any], model: str) -> tuple[int, str]:
    """(prompt tokens of `messages` plus the `response_format` schema, method), for the budget estimate.

    Waits (briefly, once) for tiktoken to load, unlike prompt_tokens; texts every call repeats (system
    prompts, schemas) are counted once per process.
    """
    total, method = 3, ""
    for message in messages:
        content = message.get("content") or ""
        text = f"{message.get('role', '')}{content if isinstance(content, str) else json.dumps(content)}"
        if message.get("role") == "system":
            n, _ = _count_static(text, model)
        else:
            n, method = count_tokens(text, model)
        total += 3 + n
    n, _ = _count_static(json.dumps(schema, separators=(",", ":")), model)
    return total + n, method


def prompt_tokens(messages: Sequence[dict[str, Any]], schema: dict[str, Any] | None, model: str
                  ) -> tuple[int, str]:
    """(prompt tokens OpenAI would bill for `messages` plus a `response_format` schema, method used).

    Never waits for tiktoken to load (see count_tokens), so the first calls of a process may be
    counted as characters / 4.
    """
    total, method = 3, "chars/4"
    for message in messages:
        n, method = _count_now(_text(message), model, static=message.get("role") == "system")
        total += 3 + n
    if schema:
        n, method = _count_now(_schema_text(schema), model, static=True)
        total += n
    return total, method


def most_prompt_tokens(messages: Sequence[dict[str, Any]], schema: dict[str, Any] | None, model: str) -> int:
    """A number prompt_tokens(messages, schema, model) cannot exceed, found without tokenizing.

    Every token is at least one byte of UTF-8 (tiktoken's tokens are byte sequences, special-token
    text included, as it is counted as plain text), and the characters / 4 fallback is smaller
    still; texts every call repeats count as already counted. So a server that reported at least a
    share of this read at least that share of the prompt, and need not be checked by counting.
    """
    _encoding(encoding_for(model), wait=False)   # the load starts as prompt_tokens would have started it
    total = 3
    for message in messages:
        text = _text(message)
        known = _static_counts.get((text, model)) if message.get("role") == "system" else None
        total += 3 + (known if known is not None else len(text.encode("utf-8")))
    if schema:
        text = _schema_text(schema)
        known = _static_counts.get((text, model))
        total += known if known is not None else len(text.encode("utf-8"))
    return total


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return f"{message.get('role', '')}{content if isinstance(content, str) else json.dumps(content)}"


_schema_texts: dict[int, tuple[dict[str, Any], str]] = {}   # id(schema) -> (schema, its compact JSON)


def _schema_text(schema: dict[str, Any]) -> str:
    """The compact JSON of a response_format schema. The client sends each task's one schema object
    on every call, so its text is made once per object (kept with it: an id is never reused while
    its object is held here); a schema object not seen before is serialised, as are all when full."""
    found = _schema_texts.get(id(schema))
    if found is not None and found[0] is schema:
        return found[1]
    text = json.dumps(schema, separators=(",", ":"))
    if len(_schema_texts) < 64:
        _schema_texts[id(schema)] = (schema, text)
    return text


_static_counts: dict[tuple[str, str], int] = {}   # (text, model) -> tiktoken count of a text every call repeats


def _count_now(text: str, model: str, *, static: bool) -> tuple[int, str]:
    if static and (text, model) in _static_counts:
        return _static_counts[(text, model)], f"tiktoken:{encoding_for(model)}"
    n, method = count_tokens(text, model, wait=False)
    if static and method != "chars/4" and len(_static_counts) < 256:
        _static_counts[(text, model)] = n
    return n, method
