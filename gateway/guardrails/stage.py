"""The input guardrails as a relay stage: after the body is parsed (and a dialect's translated to
chat), before the cache lookup, routing and the pool, so a refused request costs no lookup or call and a
redacted prompt is what the cache key, the pool and the request log see.

Per request without a guardrail: one `GuardTable.lookup` (a dict get) returning None. With one: the
screen (gateway/guardrails/screen.py), then for each event a counter increment
(`llmgw_guardrail_events_total{guardrail,action}`, children memoised), a trace event on the root span
(`llmgw.guardrail`, when tracing is on), and an entry in the request log's `guardrails` list (when the
log is on). The relay's json_schema output policy records its events through `record` too
(gateway/relay/_conform.py). Nothing records matched text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.edge.exchange import Kind
from gateway.guardrails.plan import GuardPlan, GuardTable
from gateway.guardrails.screen import Event, screen
from gateway.observability.lean import CounterChild
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import TraceHooks

if TYPE_CHECKING:
    from gateway.record import RequestRecord

__all__ = ["InputGuard"]


class InputGuard:
    def __init__(self, table: GuardTable, metrics: Metrics, tracing: TraceHooks) -> None:
        self.table = table
        self._events = metrics.guardrail_events
        self._children: dict[tuple[str, str], CounterChild] = {}
        self._trace = tracing

    def plan(self, req: RequestRecord, alias: str) -> GuardPlan | None:
        who = req.who
        if who is None:
            return None
        return self.table.lookup(alias, who.tenant.tier, who.tenant.key_id)

    def screen(self, req: RequestRecord, kind: Kind, alias: str, body: dict[str, Any]) -> GuardPlan | None:
        """Screen `body` (rewritten in place by redactions); raises the refusal. Returns the plan (its
        output policy is the relay's to apply), None when no guardrail applies."""
        plan = self.plan(req, alias)
        if plan is None or not plan.checks_input:
            return plan
        events, refusal = screen(kind, body, plan)
        if events:
            self.record(req, events)
        if refusal is not None:
            raise refusal
        return plan

    def count(self, guardrail: str, action: str) -> None:
        key = (guardrail, action)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._events.labels(guardrail, action)
        child.inc()

    def record(self, req: RequestRecord, events: list[Event]) -> None:
        """Count `events`, and note them in the request's log notes and on its root span (`req.obs`)."""
        for e in events:
            self.count(e.guardrail, e.action)
        obs = req.obs
        if obs is None:
            return
        if obs.notes is not None:
            obs.notes.setdefault("guardrails", []).extend(
                {"guardrail": e.guardrail, "action": e.action, "where": e.where} for e in events
            )
        if obs.span is not None:
            for e in events:
                attrs = {"llmgw.guardrail": e.guardrail, "llmgw.action": e.action, "llmgw.where": e.where}
                self._trace.event(obs.span, "llmgw.guardrail", attrs)
