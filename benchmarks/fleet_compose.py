"""examples/fleet/compose.yaml without Docker: its services run as local processes, and the outcome is checked.

This machine has no Docker daemon, so the compose file cannot be brought up here. What it describes can
still be run: this script reads the file and starts each service's command, `deploy.replicas` times,
with the service's environment, against a throwaway PostgreSQL 15 from Debian's package (as the tests
start one) in place of the `db` service and a free port in place of the web view's published one.
Midway the database is stopped for a few seconds, as a network blip or a restart would. Then each
service gets its compose `stop_signal` (SIGTERM by default), the workers are given time to judge
what is left, and the store is checked:

- every trace an app process said it logged is in the store once, and judged once;
- the apps and workers exited 0 on their stop signal (the web view as uvicorn does: shut down, then
  ended by the signal it caught);
- the web view answered with the token (a Bearer header; `?token=` trades it for a cookie) and refused
  without it or with a wrong one.

    .venv/bin/python benchmarks/fleet_compose.py              # --seconds 20 --outage 4

It needs the `postgres` and `web` extras and Debian's postgresql package; it prints one JSON object and
exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "examples" / "fleet" / "compose.yaml"
sys.path.insert(0, str(REPO / "tests"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _argv(command: list[str]) -> list[str]:
    """The container's command run with this interpreter (`python` and the `veralith` script alike)."""
    if command[0] == "python":
        return [sys.executable, *command[1:]]
    if command[0] == "veralith":
        return [sys.executable, "-m", "veralith.cli", *command[1:]]
    return command


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None   # the status itself is what is checked (?token= is traded for a cookie by a 303)


def _get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the apps log")
    parser.add_argument("--outage", type=float, default=4.0, help="seconds the database is down, midway")
    args = parser.parse_args()

    from pg_server import PgServer  # tests/pg_server.py: Debian's initdb and pg_ctl on a temporary folder

    spec = yaml.safe_load(COMPOSE.read_text())
    services: dict[str, Any] = spec["services"]
    pg = PgServer()
    url = pg.new_database(migrated=False)   # the processes migrate it, as on a first `up`
    tmp = Path(tempfile.mkdtemp(prefix="veralith-compose-"))
    web_port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    base["PYTHONPATH"] = str(REPO)
    procs: list[tuple[str, subprocess.Popen[str], int]] = []
    started = time.monotonic()
    try:
        for name, service in services.items():
            if "command" not in service:
                continue   # the database: replaced by the throwaway server
            env = {**base, **{k: str(v) for k, v in (service.get("environment") or {}).items()}}
            env["VERALITH_DB_URL"] = url
            if "VERALITH_SPOOL_DIR" in env:   # a volume in the compose file: a folder of ours here
                env["VERALITH_SPOOL_DIR"] = str(tmp / name / env["VERALITH_SPOOL_DIR"].strip("/"))
            command = [str(part) for part in service["command"]]
            if "--port" in command:
                command[command.index("--port") + 1] = str(web_port)
            stop = getattr(signal, str(service.get("stop_signal", "SIGTERM")))
            for replica in range(int((service.get("deploy") or {}).get("replicas", 1))):
                log = open(tmp / f"{name}-{replica}.log", "w")   # noqa: SIM115 - closed with the process
                procs.append((name, subprocess.Popen(_argv(command), cwd=REPO, env=env, stdout=log,
                                                     stderr=subprocess.STDOUT, text=True), stop))
        time.sleep(args.seconds / 2)
        pg.halt()                                  # the database goes away for a while
        time.sleep(args.outage)
        pg.start()
        time.sleep(args.seconds / 2)
        web_command = [str(part) for part in services["web"]["command"]]
        token = web_command[web_command.index("--token") + 1]
        home = f"http://127.0.0.1:{web_port}/"
        web = {"bearer_token": _get(home, token), "token_in_address": _get(f"{home}?token={token}"),
               "no_token": _get(home), "wrong_token": _get(home, "x" * 20)}
        for name, proc, stop in procs:             # `docker compose stop`: the apps first, as they depend on db
            if name == "app":
                proc.send_signal(stop)
        exits: dict[str, list[int | None]] = {}
        for name, proc, _ in procs:
            if name == "app":
                exits.setdefault(name, []).append(proc.wait(timeout=60))
        logged = {int(m.group(1)) for path in tmp.glob("app-*.log")   # what each app said it logged
                  for m in re.finditer(r"logged trace (\d+)", path.read_text())}
        from veralith.store import open_store

        store = open_store(url)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:         # the workers judge what the apps left
            by_status = store.read(ops.stats)["by_status"]
            if by_status.get("pending", 0) == 0 and by_status.get("running", 0) == 0:
                break
            time.sleep(0.5)
        for name, proc, stop in procs:
            if name != "app":
                proc.send_signal(stop)
        for name, proc, _ in procs:
            if name != "app":
                exits.setdefault(name, []).append(proc.wait(timeout=60))
        by_status = {k: v for k, v in store.read(ops.stats)["by_status"].items() if v}
        with store.connection() as db:  # type: ignore[attr-defined]
            ids = {int(r[0]) for r in db.execute("SELECT id FROM traces").fetchall()}
            judged_twice = int(db.execute("SELECT COUNT(*) FROM traces WHERE attempts > 1").fetchone()[0])
        out = {"seconds": round(time.monotonic() - started, 1), "processes": {n: len(e) for n, e in exits.items()},
               "logged": len(logged), "stored": len(ids), "missing": sorted(logged - ids)[:10],
               "by_status": by_status, "claimed_more_than_once": judged_twice, "exit_codes": exits, "web": web}
        out["ok"] = (bool(logged) and logged <= ids and len(ids) == len(logged) and by_status == {"done": len(ids)}
                     and not judged_twice and exits["app"] == [0, 0] and set(exits["worker"]) == {0}
                     # uvicorn shuts down on SIGTERM, then raises the signal again: the status says so
                     and exits["web"] == [-signal.SIGTERM]
                     and web == {"bearer_token": 200, "token_in_address": 303, "no_token": 401, "wrong_token": 401})
    finally:
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
        pg.stop()
    print(json.dumps(out, indent=2))
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
