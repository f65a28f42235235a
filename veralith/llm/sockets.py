"""Closing a blocking judge request from another thread: the sync SDK's HTTP client, with a way to
shut down the connection a given thread is reading from.

A request on the sync path runs on a thread of its own (veralith.llm.retry.within) that blocks reading
the server's answer. When its deadline passes or the process cancels its calls, the waiting caller
gives up at once; `abort(thread)` then shuts the connection that thread is reading, which ends the
read (the thread ends with a connection error, the connection leaves the pool) and tells the server
the client has gone, so a server that watches for that (llama.cpp's `llama-server`) stops generating.
Closing a socket from another thread would not wake the read; `shutdown` does.

The connections are opened by a wrapper around httpcore's own network backend, in a pool with the
SDK's connection limits (1,000, 100 kept alive); everything else is the SDK's default HTTP client
(`abortable_http_client`). Behind a proxy taken from the environment the proxy's own transport is
used and `abort` finds nothing to shut: the caller still gives up at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore2
import httpx2
import openai

__all__ = ["abort", "abortable_http_client"]

_reading: dict[int, Any] = {}   # thread ident -> the socket it is reading from now
_lock = threading.Lock()


def abort(thread: int | None) -> bool:
    """Shut down the connection `thread` is reading from; False when it is reading none."""
    if thread is None:
        return False
    with _lock:
        sock = _reading.get(thread)
    if sock is None:
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:   # closed meanwhile
        return False
    return True


class _Stream(httpcore2.NetworkStream):
    """A connection whose reads say which thread is blocked on which socket."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self.inner = inner
        self.sock = inner.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        me = threading.get_ident()
        with _lock:
            _reading[me] = self.sock
        try:
            return self.inner.read(max_bytes, timeout)
        finally:
            with _lock:
                _reading.pop(me, None)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, timeout)

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _Stream(self.inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _Backend(httpcore2.SyncBackend):
    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        return _Stream(super().connect_tcp(host, port, timeout, local_address, socket_options))


# httpcore's exceptions as httpx raises them (the SDK reads httpx's: a timeout, a connection error).
_ERRORS: tuple[tuple[type[Exception], type[httpx2.HTTPError]], ...] = (
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout), (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout), (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.TimeoutException, httpx2.TimeoutException), (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError), (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.ProxyError, httpx2.ProxyError), (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError), (httpcore2.ProtocolError, httpx2.ProtocolError),
    (httpcore2.NetworkError, httpx2.NetworkError))


@contextlib.contextmanager
def _as_httpx() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = next((theirs for ours, theirs in _ERRORS if isinstance(exc, ours)), None)
        if mapped is None:
            raise
        raise mapped(str(exc)) from exc


class _Body(httpx2.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self.stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self.stream

    def close(self) -> None:
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()


class _Transport(httpx2.BaseTransport):
    """httpx's default transport (the SDK's connection limits) over an httpcore connection pool whose
    connections are opened through _Backend, so `abort` can shut them."""

    def __init__(self) -> None:
        self.pool = httpcore2.ConnectionPool(ssl_context=httpx2.create_ssl_context(), max_connections=1000,
                                             max_keepalive_connections=100, keepalive_expiry=5.0,
                                             network_backend=_Backend())

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        sent = httpcore2.Request(method=request.method, url=httpcore2.URL(
            scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
            target=request.url.raw_path), headers=request.headers.raw, content=request.stream,
            extensions=request.extensions)
        with _as_httpx():
            answer = self.pool.handle_request(sent)
        assert isinstance(answer.stream, Iterable)
        return httpx2.Response(status_code=answer.status, headers=answer.headers, stream=_Body(answer.stream),
                               extensions=answer.extensions)

    def close(self) -> None:
        self.pool.close()


def abortable_http_client() -> httpx2.Client:
    """The SDK's default sync HTTP client (its timeouts and redirects), over `_Transport`."""
    return openai.DefaultHttpxClient(transport=_Transport())
