"""Run the demo batch through the sample app, wait for Veralith to judge it, then show `veralith stats`.

    python -m sample_app                     # offline: extractive answerer, local judges
    python sample_app/run.py --db demo.db    # the same, into a database of its own
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `sample_app` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

__all__ = ["main"]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sample_app", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("sample_app_data"),
                        help="where the chromadb index is kept (default: ./sample_app_data)")
    parser.add_argument("--db", help="Veralith database (default: VERALITH_DB_PATH, else ./veralith.db)")
    parser.add_argument("--answerer", choices=["auto", "openai", "extractive"], default="auto",
                        help="auto: OpenAI when OPENAI_API_KEY is set, else the offline extractive answerer")
    parser.add_argument("--no-guess", action="store_true",
                        help="make the offline answerer refuse instead of confabulating")
    parser.add_argument("--sync", action="store_true", help="judge each answer before asking the next question")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.db:
        # Through the environment, so the `veralith stats` run below reads the same database.
        os.environ["VERALITH_DB_PATH"] = args.db
    import veralith
    from veralith.config import settings

    settings.reload()
    from sample_app.answer import make_answerer
    from sample_app.app import KNOWLEDGE_BASE, make_app
    from sample_app.index import build_index
    from sample_app.questions import QUESTIONS

    collection = build_index(args.data_dir)
    answerer = make_answerer(args.answerer, guess=not args.no_guess)
    ask = make_app(collection, answerer, sync=True if args.sync else None)
    print(f"Orbitra helpdesk: {collection.count()} passages, answerer={answerer.name}, "
          f"judges={settings.backend}, database={settings.db_path}\n")
    for kind, question in QUESTIONS:
        print(f"[{kind}] {question}\n    {ask(question)}\n")
    veralith.shutdown(wait=True)  # the judges run in the background; let them finish before counting

    from veralith.cli import app as cli

    print(f"$ veralith stats --kb {KNOWLEDGE_BASE}")
    try:
        cli(["stats", "--kb", KNOWLEDGE_BASE], standalone_mode=False)
    except SystemExit as exc:  # typer exits on errors even outside standalone mode
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
