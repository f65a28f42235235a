"""A fake of OpenAI's files + batches endpoints on 127.0.0.1, for the real openai SDK.

    def test_x(batch_server):
        batch_server.polls_to_finish = 2      # a batch completes on its 2nd retrieve
        batch_server.expire_next = 1          # the next batch expires, half of it answered
        batch_server.fail = lambda body: ...  # True: that request fails (an error-file line)

Each request of a batch is answered by a `FakeOpenAIServer`'s answerer (`.chat`: scripted replies,
`auto`, habits and usage as tests/fake_openai_server.py documents them), when the batch finishes.
Endpoints: POST /v1/files (multipart, purpose=batch), GET /v1/files/{id}/content, POST /v1/batches,
GET /v1/batches/{id}, and POST /v1/chat/completions (the synchronous path, same answerer), so one
server serves both paths with the same answers. Run standalone for benchmarks:
`python tests/fake_batch_server.py --port 0` prints its base URL.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeOpenAIServer, task_of  # noqa: E402

__all__ = ["FakeBatchServer", "batch_server"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


class FakeBatchServer:
    """Scripting, recording and lifecycle. Thread-safe."""

    def __init__(self, *, port: int = 0) -> None:
        self.chat = FakeOpenAIServer()        # the answerer; its own socket is never served
        self.polls_to_finish = 1              # retrieves of a batch before it is completed
        self.hold_from: int | None = None     # the Nth batch created (1-based) and later stay in progress
        self.expire_next = 0                  # this many coming batches expire, answering their first half
        self.fail: Callable[[dict[str, Any]], bool] | None = None   # True: the request fails in its batch
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.sent: Counter[str] = Counter()   # custom_id -> times it came in a batch
        self.answered_by_task: Counter[str] = Counter()
        self.sync_calls = 0
        self._lock = threading.Lock()
        self._n = 0
        self._httpd = _Server(("127.0.0.1", port), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-batch-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> FakeBatchServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self.chat._httpd.server_close()

    def _id(self, prefix: str) -> str:
        with self._lock:
            self._n += 1
            return f"{prefix}-fake-{self._n}"

    # ------------------------------------------------------------ endpoints
    def upload(self, data: bytes) -> dict[str, Any]:
        file_id = self._id("file")
        with self._lock:
            self.files[file_id] = data
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": "input.jsonl", "purpose": "batch", "status": "processed"}

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        batch_id = self._id("batch")
        lines = [json.loads(x) for x in self.files[body["input_file_id"]].decode().splitlines() if x.strip()]
        with self._lock:
            expire = self.expire_next > 0
            self.expire_next -= expire
            for line in lines:
                self.sent[line["custom_id"]] += 1
            self.batches[batch_id] = {"lines": lines, "polls": 0, "expire": expire, "n": len(self.batches) + 1,
                                      "state": _batch(batch_id, body, len(lines))}
        return self.batches[batch_id]["state"]

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self.batches[batch_id]
            batch["polls"] += 1
            state = batch["state"]
            if state["status"] == "validating":
                state["status"] = "in_progress"
            held = self.hold_from is not None and batch["n"] >= self.hold_from
            finish = batch["polls"] >= self.polls_to_finish and state["status"] == "in_progress" and not held
        if finish:
            self._finish(batch)
        return batch["state"]

    def _finish(self, batch: dict[str, Any]) -> None:
        lines = batch["lines"]
        done = lines[: len(lines) // 2] if batch["expire"] else lines
        out, err = [], []
        for line in done:
            body = line["body"]
            if self.fail is not None and self.fail(body):
                err.append({"id": self._id("req"), "custom_id": line["custom_id"], "response": None,
                            "error": {"code": "server_error", "message": "fake failure"}})
                continue
            completion = self.chat._completion(body, self.chat._next(body))
            with self._lock:
                self.answered_by_task[task_of(body)] += 1
            out.append({"id": self._id("req"), "custom_id": line["custom_id"], "error": None,
                        "response": {"status_code": 200, "request_id": "fake", "body": completion}})
        state = batch["state"]
        if out:
            state["output_file_id"] = self.upload("".join(json.dumps(x) + "\n" for x in out).encode())["id"]
        if err:
            state["error_file_id"] = self.upload("".join(json.dumps(x) + "\n" for x in err).encode())["id"]
        state["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
        state["status"] = "expired" if batch["expire"] else "completed"
        state["expired_at" if batch["expire"] else "completed_at"] = int(time.time())

    def by_task(self) -> Counter[str]:
        return Counter(self.answered_by_task)


def _batch(batch_id: str, body: dict[str, Any], total: int) -> dict[str, Any]:
    return {"id": batch_id, "object": "batch", "endpoint": body.get("endpoint"), "errors": None,
            "input_file_id": body["input_file_id"], "completion_window": body.get("completion_window", "24h"),
            "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": int(time.time()),
            "request_counts": {"total": total, "completed": 0, "failed": 0}, "metadata": body.get("metadata")}


def _multipart_file(content_type: str, raw: bytes) -> bytes:
    boundary = re.search(r"boundary=\"?([^\";]+)", content_type)
    if boundary is None:
        raise ValueError("no multipart boundary")
    for part in raw.split(b"--" + boundary.group(1).encode()):
        head, _, data = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return data.removesuffix(b"\r\n")
    raise ValueError("no file part")


def _handler_for(server: FakeBatchServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        timeout = 60

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
            return

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            content = re.fullmatch(r".*/files/([^/]+)/content", path)
            batch = re.fullmatch(r".*/batches/([^/]+)", path)
            if content and content.group(1) in server.files:
                self._send(200, server.files[content.group(1)], "application/octet-stream")
            elif batch and batch.group(1) in server.batches:
                self._send(200, json.dumps(server.retrieve(batch.group(1))).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?", 1)[0].rstrip("/")
            if path.endswith("/files"):
                self._send(200, json.dumps(server.upload(_multipart_file(self.headers["Content-Type"], raw))).encode())
            elif path.endswith("/batches"):
                self._send(200, json.dumps(server.create(json.loads(raw))).encode())
            elif path.endswith("/chat/completions") and self.headers.get("x-veralith-probe") == "1":
                status, text = server.chat.probe_answer(json.loads(raw))   # learning, not a judge call
                self._send(status, text.encode())
            elif path.endswith("/chat/completions"):
                body = json.loads(raw)
                with server._lock:
                    server.sync_calls += 1
                self._send(200, json.dumps(server.chat._completion(body, server.chat._next(body))).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def _send(self, status: int, data: bytes, kind: str = "application/json") -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


pytest = sys.modules.get("pytest")

if pytest is not None:
    @pytest.fixture
    def batch_server() -> Iterator[FakeBatchServer]:
        server = FakeBatchServer().start()
        try:
            yield server
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--polls", type=int, default=1, help="retrieves of a batch before it completes")
    args = parser.parse_args(argv)
    server = FakeBatchServer(port=args.port)
    server.polls_to_finish = args.polls
    server.start()
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
