"""What one request accumulates on its way through the relay's stages (`RequestContext`).

The stages (gateway.relay.pipeline) read and fill one context instead of passing a dozen values
along: the request's headers and body, its route or routed plan, the admission (ticket, or a
speculative one in flight, and the reservation the pool's usage is checked against), the cache
lookup. What settlement and observability read (tenant, usage, timings, status) lives on its base,
`gateway.edge.exchange.Exchange`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.budget.admission import Ticket
from gateway.budget.usage import checked
from gateway.dialects.exchange import DialectSend
from gateway.edge.exchange import Exchange, Kind, RequestHeaders
from gateway.guardrails.conformance import Check
from gateway.guardrails.plan import GuardPlan
from gateway.relay.normalize import Prepared
from gateway.relay.response_cache import Lookup
from gateway.routing.route import Route
from gateway.routing.table import Decided


class RequestContext(Exchange):
    __slots__ = (
        "headers", "t0", "body", "alias", "route", "decided", "prep", "ticket", "pending", "admitting",
        "look", "hit", "open_ended", "topup", "key", "reserved_in", "granted_out", "fault", "reply",
        "guard", "schema",
    )  # fmt: skip

    def __init__(self, kind: Kind, headers: RequestHeaders, rid: bytes, t0: float) -> None:
        super().__init__(rid, kind)
        self.headers = headers
        self.t0 = t0  # arrival (perf_counter)
        self.body: dict[str, Any] = {}
        self.alias = ""
        self.route: Route | None = None  # the tier that serves (a cascade: the one that answered)
        self.decided: Decided | None = None  # a routed alias's plan
        self.prep: Prepared | None = None  # the body for the pool
        self.ticket: Ticket | None = None  # the granted admission, to settle
        # The admission the pool call waits for: the ticket, or a speculative admission in flight.
        self.pending: Ticket | asyncio.Task[Ticket] | None = None
        self.admitting: asyncio.Task[Ticket] | None = None  # a speculative admission (limits.speculative)
        self.look: Lookup | None = None  # a cache lookup (the answer is stored on success)
        self.hit = False  # a cache hit answered
        self.open_ended = False  # the client set no max_tokens / max_completion_tokens
        self.topup = False  # a stream metered as it runs and topped up (budget.admission)
        self.key: int | None = None  # the prefix-affinity key for the replica picker
        # The reservation (relay._admit), what a pool's reported usage is checked against.
        self.reserved_in = 0  # the input estimate
        self.granted_out = 0  # the output the pool may generate, every multiplier included
        self.fault: str | None = None  # what was wrong with the pool's usage (gateway.budget.usage)
        self.reply: DialectSend | None = None  # a dialect's request: its answers' translation
        self.guard: GuardPlan | None = None  # the guardrails it is held to (the output policy is read later)
        self.schema: Check | None = None  # its response_format JSON schema, when its output policy checks it

    def record(self, usage: Any) -> None:
        """The pool's reported usage, checked against the reservation (a missing or insane count is
        replaced by the reservation; `fault` says why, for the caller to count)."""
        self.usage_in, self.usage_out, self.fault = checked(usage, self.reserved_in, self.granted_out)
        self.reported = True
