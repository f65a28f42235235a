"""Reading LangChain values without importing LangChain: questions, answers, messages, documents.

Every function here takes whatever a chain passed or returned and gives back plain text (or None
when the value does not have the expected shape); nothing raises on an unexpected shape.
"""

from __future__ import annotations

import math
from typing import Any

from veralith.adapters._common import json_safe
from veralith.sdk.handoff import unique_ids

QUERY_KEYS = ("question", "query", "input")
ANSWER_KEYS = ("answer", "result", "output", "text", "response", "content")
# The output keys of LangChain's retrieval-QA chains (RetrievalQA "result"; ConversationalRetrievalChain,
# RetrievalQAWithSourcesChain and create_retrieval_chain "answer"): a nested chain returning one of
# these is the chain that answered from the documents.
RAG_ANSWER_KEYS = ("result", "answer")
HISTORY_KEY = "chat_history"
_HUMAN_ROLES = ("human", "user")


def query_text(inputs: Any, fallback: str | None = None) -> str | None:
    """The question in a chain's input: the input itself, a question key, or its only string."""
    if isinstance(inputs, str) and inputs:
        return inputs
    if isinstance(inputs, dict):
        for key in QUERY_KEYS:
            if isinstance(inputs.get(key), str) and inputs[key]:
                return inputs[key]
        messages = inputs.get("messages")
        if isinstance(messages, list):
            return last_human(messages) or fallback
        strings = [v for v in inputs.values() if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
    return fallback


def answer_text(output: Any) -> str | None:
    """The answer in a chain's output: a string, a message's text, an answer key, or the final AI
    message of a message state (`{"messages": [...]}`, as LangGraph's MessagesState returns)."""
    if isinstance(output, str):
        return str.__str__(output)
    if isinstance(output, dict):
        for key in ANSWER_KEYS:
            if key in output:
                return answer_text(output[key])
        messages = output.get("messages")
        return final_ai(messages) if isinstance(messages, list) else None
    return message_text(output)


def rag_answer(output: Any) -> str | None:
    """The answer of a retrieval-QA chain's output dict, else None (see RAG_ANSWER_KEYS)."""
    if isinstance(output, dict):
        for key in RAG_ANSWER_KEYS:
            if isinstance(output.get(key), str):
                return str.__str__(output[key])
    return None


def message_text(message: Any) -> str | None:
    text = getattr(message, "text", None)  # messages: `.text` joins the text parts of any content
    if isinstance(text, str):
        return str.__str__(text)  # langchain-core 1.x: a callable str subclass
    if callable(text):  # langchain-core < 1.0, where `text` was a method
        value = text()
        return value if isinstance(value, str) else None
    return None


def _role(message: Any) -> str | None:
    if isinstance(message, tuple) and len(message) == 2:
        return str(message[0])
    if isinstance(message, dict):
        return str(message.get("role") or message.get("type") or "")
    return getattr(message, "type", None)


def _content(message: Any) -> str | None:
    if isinstance(message, tuple) and len(message) == 2:
        return message[1] if isinstance(message[1], str) else None
    if isinstance(message, dict):
        return message.get("content") if isinstance(message.get("content"), str) else None
    return message_text(message)


def last_human(messages: list[Any]) -> str | None:
    """The text of the last human message (a message object, a (role, text) pair or a role dict)."""
    for message in reversed(messages):
        if _role(message) in _HUMAN_ROLES:
            return _content(message) or None
    return None


def final_ai(messages: list[Any]) -> str | None:
    """The text of the last message when it is an AI message with no tool calls left to run."""
    if not messages:
        return None
    message = messages[-1]
    if _role(message) not in ("ai", "assistant") or getattr(message, "tool_calls", None):
        return None
    return _content(message) or None


def history(value: Any) -> list[dict[str, str]] | None:
    """A chat history (messages, (role, text) pairs or (human, ai) string pairs) as role/content dicts."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    turns: list[dict[str, str]] = []
    for item in value:
        if isinstance(item, tuple) and len(item) == 2 and _role(item) not in (*_HUMAN_ROLES, "ai", "assistant",
                                                                             "system", "tool"):
            turns += [{"role": "human", "content": str(item[0])}, {"role": "ai", "content": str(item[1])}]
        else:
            turns.append({"role": str(_role(item) or "unknown"), "content": _content(item) or str(item)})
    return turns


# Metadata keys under which retrievers and rerankers put a document's score (Cohere's and the
# cross-encoder rerankers write relevance_score; several vector-store retrievers write score).
SCORE_KEYS = ("relevance_score", "score")


def context(documents: list[Any], ranks: list[int] | None = None) -> list[dict[str, Any]]:
    """LangChain Documents as context dicts; duplicates (several retrievers, one chunk) are dropped.
    `ranks` gives each document's position in its retriever's results (kept as the chunk's rank);
    a finite number under one of SCORE_KEYS in its metadata becomes its score."""
    chunks: list[dict[str, Any]] = []
    seen: set[tuple[Any, str]] = set()
    for i, doc in enumerate(documents):
        text = getattr(doc, "page_content", doc)
        doc_id = getattr(doc, "id", None)
        if not isinstance(text, str) or (doc_id, text) in seen:
            continue
        seen.add((doc_id, text))
        metadata = json_safe(dict(getattr(doc, "metadata", None) or {}))
        chunk: dict[str, Any] = {"text": text, "metadata": metadata}
        if metadata.get("source") is not None:
            chunk["source"] = str(metadata["source"])
        if doc_id:
            chunk["id"] = str(doc_id)
        if ranks is not None and i < len(ranks):
            chunk["rank"] = ranks[i]
        score = next((metadata[k] for k in SCORE_KEYS if _finite(metadata.get(k))), None)
        if score is not None:
            chunk["score"] = float(score)
        chunks.append(chunk)
    return unique_ids(chunks)  # retriever ids only when every chunk has a distinct one


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
