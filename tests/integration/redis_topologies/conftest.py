"""A whole gateway on each Redis topology of tests/support/redis_topologies.py (issue 41).

Every test module starts its topology once (a module-scoped fixture), a simulator and a gateway
configured only through the LLMGW_REDIS_* settings of gateway/redis_conn.py, with everything that can be
in Redis in it: `limits.backend: redis`, `tenancy.store: redis`, `cache.backend: redis`. `exercise`
then shows the three work on that topology: a key created through the admin API authenticates (the key
store), a second identical deterministic request is a cache hit (the response cache), and a key allowed
3 requests a minute gets its 4th refused with 429 (the limiter).

`Trickle` sends requests in a thread (one every 50 ms) while a test kills a primary, and says what
came back when; `start_fails` starts a gateway that must refuse to start and returns its output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.tenancy.keys import generate_key
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.redis_topologies import REDIS_CLI, REDIS_SERVER
from tests.support.stack import Service

ADMIN = "adm-" + generate_key()
BUDGET_RPM = 3  # requests a minute of the key that shows the limiter refusing
START_TIMEOUT_S = 45.0  # a gateway that must refuse to start has this long to exit
RECOVERY_S = 15.0  # from a primary's kill -9 to 200s again


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if REDIS_SERVER is None or REDIS_CLI is None:
        skip = pytest.mark.skip(reason="redis-server / redis-cli not on PATH (apt install redis-server)")
        for item in items:
            if "redis_topologies" in str(item.path):
                item.add_marker(skip)


def write_policy(path: Path, sim_url: str, *, on_backend_error: str = "fail_closed") -> Path:
    """One pool and alias `sim` (deterministic requests cached for a minute), limiter, key store and
    cache all in Redis; keys of the `standard` tier may send 100000 requests a minute."""
    path.write_text(
        f"""\
pools:
  - {{name: sim, model: sim, endpoints: {{static: ["{sim_url}"]}}, timeouts: {{connect_s: 2, total_s: 20}}}}
models:
  - name: sim
    route: {{pool: sim}}
    max_tokens: {{default: 4, cap: 16}}
    cache: {{default: deterministic, ttl_s: 60}}
cache: {{backend: redis}}
limits:
  backend: redis
  on_backend_error: {on_backend_error}
  tiers: {{standard: {{key: {{requests_per_min: 100000}}}}}}
tenancy:
  store: redis
  keys: []
"""
    )
    return path


def gateway_env(redis_env: Mapping[str, str]) -> dict[str, str]:
    """The gateway's environment: the admin key, the topology's LLMGW_REDIS_* settings, and no Redis
    setting inherited from the test run's own environment."""
    inherited = {k: "" for k in os.environ if k.startswith("LLMGW_REDIS_")}
    return {**inherited, "LLMGW_ADMIN_KEY": ADMIN, "LLMGW_LOG_LEVEL": "warning", **redis_env}


@dataclass
class Gateway:
    """A started gateway (tests.support.stack.Service) and what the tests ask of it."""

    service: Service

    @property
    def url(self) -> str:
        return self.service.url

    def create_key(self, key_id: str, limits: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {"org": "acme", "app": "topology", "id": key_id}
        if limits is not None:
            body["limits"] = limits
        resp = httpx.post(
            f"{self.url}/admin/keys", json=body, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10
        )
        assert resp.status_code == 201, f"{resp.status_code} {resp.text}\n{self.log_tail()}"
        return str(resp.json()["key"])

    def chat(
        self, key: str, prompt: str, *, temperature: float = 0.0, timeout: float = 10.0
    ) -> httpx.Response:
        body = {
            "model": "sim",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 4,
            "temperature": temperature,
        }
        return httpx.post(
            f"{self.url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {key}"},
            timeout=timeout,
        )

    def metric(self, name: str, labels: str = "") -> float:
        return metric(httpx.get(f"{self.url}/metrics", timeout=10).text, name, labels)

    def metrics(self, prefix: str) -> str:
        """The /metrics lines of the metrics named `prefix`..., for an assertion message."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return "\n".join(line for line in text.splitlines() if line.startswith(prefix))

    def log_tail(self, lines: int = 40) -> str:
        text = self.service.log_text()
        return "--- gateway log:\n" + "\n".join(text.splitlines()[-lines:])


def exercise(gw: Gateway, tag: str) -> None:
    """Key store, response cache and limiter, each seen working through `gw` (keys named after `tag`)."""
    key = gw.create_key(f"{tag}-k", limits={"requests_per_min": BUDGET_RPM})
    prompt = f"topology {tag} at {time.time_ns()}"
    first = gw.chat(key, prompt)
    assert first.status_code == 200, f"{first.status_code} {first.text}\n{gw.log_tail()}"
    assert first.headers["x-llmgw-cache-status"] == "miss", first.headers
    # A key nobody created is unknown to the store: 401, not a 5xx.
    stranger = gw.chat(generate_key(), prompt)
    assert stranger.status_code == 401, f"{stranger.status_code} {stranger.text}"
    # The cache: the same deterministic request again is answered from Redis.
    again = gw.chat(key, prompt)
    assert again.status_code == 200, f"{again.status_code} {again.text}\n{gw.log_tail()}"
    assert again.headers["x-llmgw-cache-status"] == "hit", (again.headers, gw.log_tail())
    assert again.json()["id"] == first.json()["id"]
    # The limiter: a hit counts as a request; the 3rd request of the minute passes, the 4th is refused.
    third = gw.chat(key, prompt + " (no cache)", temperature=1.0)
    assert third.status_code == 200, f"{third.status_code} {third.text}\n{gw.log_tail()}"
    fourth = gw.chat(key, prompt + " (no cache)", temperature=1.0)
    assert fourth.status_code == 429, f"{fourth.status_code} {fourth.text}\n{gw.log_tail()}"
    assert fourth.json()["error"]["type"] == "rate_limit_error", fourth.text


@dataclass(frozen=True)
class Call:
    sent: float  # monotonic
    latency: float
    status: int  # -1: no HTTP answer (connection error, timeout)
    body: str
    retry_after: str | None = None


@dataclass
class Trickle:
    """Requests with `key` every `interval` s from a thread, each recorded (a Call) until `stop()`."""

    gw: Gateway
    key: str
    interval: float = 0.05
    calls: list[Call] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Trickle:
        self._thread = threading.Thread(target=self._run, name="trickle", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _run(self) -> None:
        i = 0
        with httpx.Client(timeout=5.0) as client:
            while not self._stop.is_set():
                i += 1
                body = {
                    "model": "sim",
                    "messages": [{"role": "user", "content": f"trickle {i}"}],
                    "max_tokens": 2,
                    "temperature": 1.0,
                }
                t = time.monotonic()
                try:
                    resp = client.post(
                        f"{self.gw.url}/v1/chat/completions",
                        json=body,
                        headers={"authorization": f"Bearer {self.key}"},
                    )
                    status, text = resp.status_code, resp.text[:300]
                    retry_after = resp.headers.get("retry-after")
                except httpx.HTTPError as e:
                    status, text, retry_after = -1, repr(e), None
                self.calls.append(Call(t, time.monotonic() - t, status, text, retry_after))
                self._stop.wait(self.interval)

    def since(self, t: float) -> list[Call]:
        return [c for c in self.calls if c.sent >= t]

    def streak_of_200(self) -> int:
        """How many of the latest calls in a row were 200."""
        n = 0
        for c in reversed(self.calls):
            if c.status != 200:
                break
            n += 1
        return n

    def wait_healthy(self, count: int, timeout: float) -> None:
        wait_until(
            lambda: self.streak_of_200() >= count,
            lambda: f"{count} 200s in a row (last calls: {self.summary(self.calls[-8:])})",
            timeout=timeout,
            interval=0.05,
        )

    @staticmethod
    def summary(calls: list[Call]) -> str:
        return "; ".join(f"{c.status} {c.body[:120]}" for c in calls)


def recovery(calls: list[Call], killed_at: float) -> tuple[float, list[Call]]:
    """(seconds from the kill to the first call of the final run of 200s, the calls that were not 200)."""
    after = [c for c in calls if c.sent >= killed_at]
    failed = [c for c in after if c.status != 200]
    last_bad = max((c.sent for c in failed), default=None)
    if last_bad is None:
        return 0.0, failed
    first_good = min((c.sent for c in after if c.sent > last_bad), default=float("inf"))
    return first_good - killed_at, failed


def failover_under_trickle(gw: Gateway, kill: Callable[[], str], wait_failover: Callable[[str], str]) -> None:
    """Kill a primary (`kill()` returns its address) while a key sends a request every 50 ms; the
    gateway, never restarted, must answer every request 200 or with its failure mode's answer (503, a
    JSON error), never a 500 and never a dropped connection, and be back to 200s and to exact limiting
    (`llmgw_ratelimit_degraded 0`) within RECOVERY_S of the kill; then the key store, cache and limiter
    work on the new primary. The limiter's probe of Redis rides on requests: the gauge is awaited while
    the trickle still runs."""
    key = gw.create_key(f"trickle-{time.time_ns()}")
    pid = gw.service.proc.pid
    with Trickle(gw, key) as trickle:
        trickle.wait_healthy(10, timeout=15)
        killed_at = time.monotonic()

        def left() -> float:
            return max(1.0, RECOVERY_S - (time.monotonic() - killed_at))

        old = kill()
        new = wait_failover(old)
        promoted_s = time.monotonic() - killed_at
        trickle.wait_healthy(20, timeout=left())
        wait_until(
            lambda: gw.metric("llmgw_ratelimit_degraded") == 0,
            lambda: (
                f"llmgw_ratelimit_degraded 0 (exact limiting in Redis again)\n"
                f"{gw.metrics('llmgw_ratelimit_backend_errors')}\n{gw.log_tail()}"
            ),
            timeout=left(),
            interval=0.1,
        )
        exact_s = time.monotonic() - killed_at
    took, failed = recovery(trickle.calls, killed_at)
    window = trickle.since(killed_at)
    statuses: dict[int, int] = {}
    for c in window:
        statuses[c.status] = statuses.get(c.status, 0) + 1
    print(
        f"\nfailover {old} -> {new}: promoted after {promoted_s:.1f} s; {len(window)} requests since the "
        f"kill, {len(failed)} not 200 ({statuses}); 200s again {took:.1f} s and exact limiting "
        f"{exact_s:.1f} s after the kill"
    )
    odd = [c for c in failed if c.status != 503 or not _is_json_error(c.body)]
    assert not odd, f"answers other than 200 / a 503 error: {Trickle.summary(odd[:10])}\n{gw.log_tail()}"
    assert took <= RECOVERY_S, f"recovered only after {took:.1f} s"
    assert gw.service.proc.poll() is None and gw.service.proc.pid == pid  # the same process throughout
    exercise(gw, f"after-failover-{time.time_ns()}")


def _is_json_error(body: str) -> bool:
    try:
        return isinstance(orjson.loads(body).get("error"), dict)
    except orjson.JSONDecodeError:
        return False


class StartAttempt:
    """`python -m gateway serve` with a configuration it must refuse, started at once (so that a module
    starts all of its attempts side by side, with its gateway) and judged by `outcome()`."""

    def __init__(self, tmp: Path, policy: Path, env: Mapping[str, str], name: str) -> None:
        self.name = name
        self.log = tmp / f"{name}.log"
        self.port = free_port()
        full_env = {**os.environ, "LLMGW_DRAIN_DELAY_S": "0", **gateway_env(env)}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
            )

    def _answers(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=0.5).status_code < 500
        except httpx.HTTPError:
            return False

    def outcome(self) -> tuple[int, str]:
        """(exit code, its output: stdout and stderr together) once it exited. Fails the test if the
        gateway answers /healthz instead, or runs on past START_TIMEOUT_S (then it is killed)."""

        def exited() -> bool:
            if self.proc.poll() is not None:
                return True
            if self._answers():
                raise AssertionError(
                    f"the gateway started (/healthz answers) although it should refuse to:\n"
                    f"{self.log.read_text(errors='replace')[-3000:]}"
                )
            return False

        try:
            wait_until(exited, f"gateway {self.name} to exit", timeout=START_TIMEOUT_S, interval=0.1)
        finally:
            self.close()
        return self.proc.returncode, self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@contextmanager
def start_attempts(
    tmp: Path, policy: Path, envs: Mapping[str, Mapping[str, str]]
) -> Iterator[dict[str, StartAttempt]]:
    """A StartAttempt per name -> environment, all started now, all killed at the end."""
    attempts: dict[str, StartAttempt] = {}
    try:
        for name, env in envs.items():
            attempts[name] = StartAttempt(tmp, policy, env, name)
        yield attempts
    finally:
        for attempt in attempts.values():
            attempt.close()


def start_fails(tmp: Path, policy: Path, env: Mapping[str, str], name: str) -> tuple[int, str]:
    """One StartAttempt, judged at once."""
    return StartAttempt(tmp, policy, env, name).outcome()


def assert_refused_start(code: int, output: str, setting: str) -> None:
    """A start refused as the issue asks: non-zero exit, the setting named, no Python traceback."""
    assert code != 0, output
    assert setting in output, f"{setting} not named in the output:\n{output[-3000:]}"
    assert "Traceback" not in output, f"a traceback in the output:\n{output[-3000:]}"
