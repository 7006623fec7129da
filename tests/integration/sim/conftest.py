"""Real `llmgw sim` processes on free ports (tests.support.stack): ready once /health answers, stopped on
teardown."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.procs import free_port
from tests.support.stack import Stack


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


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., SimProcess]]:
    with Stack(tmp_path) as s:
        yield lambda *args: _start(s, list(args))


@pytest.fixture(scope="module")
def instant_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with Stack(tmp_path_factory.mktemp("instant-sim")) as s:
        yield _start(s, ["--profile", "instant", "--served-model-name", "small", "small-alias"])


@pytest.fixture(scope="module")
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """Real pacing: 20 ms per engine step, so a 200-token answer takes ~4 s."""
    with Stack(tmp_path_factory.mktemp("slow-sim")) as s:
        yield _start(s, ["--profile", "small", "--step-base-ms", "20", "--served-model-name", "slow"])


def _start(stack: Stack, args: list[str]) -> SimProcess:
    port = free_port()
    sim = stack.spawn(["sim", "--port", str(port), *args], "/health", name="sim", port=port)
    return SimProcess(sim.url, sim.proc)
