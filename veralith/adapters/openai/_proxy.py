"""The wrapped client: thin proxies that forward everything to the app's own OpenAI objects and
watch `chat.completions.create` / `parse` (and the streams `create(stream=True)` returns).

What the app gets back is what the SDK returned: the same completion object, the same chunk
objects in the same order (a stream is handed back inside a proxy that forwards iteration,
`with`, `close()` and every attribute). Veralith's own work around a call runs through
`counters.run`, so a failure of Veralith's is counted and warned about, never raised into the app;
the SDK's own exceptions pass through untouched.
"""

from __future__ import annotations

from typing import Any, Literal

from veralith.adapters.openai._calls import Config, Request, Streamed, counters


class Proxy:
    """Forwards every attribute it does not define to the wrapped object (`__wrapped__`)."""

    def __init__(self, wrapped: Any, config: Config) -> None:
        self.__wrapped__ = wrapped
        self._veralith_config = config

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":  # not set yet: never look it up on itself
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"<veralith-wrapped {self.__wrapped__!r}>"


class WrappedClient(Proxy):
    """An OpenAI or AsyncOpenAI client (or Azure's) whose chat completions are logged."""

    @property
    def chat(self) -> Any:
        return _Chat(self.__wrapped__.chat, self._veralith_config)

    def with_options(self, *args: Any, **kwargs: Any) -> WrappedClient:
        return WrappedClient(self.__wrapped__.with_options(*args, **kwargs), self._veralith_config)

    def copy(self, *args: Any, **kwargs: Any) -> WrappedClient:
        return WrappedClient(self.__wrapped__.copy(*args, **kwargs), self._veralith_config)

    def __enter__(self) -> WrappedClient:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self.__wrapped__.__exit__(*exc)

    async def __aenter__(self) -> WrappedClient:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.__wrapped__.__aexit__(*exc)


class _Chat(Proxy):
    @property
    def completions(self) -> Any:
        from openai.resources.chat.completions import AsyncCompletions

        completions = self.__wrapped__.completions
        kind = _AsyncCompletions if isinstance(completions, AsyncCompletions) else _Completions
        return kind(completions, self._veralith_config)


def _begin(config: Config, kwargs: dict[str, Any], name: str) -> Request | None:
    """The request, when its reply can make a trace; None to pass the call through untouched."""
    request = counters.run("an OpenAI request", lambda: Request(config, kwargs, name))
    if request is not None and not request.relevant:
        counters.count("ignored")
        return None
    return request


def _after(request: Request | None, result: Any, stream: type[_StreamBase] | None) -> Any:
    """What the app gets for `result`: the result itself (its trace logged, when it makes one), or a
    stream handed back inside `stream`'s proxy, which logs it when it ends."""
    if request is None:
        return result
    if stream is not None:
        return stream(result, request)
    counters.run("an OpenAI reply", lambda: _finish(request, result))
    return result


def _finish(request: Request, completion: Any) -> None:
    from veralith.adapters.openai._read import answer, get

    text, calls = answer(completion)
    request.finished(text, calls, completion_id=get(completion, "id"), model=get(completion, "model"), partial=False)


class _Completions(Proxy):
    def create(self, *args: Any, **kwargs: Any) -> Any:
        request = _begin(self._veralith_config, kwargs, "chat.completions.create")
        return _after(request, self.__wrapped__.create(*args, **kwargs), _Stream if kwargs.get("stream") else None)

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        request = _begin(self._veralith_config, kwargs, "chat.completions.parse")
        return _after(request, self.__wrapped__.parse(*args, **kwargs), None)


class _AsyncCompletions(Proxy):
    async def create(self, *args: Any, **kwargs: Any) -> Any:
        request = _begin(self._veralith_config, kwargs, "chat.completions.create")
        return _after(request, await self.__wrapped__.create(*args, **kwargs),
                      _AsyncStream if kwargs.get("stream") else None)

    async def parse(self, *args: Any, **kwargs: Any) -> Any:
        request = _begin(self._veralith_config, kwargs, "chat.completions.parse")
        return _after(request, await self.__wrapped__.parse(*args, **kwargs), None)


class _StreamBase:
    """What both stream proxies do with the chunks: note them, and end the request once."""

    def __init__(self, stream: Any, request: Request) -> None:
        self.__wrapped__ = stream
        self._request, self._seen, self._ended = request, Streamed(), False
        self._iterator: Any = None

    def __getattr__(self, name: str) -> Any:
        if name in ("__wrapped__", "_ended"):  # not set yet (a failed __init__, seen from __del__)
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def _note(self, chunk: Any) -> Any:
        counters.run("an OpenAI stream", lambda: self._seen.add(chunk))
        return chunk

    def _end(self, *, exhausted: bool = False, failed: bool = False) -> None:
        """The stream ended: read to its end, stopped by its consumer (partial), or failed."""
        if self._ended:
            return
        self._ended = True
        if failed:
            counters.count("skipped", "error")
            return
        seen, partial = self._seen, not (exhausted or self._seen.finished)
        if partial and not seen.parts and not seen.calls:
            counters.count("skipped", "stream_not_read")
            return
        counters.run("an OpenAI stream", lambda: self._request.finished(
            "".join(seen.parts), seen.tool_calls(), completion_id=seen.completion_id, model=seen.model,
            partial=partial))

    def __del__(self) -> None:  # dropped unfinished: what the consumer read is what it got
        self._end()


class _Reading:
    """Around reading one chunk: an exception out of it ends the stream (exhausted, or failed).
    Made per chunk, so the stream holds no cycle and goes (and logs what was read) when dropped."""

    def __init__(self, stream: _StreamBase) -> None:
        self.stream = stream

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *exc: Any) -> Literal[False]:
        if kind is not None:
            exhausted = issubclass(kind, (StopIteration, StopAsyncIteration))
            self.stream._end(exhausted=exhausted, failed=not exhausted)
        return False


class _Stream(_StreamBase):
    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = iter(self.__wrapped__)
        with _Reading(self):
            return self._note(next(self._iterator))

    def __enter__(self) -> _Stream:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(*exc)
        finally:
            self._end()

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._end()


class _AsyncStream(_StreamBase):
    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        if self._iterator is None:
            self._iterator = self.__wrapped__.__aiter__()
        with _Reading(self):
            return self._note(await self._iterator.__anext__())

    async def __aenter__(self) -> _AsyncStream:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc)
        finally:
            self._end()

    async def close(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            self._end()
