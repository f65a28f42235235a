"""Reading OpenAI chat requests and replies: the question, the retrieval tools' results, the answer.

Messages may be plain dicts (as apps write them) or the SDK's own objects (as apps append the
assistant message of a reply to their list); every function here reads both and returns None or
an empty value on an unexpected shape, never raising.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

# What turns a retrieval tool's result (the tool message's text) into chunks.
Parser = Callable[[str], list[Any]]
_TEXT_KEYS = ("text", "page_content", "content")


def get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def text_of(content: Any) -> str | None:
    """A message's content as text: a string, or the text parts of a list of parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [get(part, "text") for part in content if get(part, "type") == "text"]
        return "\n".join(t for t in texts if isinstance(t, str)) or None
    return None


def last_user(messages: list[Any]) -> tuple[int, str | None]:
    """(index, text) of the last user message; (-1, None) when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if get(messages[i], "role") == "user":
            return i, text_of(get(messages[i], "content"))
    return -1, None


def tool_results(messages: list[Any], tools: Mapping[str, Parser | None]) -> tuple[list[dict[str, Any]], list[str],
                                                                                   list[str]]:
    """The results of the retrieval tools named in `tools`, since the last user message: (chunks,
    the tool call ids they answer, the tool names), each tool's result parsed by its parser (None:
    `parse_result`)."""
    start, _ = last_user(messages)
    names: dict[Any, Any] = {}
    chunks: list[dict[str, Any]] = []
    ids: list[str] = []
    used: list[str] = []
    for message in messages[start + 1:]:
        role = get(message, "role")
        if role == "assistant":
            for call in get(message, "tool_calls") or []:
                names[get(call, "id")] = get(get(call, "function"), "name")
        elif role == "tool":
            call_id = get(message, "tool_call_id")
            name = names.get(call_id)
            text = text_of(get(message, "content"))
            if not isinstance(name, str) or name not in tools or text is None:
                continue
            parser = tools[name]
            found = parse_result(text) if parser is None else [_chunk(c) for c in parser(text)]
            chunks += [c for c in found if c is not None]
            ids.append(str(call_id))
            if name not in used:
                used.append(name)
    return chunks, ids, used


def parse_result(text: str) -> list[dict[str, Any]]:
    """A retrieval tool's result as chunks: a JSON list of texts, or of objects with a text field
    ("text", "page_content" or "content", and optionally id, source, metadata, score, rank), is one
    chunk per item ranked in order; anything else is one chunk holding the whole result."""
    try:
        value = json.loads(text)
    except ValueError:
        return [{"text": text}]
    if not isinstance(value, list) or not value:
        return [{"text": text}]
    chunks = []
    for rank, item in enumerate(value, start=1):
        chunk = _chunk(item)
        if chunk is None:
            return [{"text": text}]
        chunk.setdefault("rank", rank)
        chunks.append(chunk)
    return chunks


def _chunk(item: Any) -> dict[str, Any] | None:
    """One chunk from a text or an object with a text field, its other fields kept when well typed."""
    if isinstance(item, str):
        return {"text": item}
    if not isinstance(item, Mapping):
        return None
    text = next((item[k] for k in _TEXT_KEYS if isinstance(item.get(k), str)), None)
    if text is None:
        return None
    chunk: dict[str, Any] = {"text": text}
    if isinstance(item.get("id"), (str, int)) and not isinstance(item.get("id"), bool):
        chunk["id"] = str(item["id"])
    if isinstance(item.get("source"), str):
        chunk["source"] = item["source"]
    if isinstance(item.get("metadata"), Mapping):
        chunk["metadata"] = dict(item["metadata"])
    score = item.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
        chunk["score"] = float(score)
    rank = item.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 1:
        chunk["rank"] = rank
    return chunk


def asks_for(request_tools: Any, names: Mapping[str, Any]) -> bool:
    """Whether the request offers the model one of the retrieval tools."""
    return any(get(get(tool, "function"), "name") in names for tool in request_tools or [])


def answer(completion: Any) -> tuple[str | None, list[tuple[str, str]]]:
    """(the first choice's text, its tool calls as (id, name)); a refusal's text is its answer."""
    choices = get(completion, "choices") or []
    if not choices:
        return None, []
    message = get(choices[0], "message")
    calls = [(str(get(c, "id")), str(get(get(c, "function"), "name"))) for c in get(message, "tool_calls") or []]
    content = get(message, "content")
    if not isinstance(content, str):
        content = get(message, "refusal")
    return (content if isinstance(content, str) else None), calls
