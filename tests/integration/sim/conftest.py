"""Start real `llmgw sim` processes on free ports; wait for /health; kill them on teardown."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


@dataclass
class SimProcess:
    url: str
    proc: subprocess.Popen[bytes]

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def metric(self, line_prefix: str) -> float:
        """Value of the first /metrics sample whose line starts with `line_prefix`."""
        text = httpx.get(self.url + "/metrics").text
        for line in text.splitlines():
            if line.startswith(line_prefix):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{line_prefix!r} not in /metrics")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _command() -> list[str]:
    llmgw = Path(sys.executable).with_name("llmgw")
    return [str(llmgw), "sim"] if llmgw.exists() else [sys.executable, "-m", "eval.sim.cli"]


def _start(args: list[str]) -> SimProcess:
    port = _free_port()
    proc = subprocess.Popen([*_command(), "--port", str(port), *args], stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"llmgw sim exited with {proc.returncode}: {err}")
        try:
            if httpx.get(url + "/health", timeout=0.5).status_code == 200:
                return SimProcess(url, proc)
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("llmgw sim did not become healthy within 20 s")


def _stop(sim: SimProcess) -> None:
    sim.proc.terminate()
    try:
        sim.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        sim.proc.kill()
        sim.proc.wait()


@pytest.fixture
def start_sim() -> Iterator[Callable[..., SimProcess]]:
    started: list[SimProcess] = []

    def start(*args: str) -> SimProcess:
        sim = _start(list(args))
        started.append(sim)
        return sim

    yield start
    for sim in started:
        _stop(sim)


@pytest.fixture(scope="module")
def instant_sim() -> Iterator[SimProcess]:
    sim = _start(["--profile", "instant", "--served-model-name", "small", "small-alias"])
    yield sim
    _stop(sim)


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimProcess]:
    """Real pacing: 20 ms per engine step, so a 200-token answer takes ~4 s."""
    sim = _start(["--profile", "small", "--step-base-ms", "20", "--served-model-name", "slow"])
    yield sim
    _stop(sim)
