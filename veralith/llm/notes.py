"""What was learnt about judge servers, kept across processes in one small JSON file.

Each entry is one server (its base URL) and model: the habits veralith.llm.server keeps
(`Habits.kept()`: how it takes the schema, where the instructions go, log-probabilities, rejected
options, recent speeds and reply sizes) and the server's identity when they were learnt (its model
list entry and version, veralith.llm.probe). An entry whose identity no longer matches the server's
is learnt again.

Where: VERALITH_SERVER_NOTES, default `$XDG_CACHE_HOME/veralith/servers.json` (else
`~/.cache/veralith/servers.json`); `off` keeps them in memory only. A file of its own rather than a
table beside the reply cache: what a server does belongs to the server, not to one store, so every
project and store that judges with the same server shares it (and a PostgreSQL store, a read-only
one or `VERALITH_CACHE=false` changes nothing), and the judge client never opens a database
(docs/architecture.md). Nothing secret is kept: a base URL with a password is refused by the
settings, and no key is written.

Writes are whole-file replacements (a reader never sees half a file); two processes learning at once
may each keep only their own entry, which costs a second learning, never a wrong one. A file that
cannot be read or written is ignored with one debug line: the habits are then learnt per process.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from veralith.config import settings

__all__ = ["MAX_ENTRIES", "forget", "load", "notes_path", "save"]

log = logging.getLogger("veralith.llm")

MAX_ENTRIES = 64   # the least recently learnt go first
_lock = threading.Lock()


def notes_path() -> Path | None:
    """The notes file, or None when notes are off."""
    chosen = settings.current.server_notes
    if chosen is not None:
        return None if chosen.strip().lower() == "off" else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "veralith" / "servers.json"


def _key(base_url: str, model: str) -> str:
    return f"{base_url.rstrip('/')} {model}"


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.debug("veralith: server notes at %s not read: %s", path, exc)
        return {}
    return found if isinstance(found, dict) else {}


def load(base_url: str, model: str) -> dict[str, Any] | None:
    """The entry kept for this server and model: {"identity": str, "habits": {...}, "learnt_at": float}."""
    path = notes_path()
    if path is None:
        return None
    entry = _read(path).get(_key(base_url, model))
    return entry if isinstance(entry, dict) and isinstance(entry.get("habits"), dict) else None


def save(base_url: str, model: str, identity: str, habits: dict[str, Any]) -> None:
    """Keep (or replace) the entry for this server and model."""
    path = notes_path()
    if path is None:
        return
    with _lock:
        entries = _read(path)
        entries[_key(base_url, model)] = {"identity": identity, "habits": habits, "learnt_at": time.time()}
        kept = sorted(entries.items(), key=lambda kv: -float(kv[1].get("learnt_at", 0)
                                                             if isinstance(kv[1], dict) else 0))[:MAX_ENTRIES]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".servers-", suffix=".json", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(dict(kept), out, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except OSError as exc:
            log.debug("veralith: server notes not written to %s: %s", path, exc)


def forget(base_url: str, model: str) -> None:
    """Drop the entry for this server and model (it is learnt again on the next call)."""
    path = notes_path()
    if path is None:
        return
    with _lock:
        entries = _read(path)
        if entries.pop(_key(base_url, model), None) is not None:
            try:
                path.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
            except OSError as exc:
                log.debug("veralith: server notes not written to %s: %s", path, exc)
