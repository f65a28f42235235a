"""The fix suggested for each kind of pattern: one place for the words, as veralith.pipeline.suggest is
for a single trace's cell. A pattern's fix names what the traces share (a document, a topic, a kind
of fact), so it can say what to change where; the texts are filled with the group's own values."""

from __future__ import annotations

__all__ = ["claim_fix", "idle_source_fix", "source_fix", "topic_fix", "transition_fix"]

_CLAIMS = {
    "number": ("Figures keep coming out unsupported: instruct the generator to copy numbers, prices and "
               "quantities verbatim from the context and cite the chunk, and check every figure of an answer "
               "against its cited chunk before it is shown."),
    "date": ("Dates keep coming out unsupported: keep each document's date in its chunk text or metadata, "
             "filter superseded versions out of the index, and instruct the generator to give a date only when a "
             "chunk states it."),
    "name": ("Names (people, products, companies, codes, screens) keep coming out unsupported: add keyword "
             "(hybrid) retrieval so exact names are found, and instruct the generator to use only names that "
             "appear in the context."),
}


def source_fix(document: str) -> str:
    return (f"Review {document}: answers keep disagreeing with it. If it is outdated or wrong, correct or remove "
            "it and re-index (or filter it out of retrieval until then); if it is right, the generator ignores "
            "it, so instruct it to answer from the context and put this document earlier in the prompt.")


def idle_source_fix(document: str) -> str:
    return (f"{document} takes a retrieval slot and never grounds an answer: leave it out of the index or filter "
            "it by metadata, or add a reranker so chunks that answer rank above it.")


def topic_fix(words: tuple[str, ...]) -> str:
    return (f"Retrieval keeps missing questions about {' '.join(words)}: check that the knowledge base holds "
            "documents on it (index what is missing), and add hybrid (keyword + vector) or multi-query "
            "retrieval so questions worded this way find them.")


def claim_fix(kind: str) -> str:
    return _CLAIMS[kind]


def transition_fix(run_a: str, run_b: str, suggestion: tuple[str, str] | None) -> str:
    said = f" Most of these traces now get the cell's advice \"{suggestion[0]}\": {suggestion[1]}" if suggestion \
        else ""
    return (f"Something that changed between {run_a} and {run_b} (retriever, index, prompt, model) moved these "
            f"traces: compare the two runs' configuration and inputs for it.{said}")
