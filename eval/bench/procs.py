"""The processes a benchmark measures: free ports, starting a server (pinned to a core when asked),
waiting until it answers, stopping it; which cores to pin to; a throw-away Redis.

Every eval/bench benchmark starts its servers through `spawned`, a context manager: the process runs
until the block ends, then gets SIGTERM (a clean exit: uvicorn drains, cProfile writes its stats) and,
after `STOP_GRACE_S`, SIGKILL. Its output goes to a log file whose tail is printed when it fails to
start (and by `dump_logs` when a measurement fails).

Pinning: with `cpu`, the command runs under `taskset -c CPU`, which execs it, so the pid is the
server's own (SIGTERM reaches it; /proc probes read it) and every thread it ever starts, Node's and
uvicorn's included, is on that core.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tail(log: Path, n: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def dump_logs(work: Path) -> None:
    """The tail of every `*.log` in `work`, to stderr: what the servers said before a run failed."""
    for log in sorted(work.glob("*.log")):
        print(f"--- {log.name} ---\n{tail(log)}", file=sys.stderr)


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = START_TIMEOUT_S) -> None:
    """Until `url` answers at all (any status: the sim and the static server differ in health routes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s:\n{tail(log)}")


def wait_redis(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = START_TIMEOUT_S) -> None:
    """Until the Redis server at `redis://host:port/...` answers PING."""
    host, _, port = url.removeprefix("redis://").split("/", 1)[0].partition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{tail(log)}")
        try:
            with socket.create_connection((host, int(port)), timeout=1.0) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer PING within {timeout}s:\n{tail(log)}")


def stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL if it has not exited after `grace` seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def spawned(
    args: Sequence[str],
    cpu: int | None,
    ready: str,
    log: Path,
    env: dict[str, str] | None = None,
    *,
    timeout: float = START_TIMEOUT_S,
    cwd: Path = ROOT,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `args` (under `taskset -c cpu` when given) until the block ends, once `ready` answers: an
    http:// URL (any status) or a redis:// URL (PING). Output goes to `log`; `env` adds to ours."""
    argv = ["taskset", "-c", str(cpu), *args] if cpu is not None else list(args)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd
        )
        try:
            if ready.startswith("redis://"):
                wait_redis(ready, proc, log, timeout)
            else:
                wait_http(ready, proc, log, timeout)
            yield proc
        finally:
            stop(proc)


@contextlib.contextmanager
def simulator(port: int, flags: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`llmgw sim` on 127.0.0.1:`port` (niced: the gateway under test keeps its core), until ready."""
    args = ["nice", sys.executable, "-m", "gateway", "sim", "--host", "127.0.0.1", "--port", str(port)]
    with spawned([*args, *flags], None, f"http://127.0.0.1:{port}/health", log) as proc:
        yield proc


def pinned_cpus(gateway_cpu: int, load_cpu: int) -> tuple[int | None, int | None]:
    """(gateway core, load core) when both are usable and distinct, else (None, None): nothing pinned."""
    try:
        usable = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None, None
    if gateway_cpu in usable and load_cpu in usable and gateway_cpu != load_cpu:
        return gateway_cpu, load_cpu
    return None, None


def redis_server() -> str:
    """The redis-server binary: the one on PATH, else Debian's."""
    return shutil.which("redis-server") or "/usr/bin/redis-server"


def redis_args(server: str, port: int) -> list[str]:
    """A throw-away Redis: loopback only, no persistence."""
    return [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]


def metric_sum(text: str, name: str) -> float:
    """The sum of every sample of `name` on a Prometheus text page (all label sets)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def metrics_pages(ports: Sequence[int]) -> list[str]:
    """Each local replica's /metrics page, in port order."""
    async with httpx.AsyncClient(timeout=5) as client:
        return [(await client.get(f"http://127.0.0.1:{p}/metrics")).text for p in ports]
