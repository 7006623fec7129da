"""Exploration's I/O: after a cheap tier answered a drawn request, ask the strong tier too, judge, learn.

The client already has its answer; everything here runs in a background task the relay never awaits.
Each exploration is admitted, like any request, against a gateway-owned budget: the org
`llmgw-explore` (one key per routed alias), whose limits are the tenancy tier `explore.tier` names,
so exploration spends exactly what the platform team allows, across replicas when the limiter is
Redis. A refusal skips the exploration (counted `budget`). The calls queue behind every client
(hold-queue priority -1) and at most `explore.max_inflight` run at once per alias.

Judging: `agreement` compares final answers (router.judge.AgreementJudge, no call); `grader` asks the
strong tier to grade the cheap answer against its own (router.judge.grader_messages; one more call,
charged to the same budget). A verdict becomes one outcome in the memory and one sample of the live
estimate; no verdict teaches nothing (counted `unjudged`).

Cascade steps feed the memory too (`escalated`): an escalated cascade has a cheap and a strong answer
to the same prompt. Those are not a random sample of the traffic, so they never enter the estimate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.budget.admission import Admissions, Ticket
from gateway.budget.usage import UsageFaults
from gateway.edge.exchange import Kind
from gateway.errors import GatewayError
from gateway.observability.metrics import Metrics
from gateway.observability.request_log import response_text
from gateway.routing.aliases import answer_of, call_body
from gateway.routing.learning import Learning
from gateway.routing.table import Decided
from gateway.upstream.calls import CallSpec, PoolCalls
from ratelimit.model import Tenant
from router.judge import AgreementJudge, grader_messages, grader_verdict
from router.plan import Answer, Call

__all__ = ["EXPLORE_ORG", "Delivery", "Explorer"]

EXPLORE_ORG = "llmgw-explore"
_PRIORITY = -1  # behind every client request in a pool's hold queue
_GRADER_MAX_TOKENS = 4
_log = logging.getLogger("llmgw.router")


@dataclass(frozen=True, slots=True)
class Delivery:
    """A routed request answered 200: what exploring it needs from the relay."""

    tier: int  # the tier that answered
    rid: bytes
    body: dict[str, Any]  # the request as sent to the pool (its model rewritten per tier)
    captured: list[bytes] | None  # the answer's bytes, when it was drawn for exploration
    ticket: Ticket | None  # the client's admission: its estimates size the strong call's reservation
    cost: float  # what the answer cost at its tier's price (USD)


class Explorer:
    def __init__(self, metrics: Metrics, calls: PoolCalls, admissions: Admissions) -> None:
        self._metrics = metrics
        self._faults = UsageFaults(metrics)
        self._calls = calls
        self._admissions = admissions
        self._agreement = AgreementJudge()
        self._tasks: set[asyncio.Task[None]] = set()
        self._seq = 0

    def after(self, d: Decided, a: Delivery) -> None:
        """Count the answer in the estimate's strong share, and if it was drawn and a cheap tier
        answered it, explore it in the background."""
        learning = d.alias.learning
        if learning is None:
            return
        learning.routed(a.tier >= learning.strong_tier)
        if not d.explore or a.tier >= learning.strong_tier or not a.captured or a.ticket is None:
            return
        cheap = response_text(b"".join(a.captured))
        if not cheap:
            self._metrics.router_explore.labels(d.alias.name, "unjudged").inc()
            return
        self._spawn(self._explore(d, learning, a, cheap))

    def escalated(self, d: Decided, answers: list[Answer], accepted: Answer) -> None:
        """An escalated cascade, accepted on the strong tier: its first cheap answer, judged against
        the accepted one, is an outcome for the memory (never a sample of the estimate)."""
        learning = d.alias.learning
        if learning is None or learning.memory is None or d.embedding is None:
            return
        if accepted.call.tier < learning.strong_tier:
            return
        cheap = next((a for a in answers if a.ok and a.call.tier < accepted.call.tier and a.text), None)
        if cheap is None or not accepted.text:
            return
        judge = learning.explore.judge if learning.explore is not None else "agreement"
        if judge == "agreement":
            verdict = self._agreement.verdict(d.prompt, cheap.text, accepted.text)
            if verdict is not None:
                learning.learn(d.embedding, verdict, "cascade")
            return
        self._spawn(self._grade_cascade(d, learning, cheap.text, accepted.text))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)  # a strong reference until it ends
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Shutdown: exploration is best effort; cancel what runs (their tickets are settled)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _tenant(self, d: Decided, learning: Learning) -> Tenant:
        assert learning.explore is not None
        return Tenant(
            key_id=f"{EXPLORE_ORG}/{d.alias.name}",
            app=d.alias.name,
            org=EXPLORE_ORG,
            tier=learning.explore.tier,
        )

    def _rid(self, rid: bytes) -> str:
        self._seq += 1
        return f"{rid.decode()}-explore-{self._seq}"

    async def _explore(self, d: Decided, learning: Learning, a: Delivery, cheap: str) -> None:
        alias = d.alias.name
        assert a.ticket is not None
        learning.inflight += 1
        try:
            estimate = (a.ticket.input_estimate, a.ticket.output_granted)
            strong = await self._strong_call(d, learning, a.rid, a.body, estimate)
            if strong is None:
                return
            verdict, grade_cost = await self._judge(d, learning, a.rid, cheap, strong.text)
            self._metrics.router_explore_cost.labels(alias).inc((strong.cost_usd or 0.0) + grade_cost)
            if verdict is None:
                self._metrics.router_explore.labels(alias, "unjudged").inc()
                return
            self._metrics.router_explore.labels(alias, "judged").inc()
            learning.sample(verdict, a.cost, strong.cost_usd or 0.0)
            if d.embedding is not None:
                learning.learn(d.embedding, verdict, "explore")
        except asyncio.CancelledError:
            raise
        except Exception:  # best effort: never let one exploration's fault escape the task
            self._metrics.router_explore.labels(alias, "failed").inc()
            _log.exception("exploration of routed alias '%s' failed", alias)
        finally:
            learning.inflight -= 1

    async def _strong_call(
        self,
        d: Decided,
        learning: Learning,
        rid: bytes,
        body: dict[str, Any],
        estimate: tuple[int, int],
        messages: list[dict[str, Any]] | None = None,
    ) -> Answer | None:
        """One call to the strong tier under the gateway-owned budget (None: refused or failed)."""
        tier = learning.strong_tier
        pool = d.routes[tier].pool
        kind = "grader" if messages is not None else "answer"
        request_id = self._rid(rid)
        try:
            ticket = await self._admissions.admit(
                request_id, self._tenant(d, learning), pool.config.name, estimate[0], estimate[1], False
            )
        except GatewayError:  # refused, too large, or the limiter down under fail_closed
            self._metrics.router_explore.labels(d.alias.name, "budget").inc()
            return None
        inp = out = 0
        try:
            src = (
                body if messages is None else {**body, "messages": messages, "max_tokens": _GRADER_MAX_TOKENS}
            )
            if messages is not None:
                src.pop("max_completion_tokens", None)
                src["temperature"] = 0
            payload = call_body(src, pool.config.model, False)
            headers = {**pool.headers, "x-request-id": request_id}
            data = await self._calls.unary(
                pool, CallSpec(Kind.CHAT, payload, headers, pool.key(src), _PRIORITY)
            )
            parsed = orjson.loads(data)
            if not isinstance(parsed, dict):
                raise ValueError("not a chat completion")
            # The pool's usage, checked against the reservation like every other call's: a missing or
            # insane count is charged as reserved, not as zero.
            self._faults.settle_answer(pool.config.name, parsed, *estimate)
            price = d.alias.policy.tiers[tier].price
            answer = answer_of(Call(tier), parsed, price.cost if price is not None else None)
            inp, out = answer.input_tokens, answer.output_tokens
        except (GatewayError, ValueError):
            self._metrics.router_explore.labels(d.alias.name, "failed").inc()
            return None
        except asyncio.CancelledError:
            inp = estimate[0]  # cut off in flight: its prompt was processed
            raise
        finally:
            self._admissions.settle(ticket, inp, out)
            if inp or out:
                self._metrics.router_explore_tokens.labels(d.alias.name, kind).inc(inp + out)
        return answer

    async def _judge(
        self, d: Decided, learning: Learning, rid: bytes, cheap: str, strong: str
    ) -> tuple[float | None, float]:
        """(verdict, what judging cost in USD)."""
        assert learning.explore is not None
        if learning.explore.judge == "agreement":
            return self._agreement.verdict(d.prompt, cheap, strong), 0.0
        messages = grader_messages(d.prompt, cheap, strong)
        # Reserved generously (~3 characters per token); settled to the grader's real usage.
        chars = sum(len(m["content"]) for m in messages)
        graded = await self._strong_call(
            d, learning, rid, {}, (chars // 3 + 16, _GRADER_MAX_TOKENS), messages
        )
        if graded is None:
            return None, 0.0
        return grader_verdict(graded.text), graded.cost_usd or 0.0

    async def _grade_cascade(self, d: Decided, learning: Learning, cheap: str, strong: str) -> None:
        with contextlib.suppress(Exception):
            verdict, _ = await self._judge(d, learning, b"cascade", cheap, strong)
            if verdict is not None and d.embedding is not None:
                learning.learn(d.embedding, verdict, "cascade")
