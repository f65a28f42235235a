"""CPU per judge request on the async path: the SDK's httpx transport against its aiohttp one.

One process judges the same faithfulness call N times at concurrency C through `OpenAIClient.arun`
(the whole client: request building, sending, reading the reply, usage), against
tests/fake_openai_server.py in a subprocess (its CPU is not counted), once with each HTTP transport
of the OpenAI SDK's AsyncOpenAI client: `DefaultAsyncHttpxClient` (httpx) and `DefaultAioHttpClient`
(aiohttp, the `openai[aiohttp]` extra). The two alternate ROUNDS times, so both see the same load
on a shared machine; the figure is this process's CPU time (user + system) per request, and the
ratio aiohttp / httpx per round and overall.

    .venv/bin/python benchmarks/async_transport.py [--requests 800] [--concurrency 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _client(base_url: str, transport: str) -> Any:
    import openai

    from veralith.llm.client import OpenAIClient

    client = OpenAIClient(base_url=base_url, api_key="bench", model="fake-model")
    make = openai.DefaultAioHttpClient if transport == "aiohttp" else openai.DefaultAsyncHttpxClient
    client._new_async_sdk = lambda: openai.AsyncOpenAI(   # type: ignore[method-assign]
        api_key="bench", base_url=base_url, timeout=60, max_retries=0, http_client=make())
    return client


async def _judge(client: Any, n: int, concurrency: int) -> float:
    """CPU seconds this process spent on n calls, at most `concurrency` at once."""
    from veralith.llm.tasks import FAITHFULNESS, ChunkIn, ClaimIn, FaithfulnessInput

    payload = FaithfulnessInput(query="How tall is the tower?", claims=[ClaimIn(id="k1", text="It is 330 m tall.")],
                                chunks=[ChunkIn(id="c0", text="The tower is 330 metres tall.", source=None)])
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await client.arun(FAITHFULNESS, payload)

    await client.arun(FAITHFULNESS, payload)   # learning and imports, not counted
    started = time.process_time()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(VERALITH_CACHE="false", VERALITH_SERVER_CONCURRENCY="256", VERALITH_SERVER_NOTES="off")
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "fake_openai_server.py"), "--port", "0",
                               "--auto", "--latency", "0.05"], stdout=subprocess.PIPE, text=True)
    try:
        ready = (server.stdout.readline() if server.stdout else "").split()
        assert ready and ready[0] == "READY", ready
        from veralith.config import settings

        settings.reload()
        per: dict[str, list[float]] = {"httpx": [], "aiohttp": []}
        print(f"{args.requests} requests at concurrency {args.concurrency}, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        print("| round | httpx CPU ms/request | aiohttp CPU ms/request | aiohttp / httpx |")
        print("|---:|---:|---:|---:|")
        for n in range(1, args.rounds + 1):
            for transport in ("httpx", "aiohttp"):
                cpu = asyncio.run(_judge(_client(ready[1], transport), args.requests, args.concurrency))
                per[transport].append(1000 * cpu / args.requests)
            print(f"| {n} | {per['httpx'][-1]:.2f} | {per['aiohttp'][-1]:.2f} | "
                  f"{per['aiohttp'][-1] / per['httpx'][-1]:.2f} |", flush=True)
        low, high = statistics.median(per["httpx"]), statistics.median(per["aiohttp"])
        print(f"| median | {low:.2f} | {high:.2f} | {high / low:.2f} |")
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
