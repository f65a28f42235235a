"""`python -m sample_app`: the demo batch (see sample_app/run.py).

Without the `sample` extra (chromadb) it prints the install command and exits 1 instead of a
ModuleNotFoundError traceback.
"""

import sys

INSTALL = 'pip install "veralith-rag[sample]"'


def _missing_extra() -> str | None:
    """What is missing for the sample app to import, or None when chromadb imports."""
    try:
        import chromadb  # noqa: F401  (imported only to see that it can be)
    except ModuleNotFoundError as exc:  # chromadb itself, or a module it needs
        return exc.name or "chromadb"
    return None


missing = _missing_extra()
if missing is not None:
    detail = "" if missing == "chromadb" else f" (chromadb is installed but cannot import {missing})"
    print(f"The sample app needs the `sample` extra (chromadb){detail}. Install it with:\n\n    {INSTALL}\n\n"
          'From a checkout of the repository: pip install -e ".[sample]"', file=sys.stderr)
    raise SystemExit(1)

from sample_app.run import main  # noqa: E402  (after the check: it imports chromadb)

raise SystemExit(main())
