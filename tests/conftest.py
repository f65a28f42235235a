"""Shared fixtures. Every test runs offline, on a fresh temporary database, with default settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_openai_server import openai_server  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATA = SHARED / "data"

# Tests never touch the network: no real key, no real base URL, tiktoken from the shared folder.
for _var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
    os.environ.pop(_var, None)
for _var in [v for v in os.environ if v.startswith("VERALITH_")]:
    os.environ.pop(_var)
if (SHARED / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """A private DB file and settings re-read from a clean environment for each test."""
    from veralith.config import settings

    monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / "veralith.db"))
    monkeypatch.setenv("VERALITH_BACKEND", "local")
    settings.reload()
    yield
    monkeypatch.undo()
    settings.reload()
