"""Processes: free ports, spawning and pinning servers, and the /proc probes (RSS, CPU time, core busy)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.bench.overhead.client import MODEL, ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
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


def wait_redis(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
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


def tail(log: Path, n: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


@contextlib.contextmanager
def spawned(
    args: Sequence[str], cpu: int | None, ready_url: str, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a process (pinned to `cpu` when given) until the block ends; output goes to `log`."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            list(args), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=ROOT
        )
        try:
            if cpu is not None:
                # Pin before the server starts its loop; Python start-up spawns no threads to miss.
                os.sched_setaffinity(proc.pid, {cpu})
            if ready_url.startswith("redis://"):
                wait_redis(ready_url, proc, log)
            else:
                wait_http(ready_url, proc, log)
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def pool_and_model_yaml(upstream_port: int) -> str:
    """One pool over the upstream and its alias: what every benchmarked gateway serves."""
    return (
        "pools:\n"
        f"  - name: {MODEL}\n"
        f"    model: {MODEL}\n"
        f'    endpoints: {{static: ["http://127.0.0.1:{upstream_port}"]}}\n'
        "    timeouts: {connect_s: 2, first_token_s: 10, total_s: 30}\n"
        "models:\n"
        f"  - {{name: {MODEL}, route: {{pool: {MODEL}}}, max_tokens: {{default: 512, cap: 4096}}}}\n"
    )


def write_policy(path: Path, upstream_port: int) -> None:
    """The spine gateway's policy: one pool over the upstream, no auth, no limits."""
    # No auth (it is on by default), hence the anonymous tenant with no limits: the in-memory
    # limiter with zero rules.
    path.write_text(pool_and_model_yaml(upstream_port) + "tenancy: {auth: disabled}\n")


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key.lower() + "_mb"] = round(int(rest.split()[0]) / 1024, 1)
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_times() -> dict[int, tuple[int, int, int]]:
    """Per-CPU (busy, total, steal) jiffies from /proc/stat."""
    out: dict[int, tuple[int, int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *vals = line.split()
                v = [int(x) for x in vals]
                idle = v[3] + v[4]
                out[int(name[3:])] = (sum(v[:8]) - idle, sum(v[:8]), v[7] if len(v) > 7 else 0)
    return out


@dataclass(frozen=True, slots=True)
class CpuProbe:
    t_cpu: dict[int, tuple[int, int, int]]
    gateway_s: float
    upstream_s: float

    @classmethod
    def take(cls, gw_pid: int, up_pid: int) -> CpuProbe:
        return cls(cpu_times(), proc_cpu_seconds(gw_pid), proc_cpu_seconds(up_pid))

    def since(self, start: CpuProbe, requests: int, gw_cpu: int, load_cpu: int) -> dict[str, float | None]:
        """CPU use between two probes (None where unknown: JSON has no NaN)."""

        def share(cpu: int, field: int) -> float | None:
            if cpu not in self.t_cpu or cpu not in start.t_cpu:
                return None
            t = self.t_cpu[cpu][1] - start.t_cpu[cpu][1]
            return round((self.t_cpu[cpu][field] - start.t_cpu[cpu][field]) / t, 3) if t else None

        gw = self.gateway_s - start.gateway_s
        return {
            "gateway_cpu_s": round(gw, 3),
            "upstream_cpu_s": round(self.upstream_s - start.upstream_s, 3),
            "gateway_cpu_us_per_req": round(gw / requests * 1e6, 1) if requests else None,
            "gateway_core_busy": share(gw_cpu, 0),
            "load_core_busy": share(load_cpu, 0),
            "gateway_core_steal": share(gw_cpu, 2),
            "load_core_steal": share(load_cpu, 2),
        }
