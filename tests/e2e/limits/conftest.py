"""Real processes for the token-budget limiter's acceptance tests: redis-server, simulators, gateways.

Each test builds its own stack (policies differ per test) from these factories over tests.support.stack;
everything is torn down when the test ends. The gateway runs as `python -m gateway serve` with
`LLMGW_REDIS_URL` set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen

import pytest

from tests.support.redis_server import REDIS_SERVER, RedisServer
from tests.support.stack import Stack


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.fail("redis-server binary not found on PATH (apt install redis-server)")
    with Stack(tmp_path) as s:
        yield s.redis()


SimFactory = Callable[..., str]


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[SimFactory]:
    """`sims(log_name, *extra_args) -> base URL`: start a simulator serving model `sim` (stopped at the
    end of the test)."""
    with Stack(tmp_path) as s:

        def start(name: str, *extra: str) -> str:
            return s.sim("sim", *extra, name=name).url

        yield start


@contextmanager
def gateway(
    policy: Path, redis_url: str, log: Path, workers: int = 1, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Popen[bytes]]]:
    """A gateway on a fresh port, logging to `log` (a `.log` file): yields (base URL, the process)."""
    assert log.suffix == ".log", log
    full_env = {
        "LLMGW_REDIS_URL": redis_url,
        "LLMGW_LOG_LEVEL": "warning",
        "LLMGW_DRAIN_SECONDS": "2",
        **(env or {}),
    }
    with Stack(log.parent) as s:
        gw = s.gateway(policy, "--workers", str(workers), env=full_env, name=log.stem)
        yield gw.url, gw.proc
