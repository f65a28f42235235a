"""Reading LlamaIndex values: questions, answers, chat histories and retrieved nodes.

Every function takes whatever LlamaIndex passed or returned and gives back plain values (or None
when the value does not have the expected shape); nothing raises on an unexpected shape.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from veralith.adapters._common import json_safe
from veralith.sdk.handoff import unique_ids

# Node metadata keys that name where a chunk came from: ours and LangChain's "source", then what
# LlamaIndex's SimpleDirectoryReader writes.
SOURCE_KEYS = ("source", "file_path", "file_name")


def query_text(value: Any) -> str | None:
    """The question in a query: a string or a QueryBundle's query_str."""
    if isinstance(value, str):
        return value or None
    text = getattr(value, "query_str", None)
    return text if isinstance(text, str) and text else None


def answer_text(result: Any) -> str | None:
    """The answer a query or chat engine returned (Response, AgentChatResponse, PydanticResponse); None
    for a streaming response, whose text is what its model streams."""
    if isinstance(result, str):
        return result
    text = getattr(result, "response", None)
    if isinstance(text, str):
        return text
    if text is not None and type(result).__name__ == "PydanticResponse":
        return str(result)
    return None


def stream_of(result: Any) -> Any:
    """The token generator of a query engine's StreamingResponse or AsyncStreamingResponse, else None."""
    if type(result).__name__ not in ("StreamingResponse", "AsyncStreamingResponse"):
        return None
    return getattr(result, "response_gen", None)


def is_streaming(result: Any) -> bool:
    """Whether the engine's result is a stream whose text is generated after the call returned."""
    return type(result).__name__ in ("StreamingResponse", "AsyncStreamingResponse", "StreamingAgentChatResponse")


def source_nodes(result: Any) -> list[Any]:
    nodes = getattr(result, "source_nodes", None)
    return list(nodes) if isinstance(nodes, list) else []


def history(messages: Any) -> list[dict[str, str]] | None:
    """A chat history (ChatMessages) as role/content dicts, or None when empty or unreadable."""
    if not isinstance(messages, (list, tuple)) or not messages:
        return None
    turns = []
    for message in messages:
        role = getattr(message, "role", None)
        content = getattr(message, "content", None)
        turns.append({"role": str(getattr(role, "value", role) or "unknown"),
                      "content": content if isinstance(content, str) else str(content or "")})
    return turns


def engine_history(engine: Any) -> Any:
    """A chat engine's history before this turn (its `chat_history`), or None when it cannot say."""
    try:
        return engine.chat_history
    except Exception:  # a custom engine whose memory cannot be read: judged without the history
        return None


def model_text(response: Any) -> str | None:
    """The text of a model's response (CompletionResponse or ChatResponse)."""
    text = getattr(response, "text", None)
    if isinstance(text, str):
        return text
    content = getattr(getattr(response, "message", None), "content", None)
    return content if isinstance(content, str) else None


def streamed(so_far: str, response: Any) -> str:
    """The text a stream's consumer has received once it got this chunk: the deltas joined (what
    the consumer sees), or the chunk's own cumulative text when a model gives no delta."""
    delta = getattr(response, "delta", None)
    if isinstance(delta, str):
        return so_far + delta
    text = model_text(response)
    return text if text is not None else so_far


@functools.cache
def _plain() -> Any:
    from llama_index.core.schema import MetadataMode

    return MetadataMode.NONE


def chunks(nodes: list[Any]) -> list[dict[str, Any]]:
    """NodeWithScore objects as context dicts, in the order given: the node's text without its metadata,
    its id, its metadata and source, its 1-based rank and its score. A node without text (an image)
    is left out; a node seen twice is kept once; ids are kept only when they are all distinct."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, str]] = set()
    for rank, item in enumerate(nodes, start=1):
        node = getattr(item, "node", item)
        try:
            text = node.get_content(metadata_mode=_plain())
        except Exception:  # a node type without text content
            text = getattr(node, "text", None)
        node_id = getattr(node, "node_id", None)
        if not isinstance(text, str) or not text.strip() or (node_id, text) in seen:
            continue
        seen.add((node_id, text))
        metadata = json_safe(dict(getattr(node, "metadata", None) or {}))
        chunk: dict[str, Any] = {"text": text, "metadata": metadata, "rank": rank}
        source = next((metadata[k] for k in SOURCE_KEYS if metadata.get(k)), None)
        if source is not None:
            chunk["source"] = str(source)
        if node_id:
            chunk["id"] = str(node_id)
        score = getattr(item, "score", None)
        if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
            chunk["score"] = float(score)
        out.append(chunk)
    return unique_ids(out)
