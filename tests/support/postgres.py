"""A throwaway PostgreSQL server for tests (Debian's packaged binaries; trust auth on 127.0.0.1 only).

    with PostgresServer(tmp_path) as pg:
        url = pg.create_database("t1")          # postgresql://postgres@127.0.0.1:PORT/t1
        pg.stop(); ...; pg.start()              # same port, same data (stop: a fast shutdown)

The cluster is made by `initdb` once per server (2-4 s here: share a server per module or session and give
each test a database of its own). PostgreSQL refuses to run as root: as root the data lives in a directory
of its own under the system temp dir, owned by `postgres` (pytest's temp dirs are root-only, mode 0700),
and the server runs as that user; otherwise in `workdir`. `fsync=off`: the tests kill processes, never the
machine, so what reached the kernel survives. `synchronous_commit` stays on: with it off, a killed server
loses transactions it had already reported committed (the ledger's kill test saw it).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from tests.support.poll import wait_until
from tests.support.procs import free_port

__all__ = ["PG_BIN", "PostgresServer", "start_or_skip"]


def _pg_bin() -> Path | None:
    """The newest installed major version's bin directory (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = [
        p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if p.parent.parent.name.isdigit()
    ]
    return max(found, key=lambda b: int(b.parent.name)) if found else None


PG_BIN = _pg_bin()
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresServer:
    """initdb on first start, then start / stop (fast shutdown) / kill (SIGKILL of every server process)
    on a fixed port; `url` is the `postgres` superuser's database, `url_of(name)` another one's."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        if PG_BIN is None:
            raise FileNotFoundError(
                "no PostgreSQL binaries under /usr/lib/postgresql/*/bin (apt install postgresql)"
            )
        self.bin = PG_BIN
        self.workdir = workdir
        self.port = port or free_port()
        self._as_root = os.geteuid() == 0
        # As root the server runs as `postgres`, which cannot enter pytest's root-only temp dirs.
        self.dir = Path(tempfile.mkdtemp(prefix="llmgw-pg-")) if self._as_root else workdir / "postgres"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._user = "postgres" if self._as_root else None
        if self._as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> str:
        proc = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            user=self._user,
            capture_output=True,
            text=True,
            cwd=self.dir,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def start(self) -> None:
        if not (self.data / "PG_VERSION").exists():
            # --no-sync and the C locale: the fastest initdb, and no locale the machine may lack.
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                      "--locale=C", "--no-sync")  # fmt: skip
        args = [
            str(self.bin / "postgres"),
            "-D", str(self.data),
            "-p", str(self.port),
            "-k", str(self.dir),
            "-c", "listen_addresses=127.0.0.1",
            "-c", "fsync=off",
            "-c", "full_page_writes=off",
            "-c", "max_connections=200",
        ]  # fmt: skip
        with self.log.open("ab") as log:  # the child keeps its own descriptor
            # Its own session: kill() reaches the backends too, not only the postmaster.
            self.proc = subprocess.Popen(
                args, user=self._user, stdout=log, stderr=log, cwd=self.dir, start_new_session=True
            )
        proc = self.proc

        def exited() -> None:
            if proc.poll() is not None:
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
                raise RuntimeError(f"postgres exited with {proc.returncode}:\n{tail}")

        def ready() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
            except OSError:
                return False
            return (
                subprocess.run(
                    [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)], check=False
                ).returncode
                == 0
            )

        wait_until(ready, "postgres to accept connections", timeout=30, interval=0.05, fail=exited)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` through psql (unaligned, tuples only) and return its output."""
        proc = subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-d", self.url_of(database), "-c", sql],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"psql failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def create_database(self, name: str) -> str:
        """A new, empty database; returns its URL."""
        if not _NAME.match(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.psql(f"CREATE DATABASE {name}")
        return self.url_of(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: sessions are disconnected, everything is written), then wait."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None

    def kill(self) -> None:
        """SIGKILL to the postmaster and every backend (the next start recovers from the WAL)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
            # Orphaned backends of the killed group exit with it; the next start needs the port free.
            wait_until(lambda: not _listening(self.port), "the killed postgres to free its port", timeout=10)

    def close(self) -> None:
        self.stop()
        if self._as_root:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def start_or_skip(workdir: Path) -> PostgresServer:
    """A started server; pytest.skip, saying why, when PostgreSQL is not installed."""
    import pytest

    if PG_BIN is None:
        pytest.skip("PostgreSQL not installed (apt install postgresql; .ci/run does)")
    server = PostgresServer(workdir)
    server.start()
    return server
