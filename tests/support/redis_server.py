"""A throwaway `redis-server` process for tests (no persistence, temp dir, restartable on its port).

`stack=True` starts Redis 7.4 with the query engine (RediSearch: FT.*, vector search) through the wrapper
scripts/install-redis-stack writes; Debian's redis-server has no FT.* commands. Tests that need it run in
CI (`make test` installs it first), so a missing wrapper is an error, never a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from tests.support.poll import wait_until
from tests.support.procs import ROOT, free_port

REDIS_SERVER = shutil.which("redis-server")
REDIS_STACK_SERVER = ROOT / ".tools" / "bin" / "redis-stack-server"


class RedisServer:
    """Start / kill / restart one redis-server on a fixed port (restart keeps the port; the data too only
    with `aof`: the append-only file in `workdir`, fsynced every second, as the chart runs Redis)."""

    def __init__(
        self, workdir: Path, port: int | None = None, *, stack: bool = False, aof: bool = False
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.stack = stack
        self.aof = aof
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _binary(self) -> str:
        if not self.stack:
            assert REDIS_SERVER is not None
            return REDIS_SERVER
        if not os.access(REDIS_STACK_SERVER, os.X_OK):
            raise RuntimeError(
                f"{REDIS_STACK_SERVER} is missing: run scripts/install-redis-stack (make test does)"
            )
        return str(REDIS_STACK_SERVER)

    def start(self) -> None:
        args = [
            self._binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            *(("--appendonly", "yes", "--appendfsync", "everysec") if self.aof else ("--appendonly", "no")),
        ]
        # The stack server's log is kept: a module that fails to load (e.g. a missing libssl.so.1.1)
        # only says so there.
        log_path = self.workdir / f"redis-stack-{self.port}.log" if self.stack else None
        if log_path is None:
            self.proc = subprocess.Popen(
                args, cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        else:
            with log_path.open("wb") as log:  # the child keeps its own descriptor
                self.proc = subprocess.Popen(args, cwd=self.workdir, stdout=log, stderr=log)
        proc = self.proc

        def exited() -> None:
            if proc.poll() is not None:
                tail = ""
                if log_path is not None:
                    tail = ":\n" + "\n".join(log_path.read_text(errors="replace").splitlines()[-10:])
                raise RuntimeError(f"redis-server exited with {proc.returncode}{tail}")

        def pong() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        wait_until(pong, "redis-server to answer PING", timeout=10, interval=0.02, fail=exited)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        """A graceful stop (SIGTERM, as Kubernetes stops a pod): Redis flushes its append-only file."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


def start_any(workdir: Path) -> RedisServer:
    """A started redis-server, else redis-stack-server (also a Redis); pytest.skip if neither runs."""
    import pytest

    server = RedisServer(workdir, stack=REDIS_SERVER is None)
    try:
        server.start()
    except (RuntimeError, FileNotFoundError) as e:
        pytest.skip(f"no redis-server: {e}")
    return server
