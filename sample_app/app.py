"""The RAG app itself: retrieve from chromadb, answer, and let `@veralith.trace` log every call."""

from __future__ import annotations

from collections.abc import Callable

import chromadb

import veralith
from sample_app.answer import Answerer
from sample_app.index import retrieve

__all__ = ["KNOWLEDGE_BASE", "make_app"]

# One knowledge base per corpus: Veralith calibrates its sufficiency threshold per knowledge base.
KNOWLEDGE_BASE = "orbitra"


def make_app(collection: chromadb.Collection, answerer: Answerer, *, k: int = 3,
             sync: bool | None = None) -> Callable[[str], str]:
    """Return `ask(question) -> answer`. Callers get the plain answer; Veralith gets the answer and
    the passages it was written from, through TraceReturn."""

    @veralith.trace(knowledge_base=KNOWLEDGE_BASE, sync=sync)
    def ask(question: str) -> veralith.TraceReturn:
        context = retrieve(collection, question, k=k)
        return veralith.TraceReturn(response=answerer.answer(question, context), context=context)

    return ask
