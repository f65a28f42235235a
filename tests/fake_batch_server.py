"""A fake of OpenAI's files + batches endpoints on 127.0.0.1, for the real openai SDK, as strict as
the reference (tests/fake_batch_rules.py: what is refused at create and at validation).

    def test_x(batch_server):
        batch_server.polls_to_finish = 2        # retrieves in progress before a batch finalizes
        batch_server.expire_next = 1            # the next batch expires: its first half answered, the
                                                # rest `batch_expired` lines in its error file
        batch_server.cancel_next = 1            # the next batch is cancelled (cancelling, then cancelled)
        batch_server.fail = lambda body: ...    # a request's line: None/False 200; True a 500; an int or
                                                # (status, message) that status (the error file)
        batch_server.refuses = {"gpt-4o-mini": {"logprobs"}}   # a 400 for a request with that option,
                                                # in a batch and on the synchronous endpoint alike
        batch_server.unbatchable = {"gpt-x"}    # validation fails: model_not_found
        batch_server.capacity_next = 1          # the next batch fails: token_limit_exceeded
        batch_server.stall_create = threading.Event()   # POST /v1/batches makes the batch, then waits
        batch_server.stall_from = 3             # ... from the 3rd batch created on (default: the 1st)
        batch_server.expire_files()             # every output and error file deleted (30 days later)
        batch_server.max_requests, batch_server.max_bytes = 500, 1_000_000   # lowered limits

A batch goes validating -> in_progress (first retrieve; or failed, `errors` set) -> finalizing ->
completed (output and error files written), or -> expired / cancelling -> cancelled. Each request is
answered by a `FakeOpenAIServer`'s answerer (`.chat`: scripted replies, `auto`, habits and usage as
tests/fake_openai_server.py documents them). Endpoints: POST /v1/files (multipart), GET and DELETE
/v1/files/{id}, GET /v1/files/{id}/content, POST /v1/batches, GET /v1/batches (newest first,
`after` and `limit`), GET /v1/batches/{id}, POST /v1/batches/{id}/cancel, and POST
/v1/chat/completions (the synchronous path, same answerer). Counted: `sent` (custom_id -> batches
created holding it), `sync_calls`. Standalone for benchmarks: `python tests/fake_batch_server.py
--port 0 [--max-requests N --max-bytes N --refuse MODEL:OPTION]` prints its base URL.
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
import fake_batch_rules as rules  # noqa: E402
from fake_openai_server import FakeOpenAIServer, task_of  # noqa: E402

__all__ = ["FakeBatchServer", "batch_server"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


class FakeBatchServer:
    """Scripting, recording and lifecycle. Thread-safe."""

    def __init__(self, *, port: int = 0) -> None:
        self.chat = FakeOpenAIServer()        # the answerer; its own socket is never served
        self.polls_to_finish = 1              # retrieves in progress before a batch finalizes
        self.hold_from: int | None = None     # the Nth batch created (1-based) and later stay in progress
        self.expire_next = 0
        self.cancel_next = 0
        self.capacity_next = 0
        self.fail: Callable[[dict[str, Any]], Any] | None = None
        self.refuses: dict[str, set[str]] = {}
        self.unbatchable: set[str] = set()
        self.stall_create: threading.Event | None = None
        self.stall_from = 1
        self.max_requests, self.max_bytes = rules.MAX_REQUESTS, rules.MAX_BYTES
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.sent: Counter[str] = Counter()   # custom_id -> batches created holding it
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
        if self.stall_create is not None:
            self.stall_create.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self.chat._httpd.server_close()

    def _id(self, prefix: str) -> str:
        with self._lock:
            self._n += 1
            return f"{prefix}-fake-{self._n}"

    def expire_files(self) -> None:
        """Delete every batch's output and error file, as the service does 30 days after making them."""
        with self._lock:
            for file in self.files.values():
                if file["purpose"] == "batch_output":
                    file["deleted"] = True

    def lines_of(self, batch_id: str) -> list[dict[str, Any]]:
        """The request lines of a batch's input file, as uploaded."""
        data = self.files[self.batches[batch_id]["state"]["input_file_id"]]["data"]
        return [json.loads(x) for x in data.decode("utf-8").splitlines() if x.strip()]

    # ------------------------------------------------------------ endpoints
    def upload(self, data: bytes, purpose: str, filename: str = "input.jsonl") -> dict[str, Any]:
        file_id = self._id("file")
        now = int(time.time())
        with self._lock:
            self.files[file_id] = {"data": data, "purpose": purpose, "deleted": False, "filename": filename,
                                   "created_at": now}
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": now, "filename": filename,
                "purpose": purpose, "status": "processed", "expires_at": now + 30 * 86400}

    def create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        problem = rules.create_problem(body, self.files.get(str(body.get("input_file_id"))))
        if problem is not None:
            return problem[0], {"error": {"message": problem[1], "type": "invalid_request_error", "param": None,
                                          "code": None}}
        batch_id = self._id("batch")
        data = self.files[body["input_file_id"]]["data"]
        with self._lock:
            plan = {"expire": self.expire_next > 0, "cancel": self.expire_next <= 0 and self.cancel_next > 0,
                    "capacity": self.capacity_next > 0}
            self.expire_next -= plan["expire"]
            self.cancel_next -= plan["cancel"]
            self.capacity_next -= plan["capacity"]
            for x in data.decode("utf-8", "replace").splitlines():
                try:
                    self.sent[json.loads(x)["custom_id"]] += 1
                except (ValueError, KeyError, TypeError):
                    continue   # validation refuses it
            model = _first_model(data)
            self.batches[batch_id] = {"lines": [], "polls": 0, "n": len(self.batches) + 1, **plan,
                                      "state": rules.batch_object(batch_id, body, model)}
            state = dict(self.batches[batch_id]["state"])
            stall = self.stall_create is not None and len(self.batches) >= self.stall_from
        if stall and self.stall_create is not None:
            self.stall_create.wait()   # made, not yet answered: a client killed now never learns its id
        return 200, state

    def listing(self, after: str | None, limit: int) -> dict[str, Any]:
        with self._lock:
            newest = [b["state"] for b in sorted(self.batches.values(), key=lambda b: -b["n"])]
        if after is not None:
            ids = [b["id"] for b in newest]
            newest = newest[ids.index(after) + 1:] if after in ids else []
        page = [dict(b) for b in newest[:limit]]
        return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None, "has_more": len(newest) > limit}

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self.batches[batch_id]
            state = batch["state"]
        if state["status"] == "validating":
            self._validate(batch)
        with self._lock:
            status, finish = state["status"], False
            if status == "in_progress":
                batch["polls"] += 1
                held = self.hold_from is not None and batch["n"] >= self.hold_from
                if batch["polls"] >= self.polls_to_finish and not held:
                    ending = "cancelling" if batch["cancel"] else "finalizing"
                    state["status"] = "expired" if batch["expire"] else ending
                    state[f"{state['status']}_at"] = int(time.time())
                    finish = state["status"] == "expired"
            else:
                finish = status in ("finalizing", "cancelling")
        if finish:
            self._finish(batch)
        with self._lock:
            return dict(state)

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self.batches[batch_id]
            if batch["state"]["status"] in ("validating", "in_progress"):
                batch["cancel"], batch["state"]["status"] = True, "cancelling"
                batch["state"]["cancelling_at"] = int(time.time())
            return dict(batch["state"])

    def _validate(self, batch: dict[str, Any]) -> None:
        state = batch["state"]
        data = self.files[state["input_file_id"]]["data"]
        lines, errors = rules.validate(data, state["endpoint"], max_requests=self.max_requests,
                                       max_bytes=self.max_bytes, unbatchable=self.unbatchable)
        if not errors and batch["capacity"]:
            errors = [{"code": "token_limit_exceeded", "line": None, "param": None, "message": "Enqueued token "
                       f"limit reached for {state['model']} in organization org-fake. Please try again once some "
                       "in_progress batches have been completed."}]
        with self._lock:
            now = int(time.time())
            if errors:
                state.update(status="failed", failed_at=now, errors={"object": "list", "data": errors})
            else:
                batch["lines"] = lines
                state.update(status="in_progress", in_progress_at=now,
                             request_counts={"total": len(lines), "completed": 0, "failed": 0})

    def _finish(self, batch: dict[str, Any]) -> None:
        lines, state = batch["lines"], batch["state"]
        ran = lines[: len(lines) // 2] if batch["expire"] or batch["cancel"] else lines
        out, err = [], []
        for line in ran:
            status, answer = self._answer(line["body"])
            (out if status == 200 else err).append(rules.output_line(self._id("batch_req"), line["custom_id"],
                                                                     status, answer))
        code = "batch_expired" if batch["expire"] else "batch_cancelled"
        err += [rules.error_line(self._id("batch_req"), line["custom_id"], code) for line in lines[len(ran):]]
        with self._lock:
            if out:
                state["output_file_id"] = self._file(out)
            if err:
                state["error_file_id"] = self._file(err)
            state["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
            final = {"finalizing": "completed", "cancelling": "cancelled"}.get(state["status"], state["status"])
            state["status"] = final
            state[f"{final}_at"] = int(time.time())

    def _file(self, rows: list[dict[str, Any]]) -> str:
        file_id = f"file-fake-out-{len(self.files) + 1}"
        self.files[file_id] = {"data": "".join(json.dumps(x) + "\n" for x in rows).encode(), "deleted": False,
                               "purpose": "batch_output", "filename": "output.jsonl", "created_at": int(time.time())}
        return file_id

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, body) the chat-completions endpoint answers this request with."""
        refused = sorted(o for o in self.refuses.get(str(body.get("model")), set()) if o in body)
        if refused:
            return 400, _error(f"Unsupported parameter: '{refused[0]}' is not supported with this model.",
                               "unsupported_parameter", refused[0])
        scripted = self.fail(body) if self.fail is not None else None
        if scripted:
            status, message = (500, "The server had an error while processing your request.") if scripted is True \
                else (scripted, f"fake error {scripted}") if isinstance(scripted, int) else scripted
            return status, _error(message, None, None)
        completion = self.chat._completion(body, self.chat._next(body))
        with self._lock:
            self.answered_by_task[task_of(body)] += 1
        return 200, completion

    def by_task(self) -> Counter[str]:
        return Counter(self.answered_by_task)


def _error(message: str, code: str | None, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def _first_model(data: bytes) -> str | None:
    first = data.split(b"\n", 1)[0]
    try:
        return str(json.loads(first)["body"]["model"])
    except (ValueError, KeyError, TypeError):
        return None


def _multipart(content_type: str, raw: bytes) -> tuple[bytes, dict[str, str]]:
    """The file part and the other fields of a multipart/form-data body."""
    boundary = re.search(r"boundary=\"?([^\";]+)", content_type)
    if boundary is None:
        raise ValueError("no multipart boundary")
    data, fields = None, {}
    for part in raw.split(b"--" + boundary.group(1).encode()):
        head, _, value = part.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head)
        if name is None:
            continue
        value = value.removesuffix(b"\r\n")
        if name.group(1) == b"file":
            data = value
        else:
            fields[name.group(1).decode()] = value.decode()
    if data is None:
        raise ValueError("no file part")
    return data, fields


def _handler_for(server: FakeBatchServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        timeout = 60

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
            return

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            path = path.rstrip("/")
            content = re.fullmatch(r".*/files/([^/]+)/content", path)
            batch = re.fullmatch(r".*/batches/([^/]+)", path)
            if content and not server.files.get(content.group(1), {"deleted": True})["deleted"]:
                self._send(200, server.files[content.group(1)]["data"], "application/octet-stream")
            elif batch and batch.group(1) in server.batches:
                self._send(200, json.dumps(server.retrieve(batch.group(1))).encode())
            elif path.endswith("/batches"):
                args = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
                limit = int(args.get("limit", 20))
                if not 1 <= limit <= 100:
                    self._send(400, json.dumps(_error("limit must be between 1 and 100", None, "limit")).encode())
                    return
                self._send(200, json.dumps(server.listing(args.get("after"), limit)).encode())
            else:
                self._send(404, json.dumps(_error(f"No such object: {path}", None, None)).encode())

        def do_DELETE(self) -> None:
            file = re.fullmatch(r".*/files/([^/]+)", self.path.rstrip("/"))
            if file and file.group(1) in server.files:
                server.files[file.group(1)]["deleted"] = True
                self._send(200, json.dumps({"id": file.group(1), "object": "file", "deleted": True}).encode())
            else:
                self._send(404, json.dumps(_error("No such File object", None, None)).encode())

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?", 1)[0].rstrip("/")
            cancel = re.fullmatch(r".*/batches/([^/]+)/cancel", path)
            if path.endswith("/files"):
                data, fields = _multipart(self.headers["Content-Type"], raw)
                self._send(200, json.dumps(server.upload(data, fields.get("purpose", ""))).encode())
            elif cancel and cancel.group(1) in server.batches:
                self._send(200, json.dumps(server.cancel(cancel.group(1))).encode())
            elif path.endswith("/batches"):
                status, answer = server.create(json.loads(raw))
                self._send(status, json.dumps(answer).encode())
            elif path.endswith("/chat/completions") and self.headers.get("x-veralith-probe") == "1":
                status, text = server.chat.probe_answer(json.loads(raw))   # learning, not a judge call
                self._send(status, text.encode())
            elif path.endswith("/chat/completions"):
                with server._lock:
                    server.sync_calls += 1
                status, answer = server._answer(json.loads(raw))
                self._send(status, json.dumps(answer).encode())
            else:
                self._send(404, json.dumps(_error(f"No such endpoint: {path}", None, None)).encode())

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
    parser.add_argument("--polls", type=int, default=1, help="retrieves in progress before a batch finalizes")
    parser.add_argument("--max-requests", type=int, default=rules.MAX_REQUESTS)
    parser.add_argument("--max-bytes", type=int, default=rules.MAX_BYTES)
    parser.add_argument("--refuse", action="append", default=[], metavar="MODEL:OPTION")
    args = parser.parse_args(argv)
    server = FakeBatchServer(port=args.port)
    server.polls_to_finish, server.max_requests, server.max_bytes = args.polls, args.max_requests, args.max_bytes
    for pair in args.refuse:
        model, option = pair.split(":", 1)
        server.refuses.setdefault(model, set()).add(option)
    server.start()
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
