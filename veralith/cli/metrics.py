"""`veralith worker --metrics-port N`: the worker's Prometheus endpoint (veralith.store.queue's figures
of the store it works on, and its own counters), served by prometheus-client's HTTP server on a thread
of its own, so a scrape never waits for judging nor judging for a scrape."""

from __future__ import annotations

from typing import Any

from veralith.store.queue import read_or_none, registry

__all__ = ["serve_worker_metrics"]


def serve_worker_metrics(store: Any, totals: Any, host: str, port: int) -> tuple[Any, int]:
    """Start serving GET /metrics on host:port (port 0: any free one); (the server, the port bound).
    An address that cannot be bound raises OSError."""
    from prometheus_client import start_http_server

    def counters() -> dict[str, tuple[str, float]]:
        return {
            "veralith_worker_judged_total": ("Results this worker stored.", totals.judged),
            "veralith_worker_failed_total": ("Evaluations this worker recorded as failed.", totals.failed),
            "veralith_worker_judge_errors_total": ("Evaluations a judge error ended or postponed (a failed "
                                                   "call, a dead judge server).", totals.judge_errors),
            "veralith_worker_given_back_total": ("Claimed traces this worker gave back to pending.",
                                                 totals.given_back),
        }

    server, _thread = start_http_server(port, addr=host, registry=registry(lambda: read_or_none(store), counters))
    return server, int(server.server_address[1])
