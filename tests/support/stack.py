"""The one harness for the real processes of integration and e2e tests: simulators, gateways, Redis,
Prometheus and real vLLM servers, each started and waited for, all stopped when the stack closes.

    with Stack(tmp_path) as s:
        small = s.sim("m", "--profile", "instant")                  # `python -m gateway sim`, ready
        gw = s.gateway(write_policy(tmp_path / "p.yaml", {"m": small.url}))
        httpx.post(f"{gw.v1}/chat/completions", ...)

Every process logs to `<tmp>/<name>.log` (`sim-<model>`, `gateway`, then `-1`, `-2` ... when a name is
taken); a process that exits before it answers fails the start with the tail of its log. `ready=False`
starts a simulator or gateway without waiting, so that several boot at once: `s.ready()` (and every
`s.gateway(...)`, which waits for the simulators it may route to first) waits for them.

Closing stops everything at once (SIGTERM to all, then each waited for; SIGKILL after 10 s) instead of one
after the other. Gateways start with `LLMGW_DRAIN_DELAY_S=0` unless the test passes its own: the 3 s a
gateway keeps its listener open after SIGTERM (for load balancers) is dead time at every teardown here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import httpx

from tests.support import vllm
from tests.support.procs import free_port, wait_http
from tests.support.prom import metric
from tests.support.prometheus import Prom, start_prometheus
from tests.support.redis_server import RedisServer, start_any

__all__ = ["Service", "Stack"]

T = TypeVar("T")
STOP_TIMEOUT_S = 10.0


@dataclass
class Service:
    """A `python -m gateway ...` process (simulator or gateway) on 127.0.0.1:`port`."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    ready_path: str
    host: str = "127.0.0.1"
    started: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    @property
    def address(self) -> str:
        """host:port, as a Prometheus target."""
        return f"{self.host}:{self.port}"

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def metric(self, name: str, labels: str = "") -> float:
        """Sum of the samples of `name` on /metrics whose labels contain `labels`."""
        return metric(self.metrics(), name, labels)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        if self.started:
            return
        try:
            wait_http(f"{self.url}{self.ready_path}", self.proc, timeout=timeout, log=self.log)
        except Exception:
            _stop_all([self.proc])
            raise
        self.started = True


class Stack:
    """Real processes started on demand and stopped together; see the module's docstring."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._pending: list[Service] = []
        self._names: set[str] = set()
        self._after = ExitStack()  # context managers and callbacks, closed after the processes stopped

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        procs, self._procs, self._pending = self._procs, [], []
        try:
            _stop_all(procs)
        finally:
            self._after.close()

    # --- simulators and gateways -------------------------------------------------------------------

    def spawn(
        self,
        args: Sequence[str],
        ready_path: str,
        *,
        name: str,
        port: int,
        env: Mapping[str, str] | None = None,
        ready: bool = True,
        host: str = "127.0.0.1",
    ) -> Service:
        """`python -m gateway ARGS` (to listen on `host`:`port`), ready once GET `ready_path` is < 500."""
        log = self.tmp / f"{self._name(name)}.log"
        with log.open("wb") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        self._procs.append(proc)
        service = Service(log.stem, port, proc, log, ready_path, host)
        if ready:
            service.wait_ready()
        else:
            self._pending.append(service)
        return service

    def sim(
        self,
        model: str,
        *extra: str,
        port: int | None = None,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        ready: bool = True,
        host: str = "127.0.0.1",
    ) -> Service:
        """A simulator (`python -m gateway sim`) serving `model`; `extra` are its other arguments."""
        port = port or free_port()
        args = ["sim", "--host", host, "--port", str(port), "--served-model-name", model, *extra]
        name = name or f"sim-{model}"
        return self.spawn(args, "/health", name=name, port=port, env=env, ready=ready, host=host)

    def gateway(
        self,
        policy: Path,
        *extra: str,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "gateway",
        ready: bool = True,
        ready_path: str = "/healthz",
    ) -> Service:
        """A gateway (`python -m gateway serve --config POLICY`), once every simulator started before it
        answers; `extra` are further `serve` arguments (e.g. `--workers 2`)."""
        self.ready()
        port = port or free_port()
        args = ["serve", "--config", str(policy), "--port", str(port), *extra]
        full_env = {"LLMGW_DRAIN_DELAY_S": "0", **(env or {})}
        return self.spawn(args, ready_path, name=name, port=port, env=full_env, ready=ready)

    def ready(self) -> None:
        """Wait for every simulator and gateway started with `ready=False`."""
        pending, self._pending = self._pending, []
        for service in pending:
            service.wait_ready()

    def stop(self, service: Service) -> None:
        """Stop one process now (SIGTERM, SIGKILL after 10 s), e.g. a replica going away mid-test."""
        _stop_all([service.proc])

    # --- Redis, Prometheus, vLLM, anything else ----------------------------------------------------

    def redis(self, *, stack: bool = False, port: int | None = None, any_kind: bool = False) -> RedisServer:
        """A started redis-server in its own directory; `stack=True`: Redis Stack (vector search);
        `any_kind=True`: redis-server, else Redis Stack, and a skip when neither runs."""
        workdir = self.tmp / self._name("redis")
        workdir.mkdir(exist_ok=True)
        if any_kind:
            server = start_any(workdir)
        else:
            server = RedisServer(workdir, port, stack=stack)
            server.start()
        self._after.callback(server.kill)
        return server

    def prometheus(self, targets: Mapping[str, Sequence[str]]) -> Prom:
        """A real Prometheus scraping `targets` (job -> ["host:port", ...]) every second."""
        workdir = self.tmp / self._name("prometheus")
        workdir.mkdir(exist_ok=True)
        prom, proc = start_prometheus(workdir, {job: list(hosts) for job, hosts in targets.items()})
        self._procs.append(proc)
        return prom

    def vllm(
        self,
        servers: Sequence[Sequence[str]],
        *,
        names: Sequence[str] | None = None,
        cpus: Sequence[int] | None = None,
        ports: Sequence[int] | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> list[vllm.VllmServer]:
        """One real vLLM server (the tiny model) per entry of `servers` (its extra arguments), all
        booting at once and each ready on return; server i logs to `vllm/<names[i]>.log` and is pinned
        to core `cpus[i]` (default: core i). Stopped (its process group, its scratch dir) at the end."""
        workdir = self.tmp / self._name("vllm")
        workdir.mkdir(exist_ok=True)
        out = []
        for i, extra in enumerate(servers):
            port = ports[i] if ports is not None else free_port()
            log = workdir / f"{names[i] if names is not None else f'vllm-{i}'}.log"
            cpu = cpus[i] if cpus is not None else i
            server = vllm.spawn(port, log, cpu=cpu, extra_args=extra, extra_env=extra_env)
            self._after.callback(vllm.stop, server)
            out.append(server)
        for server in out:
            vllm.wait_ready(server)
        return out

    def enter(self, cm: AbstractContextManager[T]) -> T:
        """Enter any other context manager (a scripted server, a fake upstream) for the stack's life."""
        return self._after.enter_context(cm)

    def callback(self, fn: Callable[[], object]) -> None:
        self._after.callback(fn)

    def _name(self, base: str) -> str:
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}-{i}"
        self._names.add(name)
        return name


def _stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to every process still running, then wait for each; SIGKILL what outlives 10 s."""
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    for proc in procs:
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
