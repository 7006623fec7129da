"""The in-gateway drift canary (policy `drift`): every `every_s`, each configured pool pair answers the
canary prompts greedily and the answers are compared; the result goes to `llmgw_pool_drift_*`.

Flow: one background task, started in the app lifespan and cancelled on shutdown. Each round checks
every pair in turn; a check sends each prompt to both pools at once through the gateway's own pool
clients (replica picking, breakers, retries before the first byte, as for any request; hold-queue
priority -1, behind every client) and compares them with `pools.drift.compare` — the same pure function
as `llmgw drift` (docs/design/026-drift-monitor.md). The calls are the platform's own traffic: they are
not admitted against any tenant budget (a round costs pairs × prompts × 2 × max_tokens tokens, fixed by
the policy). The first round starts at once, so a freshly started gateway reports within seconds.

A check that cannot complete (a pool unreachable, an error, an answer without logprobs, a timeout) is
counted `failed` and leaves the gauges at their last value; the last-check timestamp tells their age.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import orjson

from gateway.config_drift import DriftConfig, DriftPair
from gateway.edge.exchange import Kind
from gateway.errors import GatewayError
from gateway.observability.drift_metrics import DriftGauges
from gateway.upstream.calls import CallSpec, PoolCalls
from gateway.upstream.pool_client import PoolClient
from pools.drift import Step, Summary, breaches, compare, summarize
from pools.drift_answer import DriftAnswerError, canary_body, trajectory

__all__ = ["DriftCanary"]

_PRIORITY = -1  # behind every client request in a pool's hold queue
_log = logging.getLogger("llmgw.drift")


class DriftCanary:
    def __init__(
        self,
        config: DriftConfig,
        pools: dict[str, PoolClient],
        calls: PoolCalls,
        gauges: DriftGauges,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._pools = pools
        self._calls = calls
        self._gauges = gauges
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._seq = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="llmgw-drift-canary")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _forever(self) -> None:
        while True:
            await self.round()
            await asyncio.sleep(self._config.every_s)

    async def round(self) -> None:
        """Check every pair once; a failing pair is counted and does not stop the others."""
        for pair in self._config.pairs:
            try:
                summary = await self.check(pair)
            except asyncio.CancelledError:
                raise
            except (GatewayError, ValueError, TimeoutError) as exc:  # DriftAnswerError is a ValueError
                self._gauges.failed(pair.a, pair.b)
                _log.warning("drift check %s/%s failed: %s", pair.a, pair.b, exc)
                continue
            b = self._config.bound_of(pair)
            over = breaches(summary, b.max_mean_abs_logprob, b.max_kl, b.min_match_ratio)
            self._gauges.record(pair.a, pair.b, summary, over, self._config.max_tokens, self._clock())
            if over:
                _log.warning("pools %s and %s drift apart: %s outside the bound", pair.a, pair.b, over)

    async def check(self, pair: DriftPair) -> Summary:
        a, b = self._pools[pair.a], self._pools[pair.b]
        comparisons = []
        for prompt in self._config.prompts:
            ta, tb = await asyncio.gather(self._ask(a, prompt), self._ask(b, prompt))
            comparisons.append(compare(ta, tb))
        return summarize(comparisons)

    async def _ask(self, pool: PoolClient, prompt: str) -> list[Step]:
        c = self._config
        body = canary_body(pool.config.model, prompt, c.max_tokens, c.top_logprobs, prompt_lp=False)
        self._seq += 1
        headers = {**pool.headers, "x-request-id": f"llmgw-drift-{self._seq}"}
        call = CallSpec(Kind.CHAT, orjson.dumps(body), headers, pool.key(body), _PRIORITY)
        data = await asyncio.wait_for(self._calls.unary(pool, call), c.timeout_s)
        try:
            return trajectory(orjson.loads(data))
        except DriftAnswerError as exc:
            raise DriftAnswerError(f"pool '{pool.config.name}': {exc}") from None
