"""Real processes for the token-budget limiter's acceptance tests: redis-server, simulators, gateways.

Each test builds its own stack (policies differ per test) from these factories; everything is torn
down when the test ends. The gateway runs as `python -m gateway serve` with `LLMGW_REDIS_URL` set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from subprocess import Popen

import pytest

from tests.support.procs import free_port, running, sim_args
from tests.support.redis_server import REDIS_SERVER, RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.fail("redis-server binary not found on PATH (apt install redis-server)")
    workdir = tmp_path / "redis"
    workdir.mkdir()
    server = RedisServer(workdir)
    server.start()
    yield server
    server.kill()


SimFactory = Callable[..., str]


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[SimFactory]:
    """`sims(log_name, *extra_args) -> base URL`: start a simulator serving model `sim` (stopped at the
    end of the test)."""
    with ExitStack() as es:

        def start(name: str, *extra: str) -> str:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            args = sim_args(port, "sim", *extra)
            es.enter_context(running(args, f"{url}/health", log=tmp_path / f"{name}.log"))
            return url

        yield start


@contextmanager
def gateway(
    policy: Path, redis_url: str, log: Path, workers: int = 1, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Popen[bytes]]]:
    """A gateway on a fresh port: yields (base URL, the `python -m gateway` process)."""
    port = free_port()
    args = ["serve", "--config", str(policy), "--port", str(port), "--workers", str(workers)]
    full_env = {
        "LLMGW_REDIS_URL": redis_url,
        "LLMGW_LOG_LEVEL": "warning",
        "LLMGW_DRAIN_SECONDS": "2",
        **(env or {}),
    }
    url = f"http://127.0.0.1:{port}"
    with running(args, f"{url}/healthz", env=full_env, log=log) as proc:
        yield url, proc
