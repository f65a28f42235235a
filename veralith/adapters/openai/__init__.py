"""Plain OpenAI apps: wrap the app's own client, and its chat completions over retrieved context are traces.

    from openai import OpenAI
    import veralith
    from veralith.adapters.openai import wrap

    client = wrap(OpenAI(), retrieval_tools=["search_docs"])     # or AsyncOpenAI(), AzureOpenAI(), ...
    with veralith.context(docs):                                 # context the app retrieved itself
        reply = client.chat.completions.create(model=..., messages=[...])
    # or a tool-calling loop: the results of `search_docs` are the context of the final answer

`wrap()` returns a proxy; nothing of the SDK's is patched and the client object itself is left as
it was (`wrapped.__wrapped__` is it). `chat.completions.create` (streamed or not) and `parse` on a
sync or async client are watched; everything else is forwarded untouched. A completion is logged,
once, when its request carries retrieved context — the chunks of an enclosing
`veralith.context(...)` block, or the results of the retrieval tools named here (since the last
user message) — and the reply is a final answer: a reply that calls a retrieval tool is a step of
the loop, and the loop's final answer is logged with the loop's timings. A stream is logged when
it ends (what was streamed, marked partial, when the consumer stops early). Inside a
`@veralith.trace` call nothing is logged here; the trace is handed to that call. The app receives
exactly what the SDK returned, and nothing that goes wrong inside Veralith reaches it. Details:
docs/openai.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from veralith.adapters._common import VeralithAdapterWarning, checked_options

__all__ = ["VeralithAdapterWarning", "stats", "unwrap", "wrap"]


def wrap(client: Any, *, retrieval_tools: Iterable[str] | Mapping[str, Callable[[str], list[Any]] | None] = (),
         knowledge_base: str = "default", metadata: dict[str, Any] | None = None, run: str | None = None) -> Any:
    """A proxy of `client` (OpenAI, AsyncOpenAI, or any client with `chat.completions.create`) that
    logs its chat completions over retrieved context; wrapping a wrapped client re-wraps the original.

    `retrieval_tools` names the app's retrieval tools: their results (tool messages) are the
    context of the answer that follows. By default a result is read as a JSON list of texts or of
    objects with a text field (and optional id, source, metadata, score, rank), else as one chunk;
    a mapping {name: parser} gives a function from the result's text to a list of chunks instead.
    `knowledge_base`, `metadata` and `run` are passed to `veralith.log()` (metadata under the
    adapter's own keys). Raises TypeError or ValueError for bad arguments.
    """
    from veralith.adapters.openai._calls import Config
    from veralith.adapters.openai._proxy import WrappedClient

    client = unwrap(client)
    completions = getattr(getattr(client, "chat", None), "completions", None)
    if not callable(getattr(completions, "create", None)):
        raise TypeError(f"wrap() takes an OpenAI client (with chat.completions.create), got {type(client).__name__}")
    if isinstance(retrieval_tools, str):
        raise TypeError("retrieval_tools takes a list of tool names (or a mapping name -> parser), not one str")
    tools = dict(retrieval_tools) if isinstance(retrieval_tools, Mapping) else dict.fromkeys(retrieval_tools)
    for name, parser in tools.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"retrieval_tools: a tool name must be a non-empty str, got {name!r}")
        if parser is not None and not callable(parser):
            raise TypeError(f"retrieval_tools[{name!r}] must be a function (the result's text -> chunks) or None")
    return WrappedClient(client, Config(options=checked_options(knowledge_base, metadata, run), tools=tools))


def unwrap(client: Any) -> Any:
    """The app's own client behind a wrapped one (the client itself when it is not wrapped)."""
    from veralith.adapters.openai._proxy import WrappedClient

    return client.__wrapped__ if isinstance(client, WrappedClient) else client


def stats() -> dict[str, Any]:
    """Counts since the process started, over every wrapped client: `logged` traces; `skipped`
    completions over retrieved context that were not logged, with `skipped_by_reason`
    (`inside_veralith_scope`: handed to an enclosing @veralith.trace call; `error`: the call or
    its stream failed; `no_question` / `no_answer`; `stream_not_read`; `log_failed`;
    `adapter_error`); `ignored` completions without retrieved context or that only called tools."""
    from veralith.adapters.openai._calls import counters

    return counters.stats()
