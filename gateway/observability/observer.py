"""What happens when a request ends, beyond the relay's own counters: SLO verdict (goodput), cost,
accepted outputs, and the memory of delivered answers that feedback rates.

The relay calls `Observer.finish` once per request, in its `finally`, after settlement (so the usage
it reads is the usage the tenant was charged). Everything here is resolved at start-up (SLO children
per alias and pool, prices) or created once per (org, pool): the hot path does dict lookups and
counter increments only.

It also zero-initialises the labelled counters that alerts select by label value (retry outcomes per
pool): a counter child that never fired is absent, not 0, and `rate()` over an absent series makes an
alert unevaluable and a dashboard panel say "No data" instead of 0.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gateway.config import Policy
from gateway.edge.exchange import Kind, RequestIds
from gateway.ledger.model import SpendRow
from gateway.ledger.writer import Ledger
from gateway.observability.cost import CostMetrics
from gateway.observability.feedback import Feedback, FeedbackStore
from gateway.observability.goodput import SloMetrics
from gateway.observability.metrics import Metrics
from gateway.observability.request_log import RequestLog
from gateway.observability.tracing import NoTracing, TraceHooks
from gateway.record import Observed
from ratelimit.model import MICRO_USD

if TYPE_CHECKING:
    from gateway.budget.pricing import Spend
    from gateway.record import RequestRecord
    from ratelimit.model import Tenant

FEEDBACK_TTL_S = 3600.0
FEEDBACK_MAX_ENTRIES = 50_000
RETRY_OUTCOMES = ("retried", "budget_exhausted", "no_other_replica")


class Observer:
    def __init__(
        self,
        policy: Policy,
        metrics: Metrics,
        feedback_ttl_s: float = FEEDBACK_TTL_S,
        feedback_max_entries: int = FEEDBACK_MAX_ENTRIES,
        request_log: RequestLog | None = None,
        tracing: TraceHooks | None = None,
    ) -> None:
        registry = metrics.registry
        for pool in policy.pools:
            for outcome in RETRY_OUTCOMES:
                metrics.retries.labels(pool.name, outcome)
        self._slo = SloMetrics(policy, registry).by_alias
        self.cost = CostMetrics(policy, registry)
        self.adapters = metrics.adapters
        self.feedback = Feedback(FeedbackStore(feedback_ttl_s, feedback_max_entries), self.cost, registry)
        self._remember = self.feedback.remember
        self.log = request_log
        self.ledger: Ledger | None = None  # the spend ledger, set by the app when `ledger.enabled`
        self._ledger_ids = RequestIds()  # ledger ids of requests whose x-request-id the client chose
        self.tracing: TraceHooks = tracing or NoTracing()
        self._tracer = self.tracing if self.tracing.enabled else None
        # Whether `start` and `begin` do anything (tracing or the request log is on): the relay skips
        # calling them otherwise.
        self.per_request = self._tracer is not None or request_log is not None

    def start(self, req: RequestRecord, kind: Kind, headers: list[tuple[bytes, bytes]]) -> None:
        """A request arrived: its root span when tracing is on (current until `finish`; `req.obs`)."""
        if self._tracer is not None:
            req.obs = Observed(self._tracer.start_request(kind, headers), None)

    def begin(self, req: RequestRecord, kind: Kind, body: dict[str, Any]) -> None:
        """A request's body is parsed: its span's request attributes, what the request log needs."""
        obs = req.obs
        if obs is not None and obs.span is not None:
            self.tracing.request_body(obs.span, kind, body)
        if self.log is not None:
            notes = self.log.begin(body)
            if obs is None:
                req.obs = Observed(None, notes)
            else:
                obs.notes = notes

    def finish(self, req: RequestRecord, model: str, pool: str, adapter: str | None) -> None:
        """One request ended, served by `model` on `pool` (with a LoRA `adapter`), or "-" before
        routing; its status, e2e and usage are on `req` (`req.who` is None before authentication)."""
        x, answer = req.http, req.answer
        status = x.status
        if answer is not None:
            usage_in, usage_out = answer.usage_in, answer.usage_out
        else:
            usage_in = usage_out = 0
        slo = self._slo.get((model, pool))
        verdict = slo.record(x, answer) if slo is not None else None
        cost: float | None = None
        who = req.who
        tenant = who.tenant if who is not None else None
        budget = req.budget
        spend = budget.spend if budget is not None else None
        if tenant is not None:
            org = tenant.org
            self.cost.count(org, pool, status, usage_in, usage_out)
            if spend is not None and spend.parts:
                # Computed once at settlement (gateway.budget.pricing): the dollar budgets were charged
                # the same micro-dollars, and the ledger gets them too.
                for call_pool, micro in spend.parts:
                    self.cost.charge(org, call_pool, micro / MICRO_USD)
                cost = spend.micro / MICRO_USD
            if self.ledger is not None:
                self._ledger_row(req, tenant, model, pool, adapter, spend, usage_in, usage_out)
            if status == 200:
                self.cost.accept(org, pool)
                self._remember(org, x.rid.decode(), pool, answer.outcome if answer is not None else None)
        if adapter is not None:
            self.adapters.finish(req, pool, adapter)
        if self.log is not None:
            self.log.write(req, model, pool, adapter, cost, verdict)
        obs = req.obs
        if obs is not None and obs.span is not None:
            cache = req.cache
            attrs = {
                "gen_ai.usage.input_tokens": usage_in,
                "gen_ai.usage.output_tokens": usage_out,
                "gen_ai.response.time_to_first_chunk": answer.ttft if answer is not None else None,
                "llmgw.request_id": x.rid.decode(),
                "llmgw.alias": model,
                "llmgw.pool": pool,
                "llmgw.adapter": adapter,
                "llmgw.org": tenant.org if tenant else None,
                "llmgw.app": tenant.app if tenant else None,
                "llmgw.cost_usd": cost,
                "llmgw.slo": None if verdict is None else ("met" if verdict else "missed"),
                "llmgw.cache": cache.status.decode() if cache is not None else None,
            }
            self.tracing.end_request(obs.span, attrs, status)

    def _ledger_row(
        self,
        req: RequestRecord,
        tenant: Tenant,
        model: str,
        pool: str,
        adapter: str | None,
        spend: Spend | None,
        usage_in: int,
        usage_out: int,
    ) -> None:
        """One row of the spend ledger: every finished request of a tenant, refused ones included."""
        assert self.ledger is not None
        ask, cache, x = req.ask, req.cache, req.http
        # The ledger's key is always an id the gateway made: a client's own x-request-id may repeat,
        # or name another tenant's next id, and the ledger keeps one row per id.
        rid = x.rid if x.rid != x.headers.request_id else self._ledger_ids.new()
        self.ledger.record(
            SpendRow(
                request_id=rid.decode(),
                at=time.time(),
                org=tenant.org,
                app=tenant.app,
                key_id=tenant.key_id,
                tags=ask.tags if ask is not None else (),
                end_user=ask.end_user if ask is not None else None,
                alias=ask.alias if ask is not None else model,
                pool=pool,
                adapter=adapter,
                tier=tenant.tier,
                tokens_in=usage_in,
                tokens_out=usage_out,
                tokens_cached=req.answer.usage_cached if req.answer is not None else 0,
                cost_micro_usd=spend.micro if spend is not None else 0,
                status=req.http.status,
                cache_hit=cache is not None and cache.hit,
            )
        )
