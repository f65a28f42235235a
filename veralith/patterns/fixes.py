"""The fix suggested for each kind of pattern: one place for the words, as veralith.pipeline.suggest is
for a single trace's cell. A pattern's fix names what the traces share (a document, a topic, a kind
of fact), so it can say what to change where; the texts are filled with the group's own values."""

from __future__ import annotations

__all__ = ["claim_fix", "idle_source_fix", "missed_chunk_fix", "missed_fact_fix", "source_fix", "topic_fix",
           "transition_fix"]

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


def missed_chunk_fix(chunk: str, *, retrieved_sometimes: bool) -> str:
    ranked = (" It is retrieved for some of these questions, so it is in the index: raise top-k or add a reranker "
              "so it ranks inside the cut-off, and rewrite the queries that miss it (multi-query, HyDE)."
              if retrieved_sometimes else
              " It is never retrieved: check that it is in the index at all (re-index it), and that chunking "
              "keeps it whole, then add keyword (hybrid) search or query rewriting so these questions reach it.")
    return f"Retrieval (index, chunking, query rewrite): the expected chunk {chunk} is not returned.{ranked}"


def missed_fact_fix(fact: str, *, words: tuple[str, ...] = ()) -> str:
    what, them = ((f"reference facts {fact} are", "them") if words else
                  (f"the reference fact \"{fact}\" is", "it"))
    return (f"Retrieval (index, chunking, query rewrite): {what} not in the retrieved context. Check that the "
            f"documents stating {them} are indexed (index them if not), that chunking does not cut a fact off from "
            "what the question names, and add query rewriting or hybrid (keyword + vector) retrieval so these "
            f"questions reach {them}. A prompt change cannot fix this: the generator never sees the facts.")
