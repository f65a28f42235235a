"""The Orbitra documentation corpus, indexed in a persistent chromadb collection."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import chromadb
from chromadb.config import Settings as ChromaSettings

from sample_app.embedding import HashingEmbeddingFunction  # importing it registers it with chromadb

__all__ = ["COLLECTION", "CORPUS_DIR", "Passage", "build_index", "load_corpus", "open_collection", "retrieve"]

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
COLLECTION = "orbitra_docs"


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    source: str
    title: str


def load_corpus(directory: Path = CORPUS_DIR) -> list[Passage]:
    """One passage per Markdown file: a '# Title' line, then the text."""
    passages = []
    for path in sorted(directory.glob("*.md")):
        title, _, body = path.read_text(encoding="utf-8").partition("\n")
        passages.append(Passage(id=path.stem, text=" ".join(body.split()), source=path.name,
                                title=title.lstrip("# ").strip()))
    return passages


def _client(data_dir: Path) -> chromadb.ClientAPI:
    # Telemetry off: the sample app must not reach the network for anything.
    return chromadb.PersistentClient(path=str(data_dir), settings=ChromaSettings(anonymized_telemetry=False))


def build_index(data_dir: Path) -> chromadb.Collection:
    """Create (or refresh) the collection under `data_dir` from the corpus; idempotent."""
    collection = _client(data_dir).get_or_create_collection(
        COLLECTION, embedding_function=HashingEmbeddingFunction(), configuration={"hnsw": {"space": "cosine"}})
    passages = load_corpus()
    collection.upsert(ids=[p.id for p in passages], documents=[p.text for p in passages],
                      metadatas=[{"source": p.source, "title": p.title} for p in passages])
    return collection


def open_collection(data_dir: Path) -> chromadb.Collection:
    """Reopen an existing index. No embedding function is passed on purpose: chromadb rebuilds the
    registered one from the collection's stored config, which is what a new process relies on."""
    return _client(data_dir).get_collection(COLLECTION)


def retrieve(collection: chromadb.Collection, question: str, k: int = 3) -> list[dict[str, str]]:
    """The k nearest passages as Veralith context dicts (id, text, source)."""
    found = collection.query(query_texts=[question], n_results=k)
    return [{"id": doc_id, "text": text, "source": (meta or {}).get("source", doc_id)}
            for doc_id, text, meta in zip(found["ids"][0], found["documents"][0], found["metadatas"][0], strict=True)]
