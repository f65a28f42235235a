"""At interpreter exit, log()'s worker drains through a public `atexit` handler, before the reply
cache closes (docs/architecture.md, "Process exit")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from veralith.store import ops


def test_traces_logged_just_before_exit_are_evaluated_by_the_at_exit_drain(tmp_path):
    child = textwrap.dedent("""
        import atexit
        registered = []
        register = atexit.register
        def spy(fn, *args, **kwargs):
            registered.append(f"{fn.__module__}.{fn.__name__}")
            return register(fn, *args, **kwargs)
        atexit.register = spy
        import veralith
        for i in range(3):
            veralith.log(f"What is item {i}?", [f"Item {i} is a widget."], f"Item {i} is a widget.")
        veralith.log("What is X?", ["X is a letter."], "X is a letter.")
        ours = [name for name in registered if name.startswith("veralith.")]
        # atexit runs the last registered first: the drain, then the cache's close; each once.
        assert ours == ["veralith.llm.cache._close_all", "veralith.sdk.log._at_exit"], ours
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    env.update(VERALITH_DB_PATH=str(tmp_path / "v.db"), VERALITH_BACKEND="local", VERALITH_SHUTDOWN_TIMEOUT_S="60")
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "veralith:" not in out.stderr   # nothing left pending
    from veralith.store import open_store

    statuses = [row["status"] for row in open_store(tmp_path / "v.db").read(ops.list_traces)]
    assert statuses == ["done"] * 4
