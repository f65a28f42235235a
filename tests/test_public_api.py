"""One public surface, declared once and light to import (DESIGN §9); the import rule is tests/test_architecture.py."""

from __future__ import annotations

import subprocess
import sys

import veralith


def test_all_is_sorted_and_complete():
    assert veralith.__all__ == sorted(veralith.__all__)
    public = {n for n in vars(veralith) if not n.startswith("_")} - {"__version__"}
    modules = {n for n in public if type(getattr(veralith, n)).__name__ == "module"}
    assert set(veralith.__all__) == public - modules
    for name in veralith.__all__:
        assert getattr(veralith, name) is not None


def test_import_is_light():
    # The adapters load their framework only when installed or used: importing them (and asking
    # their counters) loads none; nor does anything load a database library before something is stored.
    code = ("import sys, veralith, veralith.adapters.llamaindex as li, veralith.adapters.openai as oa; "
            "li.stats(), oa.stats(); heavy = [m for m in ('langchain', 'langchain_core', 'llama_index', 'chromadb', "
            "'tiktoken', 'openai', 'sqlite_utils', 'numpy', 'psycopg') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# Which part may import which: tests/test_architecture.py, from the table in docs/architecture.md.


def test_the_offline_backend_never_loads_the_openai_sdk():
    code = ("import sys, veralith; from veralith.config import settings\n"
            "with settings.override(backend='local'):\n"
            "    veralith.evaluate('What is X?', ['X is a letter.'], 'X is a letter.', persist=False)\n"
            "print('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
