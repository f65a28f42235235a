"""A throwaway PostgreSQL server for the tests: Debian's `postgresql` package, started once per test
session (per xdist worker) on a temporary data directory, a private Unix socket and a free port on
127.0.0.1, and stopped at the end. Each test that asks gets a database of its own, created from a
template the store has already migrated, so a test costs a CREATE DATABASE, not a migration.

initdb and migrating the template take seconds of CPU (about 40 s of wall time on a loaded
2-core machine), so they are done once per test run: the first server saves its stopped data
folder (`save_snapshot`) and every later server of the run (the other xdist worker's, a test's own
server that it stops and starts) starts on a copy of it (`PgServer(snapshot=...)`).

`initdb` refuses to run as root; as root the server runs as the `postgres` system user (runuser).
Without the binaries every test that needs the server skips, naming the package to install.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ["PgServer", "pg_bin"]


def pg_bin() -> Path | None:
    """The folder holding initdb and pg_ctl, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(folder, "initdb"), os.X_OK):
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    """One running server; `new_database()` gives a fresh, migrated database's URL."""

    def __init__(self, snapshot: Path | None = None) -> None:
        folder = pg_bin()
        if folder is None:
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's `postgresql` "
                        "package (.ci/run does) to run the PostgreSQL store tests")
        self.bin = folder
        self.root = Path(tempfile.mkdtemp(prefix="veralith-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.root, "postgres")
        if snapshot is None:
            self._run([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                       "--no-sync"])
        else:   # a copy of a stopped server's data folder: its roles and migrated template come with it
            self._run(["cp", "-a", str(snapshot), str(self.data)])
        self.options = (f"-k {self.root} -c listen_addresses=127.0.0.1 -p {self.port} -c fsync=off "
                        "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        self.start()
        self.base = f"postgresql://postgres@127.0.0.1:{self.port}"
        self._names = itertools.count()
        self._template = "veralith_template" if snapshot is not None else self._make_template()

    def _run(self, argv: list[str]) -> None:
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")

    def sql(self, statement: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(f"{self.base}/{database}", autocommit=True) as conn:
            conn.execute(statement.encode())

    def _make_template(self) -> str:
        import psycopg

        from veralith.store.postgres import migrate

        self.sql("CREATE DATABASE veralith_template")
        with psycopg.connect(f"{self.base}/veralith_template", autocommit=True) as conn:
            migrate.apply_migrations(conn, "template")
        return "veralith_template"

    def new_database(self, *, migrated: bool = True) -> str:
        # FILE_COPY copies the template's few megabytes of files; the default (WAL_LOG, PostgreSQL 15)
        # writes them through the WAL, about twice as slow here (0.9 s against 1.7 s on a loaded machine).
        name = f"t{os.getpid()}_{next(self._names)}"
        self.sql(f"CREATE DATABASE {name}" + (f" TEMPLATE {self._template} STRATEGY FILE_COPY" if migrated else ""))
        return f"{self.base}/{name}"

    def save_snapshot(self, path: Path) -> None:
        """Copy this server's data folder (with its migrated template) to `path`, a folder the
        server's user can write in, for `PgServer(snapshot=path / "data")`. The server is stopped
        cleanly for the copy and started again on the same port."""
        self.halt()
        try:
            self._run(["cp", "-a", str(self.data), str(path / "data")])
        finally:
            self.start()

    def start(self) -> None:
        """Start (or restart) the server on its data directory and port."""
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self.options, "-l", str(self.root / "log"),
                   "-w", "-t", "60", "start"])

    def halt(self) -> None:
        """Stop the server, keeping its data (`start` brings it back): a database outage. A clean
        shutdown: the tests' server runs without fsync or synchronous commit (for speed), so a crash
        would lose the last commits, which a production server (synchronous_commit on) keeps."""
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def drop_database(self, url: str) -> None:
        """Drop a database `new_database` made (its connections, if any are left, are ended): a
        session's hundreds of test databases would otherwise fill the temporary folder."""
        name = url.rsplit("/", 1)[1]
        assert url == f"{self.base}/{name}" and name.startswith("t"), url
        self.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        try:
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
