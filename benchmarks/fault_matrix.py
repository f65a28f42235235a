"""The fault matrix of issue 35: each fault a fleet meets, on both stores, and what became of every trace.

    .venv/bin/python benchmarks/fault_matrix.py [--store sqlite|postgres|both] [--only NAME ...] [--markdown]

Each scenario runs real processes (apps that call `veralith.log`, `veralith worker`, `eval`, `resume`,
`migrate`, `import`) against a fresh store (a SQLite file, or a database of a throwaway PostgreSQL
server from Debian's package, as the tests start one), applies its fault, lets the fleet recover
(workers and `veralith resume`, as an operator would), then audits the store. Every trace an app logs
carries its own marker (metadata {"tag", "seq"}), so the audit can tell whether the id `log()`
returned names the trace it was returned for. Columns:

- returned: ids `log()` (or `eval`) handed back; stored: of those, stored under that id with their own
  marker; judged once / twice: with one outcome, or an outcome replaced by a second (`trace_history`);
  stuck: `running` after the recovery; lost: returned and not stored under its id with its marker;
  set aside: in the dead-letter place; worst log(): the slowest `log()` call, ms; exits: each
  process's exit code, and whether it is the documented one.

Goal (issue 35): 0 lost, 0 judged twice, 0 stuck, worst log() < 50 ms, every exit as documented, and
the password set for the run seen nowhere. Every scenario's store URL carries a password (PostgreSQL:
as user info and as ?password=; the tests' server trusts local connections, so it is accepted and
ignored) and its environment an API key, both SECRET; after the scenario, every output is searched for
it (`Fleet.leaks`): each process's stdout and stderr, the apps' lines, every text column of every
table of the store (stored errors, dead letters), and the web view's pages.
The judge is the offline backend (no server) unless a scenario needs a server (a dead one, or the
scripted fake OpenAI server, tests/fake_openai_server.py). Needs the `postgres` extra and Debian's
postgresql package for the PostgreSQL column; prints one JSON object (or a Markdown table).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

QUERY = "What is the capital of France?"
CONTEXT = ["Paris is the capital of France."]
RESPONSE = "Paris is the capital of France."
LOG_BOUND_MS = 50.0
# The password (and API key) of every scenario's store: it must appear in none of its outputs.
SECRET = "fm-secret-" + secrets.token_hex(8)

# An app: logs N traces, one JSON line per call (id or refusal, and the call's milliseconds), flushed at
# once so a kill -9 loses no line; then drains. argv: tag, count, pause between calls (s), seqs to poison.
APP = r"""
import json, os, sys, time
import veralith
from veralith.store import ops
tag, count, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
poison = {int(x) for x in sys.argv[4].split(",") if x} if len(sys.argv) > 4 else set()
for seq in range(count):
    query = f"What is the capital of France? ({tag} {seq})" + ("\x00" if seq in poison else "")
    started = time.perf_counter()
    try:
        trace_id = veralith.log(query, ["Paris is the capital of France."], "Paris is the capital of France.",
                                metadata={"tag": tag, "seq": seq})
        line = {"seq": seq, "id": trace_id}
    except Exception as exc:
        line = {"seq": seq, "refused": type(exc).__name__, "why": str(exc)[:200]}
    line["ms"] = (time.perf_counter() - started) * 1000
    print(json.dumps(line), flush=True)
    if pause:
        time.sleep(pause)
print(json.dumps({"left": veralith.shutdown(wait=True, timeout=float(os.environ.get("FM_DRAIN_S", "20")))}),
      flush=True)
"""


@dataclass
class Row:
    fault: str
    store: str
    returned: int = 0
    stored: int = 0
    judged_once: int = 0
    judged_twice: int = 0
    stuck: int = 0
    lost: int = 0
    set_aside: int = 0
    worst_log_ms: float | None = None
    leaks: list[str] = field(default_factory=list)         # outputs in which SECRET was found
    exits: dict[str, Any] = field(default_factory=dict)     # process: exit code
    expected: dict[str, Any] = field(default_factory=dict)  # process: documented exit code
    note: str = ""

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.judged_twice == 0 and self.stuck == 0 and not self.leaks
                and (self.worst_log_ms is None or self.worst_log_ms < LOG_BOUND_MS)
                and all(self.exits.get(name) == code for name, code in self.expected.items()))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Fleet:
    """One scenario's store, environment and processes."""

    def __init__(self, kind: str, pg: Any, tmp: Path) -> None:
        self.kind, self.pg, self.tmp = kind, pg, tmp
        self.url = (_with_password(pg.new_database()) if kind == "postgres" else f"sqlite:///{tmp / 'v.db'}")
        self.apps: dict[str, list[dict[str, Any]]] = {}
        self.outputs: list[tuple[str, str]] = []   # (what, text) of every process run to completion
        self._readers: dict[str, threading.Thread] = {}
        base = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
        self.env = {**base, "PYTHONPATH": str(REPO), "VERALITH_BACKEND": "local", "VERALITH_DB_URL": self.url,
                    "VERALITH_SPOOL_DIR": str(tmp / "spool"), "VERALITH_SHUTDOWN_TIMEOUT_S": "20",
                    "VERALITH_API_KEY": SECRET}

    def cli(self, *args: str, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "veralith.cli", *args], env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, cwd=self.tmp)
        self.outputs.append((f"veralith {' '.join(args)}", done.stdout + done.stderr))
        return done

    def start_cli(self, *args: str, env: dict[str, str] | None = None, name: str = "") -> subprocess.Popen[str]:
        log = open(self.tmp / f"{name or args[0]}-{time.monotonic_ns()}.err", "w")   # noqa: SIM115
        return subprocess.Popen([sys.executable, "-m", "veralith.cli", *args], env={**self.env, **(env or {})},
                                stdout=subprocess.DEVNULL, stderr=log, text=True, cwd=self.tmp)

    def start_app(self, tag: str, count: int, *, pause: float = 0.0, poison: str = "",
                  env: dict[str, str] | None = None, prelude: str = "") -> subprocess.Popen[str]:
        """An app logging `count` traces; its lines are read as they come (`self.apps[tag]`)."""
        proc = subprocess.Popen([sys.executable, "-c", prelude + APP, tag, str(count), str(pause), poison],
                                env={**self.env, **(env or {})}, stdout=subprocess.PIPE,
                                stderr=open(self.tmp / f"app-{tag}.err", "w"), text=True, cwd=self.tmp)  # noqa: SIM115
        lines: list[dict[str, Any]] = self.apps.setdefault(tag, [])

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{"):
                    lines.append(json.loads(line))
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self._readers[tag] = reader
        return proc

    def spool_folder(self) -> Path:
        """Where this host's spool of the store is (veralith.work.spooler)."""
        return self.tmp / "v.db.spool" if self.kind == "sqlite" else self.tmp / "spool"

    def logged(self, tag: str) -> int:
        return sum(1 for line in self.apps.get(tag, []) if "id" in line)

    def finish_app(self, tag: str, proc: subprocess.Popen[str], timeout: float = 300) -> int | None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._readers[tag].join(30)
        return proc.returncode

    def sql(self, statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        from veralith.store import open_store

        def run(db: Any) -> list[tuple[Any, ...]]:
            cursor = db.execute(statement, params or [])
            return [tuple(r) for r in cursor.fetchall()]
        return open_store(self.url).read(run)

    def drain(self, timeout: float = 120) -> int:
        """What an operator does after a fault: `veralith resume` (spools of dead processes moved in,
        pending and abandoned traces judged); its exit code."""
        return self.cli("resume", timeout=timeout).returncode

    def audit(self, row: Row) -> Row:
        rows = {int(r[0]): (r[1], r[2]) for r in self.sql("SELECT id, status, metadata FROM traces")}
        twice = {int(r[0]) for r in self.sql("SELECT DISTINCT trace_id FROM trace_history")}
        latencies = []
        for tag, lines in self.apps.items():
            for line in lines:
                if "id" not in line:
                    continue
                if line.get("ms") is not None:   # None: stored by a command, not log()
                    latencies.append(float(line["ms"]))
                row.returned += 1
                found = rows.get(int(line["id"]))
                if found is None or json.loads(found[1] or "{}") != {"tag": tag, "seq": line["seq"]}:
                    row.lost += 1
                    continue
                row.stored += 1
                row.judged_twice += int(line["id"]) in twice
                row.judged_once += found[0] == "done" and int(line["id"]) not in twice
        row.stuck = sum(1 for status, _ in rows.values() if status == "running")
        row.set_aside = self._set_aside()
        row.leaks = self.leaks()
        if latencies:
            row.worst_log_ms = round(max(latencies), 1)
            # Which call: a process's first (imports, its first segment) or one under the fault.
            worst = max((line for lines in self.apps.values() for line in lines
                         if "id" in line and line.get("ms") is not None), key=lambda x: x["ms"])
            row.note = (row.note + f"; worst log() is call {worst['seq']}").lstrip("; ")
        return row

    def leaks(self) -> list[str]:
        """Where SECRET shows: process outputs, the apps' lines and stderr files, the store's rows,
        the web view's pages. Empty is the goal."""
        seen = [what for what, text in self.outputs if SECRET in text]
        seen += [f"app {tag} line" for tag, lines in self.apps.items() if SECRET in json.dumps(lines)]
        seen += [path.name for path in self.tmp.glob("*.err") if SECRET in path.read_text(errors="replace")]
        seen += [f"table {table}" for table, text in self._stored_text() if SECRET in text]
        seen += [f"page {path}" for path, text in self._pages() if SECRET in text]
        return seen

    def _stored_text(self) -> Iterator[tuple[str, str]]:
        listing = ("SELECT name FROM sqlite_master WHERE type = 'table'" if self.kind == "sqlite" else
                   "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        for (table,) in self.sql(listing):
            yield table, "\n".join(map(str, self.sql(f'SELECT * FROM "{table}"')))

    def _pages(self) -> Iterator[tuple[str, str]]:
        try:
            from starlette.testclient import TestClient

            from veralith.web import create_app
        except ImportError:   # the web extra absent: no pages to search
            return
        failed = [r[0] for r in self.sql("SELECT id FROM traces WHERE status = 'error' ORDER BY id LIMIT 5")]
        with TestClient(create_app(self.url), base_url="http://127.0.0.1:8765") as client:
            for path in ["/", "/traces", "/traces?status=error", *(f"/traces/{i}" for i in failed)]:
                yield path, client.get(path).text

    def _set_aside(self) -> int:
        try:
            return int(self.sql("SELECT COUNT(*) FROM dead_letters")[0][0])
        except Exception:   # a store without the dead-letter place
            return 0


# -- the scenarios ------------------------------------------------------------------------------------

Scenario = Callable[[Fleet, Row], None]
SCENARIOS: dict[str, tuple[str, Scenario]] = {}


def scenario(name: str, fault: str) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[name] = (fault, fn)
        return fn
    return register


@scenario("nul", "1. a NUL character in one logged trace")
def _nul(fleet: Fleet, row: Row) -> None:
    row.exits["app"] = fleet.finish_app("a", fleet.start_app("a", 10, poison="3"))
    row.exits["app later"] = fleet.finish_app("b", fleet.start_app("b", 5))
    row.exits["worker --once"] = fleet.cli("worker", "--once").returncode
    row.exits["resume"] = fleet.drain()
    row.expected = {"app": 0, "app later": 0, "worker --once": 0, "resume": 0}
    refused = [line for line in fleet.apps["a"] if "refused" in line]
    row.note = f"log() refused {len(refused)}: {refused[0]['refused'] if refused else '-'}"


@scenario("outage", "4. the store away for 15 s while 3 workers judge and an app logs")
def _outage(fleet: Fleet, row: Row) -> None:
    workers = [fleet.start_cli("worker", "--concurrency", "2", name="worker") for _ in range(3)]
    # The fault is an outage while workers judge: each has opened the store and said so (a worker
    # started while the store is away exits 2 with one line, as documented: its supervisor restarts it).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(
            "judging the traces of" in p.read_text(errors="replace") for p in fleet.tmp.glob("worker-*.err")) < 3:
        time.sleep(0.2)
    app = fleet.start_app("a", 300, pause=0.01, env={"VERALITH_EVALUATE": "remote", "FM_DRAIN_S": "60"})
    time.sleep(2.0)
    with _store_away(fleet, 15.0):
        pass
    row.exits["app"] = fleet.finish_app("a", app)
    _wait_judged(fleet, 120)
    for w in workers:
        w.send_signal(signal.SIGTERM)
    row.exits["workers (SIGTERM)"] = sorted({w.wait(timeout=60) for w in workers})
    row.expected = {"app": 0, "workers (SIGTERM)": [0]}


@scenario("dead-judge", "5. a dead judge server: worker --once, resume")
def _dead_judge(fleet: Fleet, row: Row) -> None:
    dead = {"VERALITH_BACKEND": "openai", "VERALITH_BASE_URL": f"http://127.0.0.1:{_free_port()}/v1",
            "VERALITH_JUDGE_MODEL": "m", "VERALITH_PRICING": '{"*": {"input": 0, "output": 0}}'}
    row.exits["app"] = fleet.finish_app("a", fleet.start_app("a", 8, env={"VERALITH_EVALUATE": "remote"}))
    started = time.monotonic()
    row.exits["worker --once"] = fleet.cli("worker", "--once", env=dead, timeout=120).returncode
    row.exits["resume"] = fleet.cli("resume", env=dead, timeout=120).returncode
    row.note = f"both drains ended in {time.monotonic() - started:.0f} s"
    row.exits["resume, judge back"] = fleet.drain()
    row.expected = {"app": 0, "worker --once": 2, "resume": 2, "resume, judge back": 0}


@scenario("pg-down-fresh-host", "6. log() on a fresh host while the store is down")
def _fresh_host(fleet: Fleet, row: Row) -> None:
    with _store_away(fleet, None):
        app = fleet.start_app("a", 20, env={"FM_DRAIN_S": "2"})
        row.exits["app"] = fleet.finish_app("a", app, timeout=120)
    row.exits["resume"] = fleet.drain()
    row.expected = {"app": 0, "resume": 0}


@scenario("vanished-segment", "7. a spool segment taken by another host's recovery while the store is away")
def _vanished_segment(fleet: Fleet, row: Row) -> None:
    # A ship round fails (the store away) and leaves the app's retired segments to try again; then another
    # host takes them. SQLite's lock is waited for 1 s (not 60), PostgreSQL's connection 10 s: a round each.
    away_s = 4.0 if fleet.kind == "sqlite" else 16.0
    app = fleet.start_app("a", 400, pause=0.05, env={"VERALITH_BUSY_TIMEOUT_S": "1", "FM_DRAIN_S": "120"})
    deadline = time.monotonic() + 60
    # Until the app ships: its store is open, and its segments are retired at every ship round.
    while time.monotonic() < deadline and not (fleet.logged("a") >= 20
                                               and fleet.sql("SELECT COUNT(*) FROM traces")[0][0]):
        time.sleep(0.1)
    folder, taken = fleet.spool_folder(), fleet.tmp / "other-host"
    taken.mkdir()
    with _store_away(fleet, None):
        time.sleep(away_s - 1.0)
        ours = sorted((p for p in folder.glob(f"*__{app.pid}__*.seg") if b'"seq"' in p.read_bytes()), key=_made)
        for path in ours[:-1]:   # the retired ones (the newest is being written)
            path.rename(taken / path.name)
        time.sleep(1.0)
    row.exits["app"] = fleet.finish_app("a", app)
    moved = sum(len(spool_lines(p)) for p in taken.iterdir())
    for path in taken.iterdir():   # the other host ships them: here, `resume` finds them left by a process gone
        path.rename(folder / path.name)
    row.exits["resume"] = fleet.drain()
    # What the app's shutdown() says is left: the traces in the segments taken (its own, still to judge), no more.
    row.exits["app's shutdown(): left"] = next((line["left"] for line in fleet.apps["a"] if "left" in line), None)
    row.expected = {"app": 0, "resume": 0, "app's shutdown(): left": moved}
    row.note = f"{moved} trace(s) in the {len(ours[:-1])} segment(s) taken"


def _made(path: Path) -> int:
    """When a segment was created (its name: <host>__<pid>__<token>.<ns>-<n>.seg)."""
    return int(path.name.rsplit(".", 2)[-2].split("-")[0])


def spool_lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\0")[0].splitlines() if line]


# A full disk, met when log() needs a new spool segment: segments of 64 KB (about 200 traces) instead of
# 4 MB so that it is met within the run, and the disk full while the file `disk-full` exists.
_FULL_DISK = """
import errno, os, veralith.work.spool as _spool
_spool.Spool.__init__.__defaults__ = (64 << 10,)
_allocate = _spool._allocate
def _full(fd, size):
    if os.path.exists("disk-full"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    _allocate(fd, size)
_spool._allocate = _full
"""


@scenario("spool-disk-full", "10. the spool's disk full for 2 s while an app logs")
def _spool_disk_full(fleet: Fleet, row: Row) -> None:
    app = fleet.start_app("a", 1500, pause=0.002, prelude=_FULL_DISK)
    deadline = time.monotonic() + 60
    while fleet.logged("a") < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    flag = fleet.tmp / "disk-full"
    flag.touch()
    time.sleep(2.0)
    flag.unlink()
    row.exits["app"] = fleet.finish_app("a", app)
    row.exits["resume"] = fleet.drain()
    refused = [line for line in fleet.apps["a"] if "refused" in line]
    row.exits["log() refusals"] = sorted({line["refused"] for line in refused})
    row.expected = {"app": 0, "resume": 0, "log() refusals": ["WritesStopped"]}
    row.note = f"log() refused {len(refused)} while the disk was full" + (f": {refused[0]['why'][:90]}"
                                                                          if refused else "")


@scenario("clock-skew", "9. a worker whose clock runs 400 s ahead")
def _clock_skew(fleet: Fleet, row: Row) -> None:
    row.exits["app"] = fleet.finish_app("a", fleet.start_app("a", 40, env={"VERALITH_EVALUATE": "remote"}))
    ahead = "import time; _t = time.time; time.time = lambda: _t() + 400\n"
    skewed = subprocess.Popen([sys.executable, "-c", ahead + "from veralith.cli import main; main()", "worker",
                               "--once", "--concurrency", "2"], env=fleet.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, cwd=fleet.tmp)
    true_clock = fleet.start_cli("worker", "--once", "--concurrency", "2", name="worker")
    row.exits["skewed worker"], row.exits["worker"] = skewed.wait(timeout=300), true_clock.wait(timeout=300)
    row.expected = {"app": 0, "skewed worker": 0, "worker": 0}


@scenario("migrate-in-use", "2. migrate into a store an app is logging into")
def _migrate_in_use(fleet: Fleet, row: Row) -> None:
    source = _history(fleet, 600)
    app = fleet.start_app("a", 300, pause=0.01)
    time.sleep(1.5)                    # the app's host holds a block of ids (PostgreSQL) or ids taken ahead
    done = fleet.cli("migrate", "--from", source, "--to", fleet.url)
    row.exits["migrate"] = done.returncode
    row.exits["app"] = fleet.finish_app("a", app)
    row.exits["resume"] = fleet.drain()
    row.expected = {"migrate": 0, "app": 0, "resume": 0}
    copied = fleet.sql("SELECT COUNT(*) FROM traces WHERE metadata LIKE ?", ['%"history"%'])[0][0]
    renumbered = next((line for line in done.stdout.splitlines() if line.startswith("copied")), "")
    row.note = f"copied {copied} of 600; {renumbered.split('(', 1)[-1].rstrip(')')}"


@scenario("migrate-conflicts", "3. migrate: conflicting external ids, two at once, killed half-way")
def _migrate_conflicts(fleet: Fleet, row: Row) -> None:
    source = _history(fleet, 20000, external=True)
    records = fleet.tmp / "ten.jsonl"
    records.write_text("".join(json.dumps({"id": f"r{i}", "query": f"{QUERY} (eval {i})", "context": CONTEXT,
                                           "response": RESPONSE}) + "\n" for i in range(10)))
    row.exits["eval (r0-r9)"] = fleet.cli("eval", str(records)).returncode
    app = fleet.start_app("a", 200, pause=0.01)
    row.exits["migrate --on-conflict fail"] = fleet.cli("migrate", "--from", source, "--to", fleet.url,
                                                        "--on-conflict", "fail").returncode
    first = subprocess.Popen([sys.executable, "-m", "veralith.cli", "migrate", "--from", source, "--to", fleet.url],
                             env=fleet.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=fleet.tmp)
    assert first.stderr is not None
    for line in first.stderr:          # copying: its first batch is in
        if " copied" in line and not line.strip().endswith(" 0 copied"):
            break
    second = fleet.cli("migrate", "--from", source, "--to", fleet.url)
    row.exits["second migrate at once"] = second.returncode
    first.send_signal(signal.SIGKILL)
    row.exits["migrate (SIGKILL)"] = first.wait(timeout=60)
    half = fleet.sql("SELECT COUNT(*) FROM traces WHERE metadata LIKE ?", ['%"history"%'])[0][0]
    again = fleet.cli("migrate", "--from", source, "--to", fleet.url)
    row.exits["migrate again"] = again.returncode
    row.exits["app"] = fleet.finish_app("a", app)
    row.exits["resume"] = fleet.drain()
    row.expected = {"eval (r0-r9)": 0, "migrate --on-conflict fail": 2, "second migrate at once": 2,
                    "migrate (SIGKILL)": -9, "migrate again": 0, "app": 0, "resume": 0}
    copied = fleet.sql("SELECT COUNT(*), COUNT(DISTINCT uid) FROM traces WHERE metadata LIKE ?", ['%"history"%'])[0]
    skipped = sum(1 for line in again.stderr.splitlines() if line.startswith("skipped:"))
    tracebacks = sum("Traceback" in text for text in (second.stderr, again.stderr))
    row.note = (f"copied {copied[0]} of 20000 ({copied[1]} distinct; {half} before the kill), {skipped} conflicts "
                f"reported one by one, second run: {second.stderr.strip().splitlines()[-1][:90]!r}, "
                f"tracebacks {tracebacks}")


@scenario("counter-deleted", "8. the id counter file deleted while two apps log")
def _counter_deleted(fleet: Fleet, row: Row) -> None:
    counter = (Path(fleet.url[len("sqlite:///"):] + ".spool") if fleet.kind == "sqlite" else fleet.tmp / "spool")
    first = fleet.start_app("a", 500, pause=0.005)
    deadline = time.monotonic() + 60
    while fleet.logged("a") < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    (counter / "next-id").unlink()
    second = fleet.start_app("b", 500, pause=0.005)
    row.exits["app a"], row.exits["app b"] = fleet.finish_app("a", first), fleet.finish_app("b", second)
    row.exits["resume"] = fleet.drain()
    row.expected = {"app a": 0, "app b": 0, "resume": 0}
    both = {line["id"] for line in fleet.apps["a"] if "id" in line} & {
        line["id"] for line in fleet.apps["b"] if "id" in line}
    row.note = f"ids returned to both apps: {len(both)}"


@scenario("restore", "17. the store restored from a backup while two hosts log")
def _restore(fleet: Fleet, row: Row) -> None:
    """Host a logs across a restore: the traces stored after the backup are gone and the sequence
    (PostgreSQL, with its record of blocks) or the counter file (SQLite) is back where it was then.
    Host b (another spool folder on PostgreSQL: another host; SQLite: another process) starts after
    it. Traces the restore removed are not counted as lost; an id returned twice, or naming another
    trace, is."""
    postgres = fleet.kind == "postgres"
    first = fleet.start_app("a", 400, pause=0.01)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:   # a logs from a block of its own, and has stored traces of it
        counted = [line["id"] for line in fleet.apps["a"] if "id" in line and line["id"] < (1 << 62)]
        if len(counted) >= 30 and fleet.sql("SELECT COUNT(*) FROM traces")[0][0] >= 20:
            break
        time.sleep(0.05)
    keep = 0 if postgres else min(counted) + 9   # the backup: taken before a's block / after its 10th id
    before = len(fleet.apps["a"])
    from veralith.store import open_store

    def put_back(db: Any) -> None:
        with db.write():
            db.execute("DELETE FROM traces WHERE id > ?", [keep])
            if postgres:
                db.execute("DELETE FROM trace_id_blocks")
                db.execute("SELECT setval('veralith_trace_ids', 1, false)")
    open_store(fleet.url).write(put_back)
    if not postgres:
        from veralith.work.ids import _check

        nxt, end = keep + 1, (1 << 62) - 1
        (fleet.spool_folder() / "next-id").write_bytes(f"{nxt:020d}\n{end:020d}\n{_check(nxt, end):010d}\n".encode())
    if postgres:
        time.sleep(3.0)   # a's next shipping round (docs/sdk.md: the window after a restore)
    second = fleet.start_app("b", 300, pause=0.01, env={"VERALITH_SPOOL_DIR": str(fleet.tmp / "spool-b")}
                             if postgres else None)
    row.exits["app a"], row.exits["app b"] = fleet.finish_app("a", first), fleet.finish_app("b", second)
    row.exits["resume"] = fleet.drain(timeout=600)   # what the apps left pending is judged here
    both = {line["id"] for line in fleet.apps["a"] if "id" in line} & {
        line["id"] for line in fleet.apps["b"] if "id" in line}
    row.exits["ids returned to both hosts"] = len(both)
    row.expected = {"app a": 0, "app b": 0, "resume": 0, "ids returned to both hosts": 0}
    stored = {int(r[0]) for r in fleet.sql("SELECT id FROM traces")}
    removed = [line for line in fleet.apps["a"][:before] if "id" in line and line["id"] not in stored]
    fleet.apps["a"] = [line for line in fleet.apps["a"] if not any(line is x for x in removed)]
    b_counted = sum(1 for line in fleet.apps["b"] if "id" in line and line["id"] < (1 << 62))
    row.note = (f"removed by the restore (not counted): {len(removed)} of a's first {before}; "
                f"b's ids from a block: {b_counted}")


@scenario("kill-app", "15. kill -9 of an app mid-burst")
def _kill_app(fleet: Fleet, row: Row) -> None:
    app = fleet.start_app("a", 3000)
    deadline = time.monotonic() + 60
    while fleet.logged("a") < 500 and time.monotonic() < deadline:   # mid-burst: some spooled, some shipped
        time.sleep(0.01)
    app.send_signal(signal.SIGKILL)
    row.exits["app (SIGKILL)"] = fleet.finish_app("a", app)
    row.exits["resume"] = fleet.drain()
    row.expected = {"app (SIGKILL)": -9, "resume": 0}


@scenario("kill-worker", "16. kill -9 of a worker mid-batch")
def _kill_worker(fleet: Fleet, row: Row) -> None:
    row.exits["app"] = fleet.finish_app("a", fleet.start_app("a", 200, env={"VERALITH_EVALUATE": "remote"}))
    slow = {"VERALITH_BACKEND": "local"}
    doomed = fleet.start_cli("worker", "--concurrency", "4", env=slow, name="worker")
    time.sleep(2.0)
    doomed.send_signal(signal.SIGKILL)
    row.exits["worker (SIGKILL)"] = doomed.wait(timeout=60)
    row.exits["worker --once"] = fleet.cli("worker", "--once").returncode
    row.expected = {"app": 0, "worker (SIGKILL)": -9, "worker --once": 0}


@scenario("runs-after-outage", "12. runs after a judge outage: eval, then resume")
def _runs_after_outage(fleet: Fleet, row: Row) -> None:
    dead = {"VERALITH_BACKEND": "openai", "VERALITH_BASE_URL": f"http://127.0.0.1:{_free_port()}/v1",
            "VERALITH_JUDGE_MODEL": "m", "VERALITH_PRICING": '{"*": {"input": 0, "output": 0}}'}
    traces = fleet.tmp / "traces.jsonl"
    traces.write_text("".join(json.dumps({"query": f"{QUERY} ({i})", "context": CONTEXT, "response": RESPONSE,
                                          "metadata": {"tag": "eval", "seq": i}}) + "\n" for i in range(12)))
    row.exits["eval, judge dead"] = fleet.cli("eval", str(traces), "--run-name", "before", env=dead).returncode
    row.exits["resume"] = fleet.drain()
    row.exits["eval, judge back"] = fleet.cli("eval", str(traces), "--run-name", "after").returncode
    runs = {r["name"]: r for r in json.loads(fleet.cli("runs", "--json").stdout or "[]")}
    compared = json.loads(fleet.cli("compare", "before", "after", "--json").stdout or "{}")
    before = runs.get("before", {})
    judged = before["n_traces"] - before["n_unevaluated"] if "n_traces" in before else None
    row.note = f"run 'before' judged {judged} of 12 after resume; compare: {_compare_summary(compared)}"
    row.exits["runs: 'before' judged"] = judged
    row.expected = {"eval, judge dead": 2, "resume": 0, "eval, judge back": 0, "runs: 'before' judged": 12}
    # the traces are eval's, not an app's: audited through their markers
    for tid, meta in fleet.sql("SELECT id, metadata FROM traces"):
        mark = json.loads(meta or "{}")
        if mark.get("tag") == "eval" and isinstance(mark.get("seq"), int):
            fleet.apps.setdefault("eval", []).append({"seq": mark["seq"], "id": tid, "ms": None})


def _compare_summary(compared: dict[str, Any]) -> str:
    keys = ("matched", "never_judged", "not_judged", "left_out")
    found = {k: compared[k] for k in keys if k in compared and not isinstance(compared[k], (list, dict))}
    return json.dumps(found) if found else "(no comparison)"


@scenario("hostile-import", "13. import of hostile files: deep nesting, wrong types, then a good file")
def _hostile_import(fleet: Fleet, row: Row) -> None:
    deep = fleet.tmp / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    wrong = fleet.tmp / "wrong.json"
    wrong.write_text(json.dumps({"resourceSpans": "not a list"}))
    good = REPO / "tests" / "import_fixtures" / "otlp_openinference.json"
    for name, path in (("import, 100,000 levels deep", deep), ("import, resourceSpans not a list", wrong)):
        done = fleet.cli("import", str(path))
        lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("veralith:")]
        row.exits[name] = done.returncode
        row.exits[name + ": one line, no traceback"] = len(lines) == 1 and "Traceback" not in done.stderr
    stored_before = fleet.sql("SELECT COUNT(*) FROM traces")[0][0] if (fleet.tmp / "v.db").exists() or \
        fleet.kind == "postgres" else 0
    row.exits["traces stored by the refused files"] = stored_before
    row.exits["import, a good file"] = fleet.cli("import", str(good)).returncode
    row.expected = {"import, 100,000 levels deep": 2, "import, 100,000 levels deep: one line, no traceback": True,
                    "import, resourceSpans not a list": 2,
                    "import, resourceSpans not a list: one line, no traceback": True,
                    "traces stored by the refused files": 0, "import, a good file": 0}


@scenario("spliced-quotes", "14. spliced and borrowed quotes offered as verbatim")
def _spliced_quotes(fleet: Fleet, row: Row) -> None:
    from veralith.llm.dates import quoted_periods
    from veralith.llm.text import quote_in

    chunk = "Refunds are accepted within 30 days. Price list: the ferry costs 6 euros. Call 555-2031 to book."
    spliced = ["Refunds are accepted within ... 90 days.", "Refunds are accepted within ... 6 euros.",
               "Price list ... 2031", "R...e...f...u...n...d...s", "Refunds accepted within 30 days."]
    accepted = [q for q in spliced if quote_in(q, chunk)]
    dated = [q for q in ("555-2031", "2031", "Price list ... 2031") if quoted_periods(q, chunk)]
    kept = quote_in("Refunds are  accepted\nwithin 30 days.", chunk)
    row.exits["spliced quotes accepted"] = len(accepted)
    row.exits["years read from non-dates"] = len(dated)
    row.exits["a true quote (whitespace differs) kept"] = kept
    row.expected = {"spliced quotes accepted": 0, "years read from non-dates": 0,
                    "a true quote (whitespace differs) kept": True}
    row.note = f"{len(spliced)} spliced forms tried: {accepted or 'none accepted'}"


# -- helpers ------------------------------------------------------------------------------------------

def _with_password(url: str) -> str:
    """A test server's database URL with SECRET as its password, both ways libpq takes one."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1) + f"?password={SECRET}"


@contextlib.contextmanager
def _store_away(fleet: Fleet, seconds: float | None) -> Iterator[None]:
    """The store unavailable: PostgreSQL stopped; a SQLite file held under another process's write lock.
    With `seconds`, for that long; else for the block."""
    if fleet.kind == "postgres":
        fleet.pg.halt()
        try:
            if seconds:
                time.sleep(seconds)
            yield
        finally:
            fleet.pg.start()
        return
    path = fleet.url[len("sqlite:///"):]
    from veralith.store import open_store

    open_store(fleet.url).read(ops.stats)   # the file exists, migrated
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time\n"
                               "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                               "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(3600)", path],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    try:
        if seconds:
            time.sleep(seconds)
        yield
    finally:
        holder.kill()
        holder.wait()


def _history(fleet: Fleet, count: int, *, external: bool = False) -> str:
    """A SQLite history to migrate: `count` pending traces under ids 1..count (those a fresh store
    hands out first), each marked {"history": n}; with `external`, external ids r0, r1, ..."""
    import secrets

    from veralith.models import ContextChunk
    from veralith.store import open_store, repository
    from veralith.store.protocol import TraceInput

    url = f"sqlite:///{fleet.tmp / 'history.db'}"
    rows: list[Any] = [(n + 1, secrets.token_hex(16), None, TraceInput(
        query=f"{QUERY} (history {n})", context=[ContextChunk(id="c0", text=CONTEXT[0])], response=RESPONSE,
        external_id=f"r{n}" if external else None, metadata={"history": n}), None, None) for n in range(count)]
    store = open_store(url)
    store.write(repository.create_traces, rows)
    # Finished with (status error), so that `resume` after the fault judges the apps' traces, not these.
    def finished(db: Any) -> None:
        with db.write():
            db.execute("UPDATE traces SET status = 'error', error_message = 'history'")
    store.write(finished)
    return url


def _wait_judged(fleet: Fleet, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = fleet.sql("SELECT COUNT(*) FROM traces WHERE status IN ('pending', 'running')")[0][0]
        if not left:
            return
        time.sleep(0.5)


def run(kinds: list[str], only: list[str]) -> list[Row]:
    pg = None
    if "postgres" in kinds:
        from pg_server import PgServer

        pg = PgServer()
    rows: list[Row] = []
    try:
        for name, (fault, fn) in SCENARIOS.items():
            if only and name not in only:
                continue
            for kind in kinds:
                tmp = Path(tempfile.mkdtemp(prefix=f"veralith-fm-{name}-"))
                fleet = Fleet(kind, pg, tmp)
                row = Row(fault=fault, store=kind)
                started = time.monotonic()
                try:
                    fn(fleet, row)
                    fleet.audit(row)
                except Exception as exc:   # the scenario itself broke: said in its row, the others go on
                    row.note = f"scenario failed: {type(exc).__name__}: {exc}"[:300]
                    row.expected["scenario"] = "ran"
                    row.exits["scenario"] = "raised"
                row.note = (row.note + f"; {time.monotonic() - started:.0f} s").lstrip("; ")
                rows.append(row)
                print(f"{name} [{kind}]: {'ok' if row.ok else 'MISSED'} {row.note}", file=sys.stderr, flush=True)
                from conftest import _close_stores

                _close_stores()
    finally:
        if pg is not None:
            pg.stop()
    return rows


def markdown(rows: list[Row]) -> str:
    head = ("| fault | store | returned | stored | judged once | judged twice | stuck | lost | set aside "
            "| worst log() ms | exits (documented) | secret seen | goal |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        exits = "; ".join(f"{k} {v}" + ("" if r.expected.get(k) == v else f" (documented {r.expected.get(k)})")
                          for k, v in r.exits.items())
        worst = r.worst_log_ms if r.worst_log_ms is not None else "—"
        goal = "met" if r.ok else "**missed**"
        lines.append(f"| {r.fault} | {r.store} | {r.returned} | {r.stored} | {r.judged_once} | {r.judged_twice} "
                     f"| {r.stuck} | {r.lost} | {r.set_aside} | {worst} | {exits} | {', '.join(r.leaks) or 'nowhere'} "
                     f"| {goal} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--only", nargs="*", default=[], choices=list(SCENARIOS), metavar="NAME")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    kinds = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    rows = run(kinds, args.only)
    if args.markdown:
        print(markdown(rows))
    else:
        print(json.dumps([{**asdict(r), "ok": r.ok} for r in rows], indent=2))
    sys.exit(0 if all(r.ok for r in rows) else 1)


if __name__ == "__main__":
    main()
