"""Start real processes (simulators, gateways) for integration and e2e tests, and wait for them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.poll import wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_http(
    url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30.0, log: Path | None = None
) -> None:
    """Wait until GET `url` answers below 500; fail at once if `proc` exits first, with its output (its
    stdout pipe, or the tail of `log`)."""

    def exited() -> None:
        if proc is None or proc.poll() is None:
            return
        if log is not None:
            out = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        else:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        raise RuntimeError(f"process exited with {proc.returncode} before {url} answered:\n{out}")

    def answers() -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code < 500
        except httpx.HTTPError:
            return False

    wait_until(answers, f"{url} to answer", timeout=timeout, interval=0.05, fail=exited)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL if the process is still there after 10 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def running(
    args: Sequence[str], ready_url: str, env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `python -m gateway ARGS` until the block ends; its output goes to `log` (or is kept for errors)."""
    full_env = {**os.environ, **(env or {})}
    out = open(log, "wb") if log else subprocess.PIPE  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", *args], stdout=out, stderr=subprocess.STDOUT, env=full_env
    )
    try:
        wait_http(ready_url, proc, log=log)
        yield proc
    finally:
        stop(proc)
        if log is not None and not isinstance(out, int):
            out.close()


def sim_args(port: int, name: str, *extra: str) -> list[str]:
    return ["sim", "--host", "127.0.0.1", "--port", str(port), "--served-model-name", name, *extra]


def write_policy(path: Path, pools: dict[str, str], extra_yaml: str = "") -> Path:
    """A policy with one alias per pool (same name), pools given as name -> base URL."""
    lines = ["pools:"]
    for name, url in pools.items():
        lines += [
            f"  - name: {name}",
            f"    model: {name}",
            f'    endpoints: {{static: ["{url}"]}}',
            "    serves: [chat, completions, embeddings]",
            "    timeouts: {connect_s: 2, first_token_s: 5, total_s: 30}",
        ]
    lines.append("models:")
    for name in pools:
        lines.append(f"  - {{name: {name}, route: {{pool: {name}}}, max_tokens: {{default: 64, cap: 256}}}}")
    path.write_text("\n".join(lines) + "\n" + extra_yaml)
    return path
