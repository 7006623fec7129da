"""The request record: one request's state on its way through the relay, as typed parts.

`RequestRecord` holds the HTTP exchange (`gateway.edge.exchange.Exchange`: id, endpoints, headers,
status, stream flag, arrival and end-to-end time, the disconnect watcher) and one reference per part.
Each part is written by the stage that decides it and is None until that stage runs: a request
refused by authentication has no `ask`, one answered by the cache no `budget`, one to a direct alias
no `decided`. A stage makes its part in one go when it runs, with what it decided, so a request pays
only for the stages it went through (and no class holds more than a stage's worth of fields).

    http     Exchange        arrival (Relay.handle); the stages that answer set its status
    who      Principal       1 authenticate: the key's tenant, pools, hold-queue rank (one per key)
    ask      Ask             2 read: the body (a dialect's translated), alias, requested adapter,
                               tags and end user;
                               guard: the guardrails it is held to, its schema check
    cache    CacheState      3 cache lookup: the lookup, status, hit
    route    Route           4 route: the tier that serves first (a direct alias's only one)
    decided  Decided         4 route: a routed alias's plan
    prep     Prepared        5 normalize: the body for the pool
    budget   Budget          6 admit: the reservation, its ticket, or its Speculation (an admission
                               in flight while the pool is called); 8 settle: its cost (Spend)
    answer   Answer          7 call (unary, stream, cascade; a hit: the cache stage): the tier that
                               answered, usage, capture, timings; 8 settle may correct the input
                               count it charged
    obs      Observed        9 observe (Observer.start, begin): root span, request-log notes

The served labels (alias, pool, adapter) are not stored: `Relay._end` takes them from the tier that
answered (`Route.served`; a hit: the alias and the cache) and hands them to the observer.

docs/architecture.md ("The request record") shows the same table; tests/unit/test_architecture_doc.py
holds it to these classes. Readers (the observer, request log, SLO judge, adapter metrics, cascade
runner, cache and guardrails stages) read the parts; types from higher layers are named for the type
checker only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.edge.exchange import Exchange
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.budget.admission import Ticket
    from gateway.budget.pricing import Spend
    from gateway.guardrails.conformance import Check
    from gateway.guardrails.plan import GuardPlan
    from gateway.relay.normalize import Prepared
    from gateway.relay.response_cache import Lookup
    from gateway.routing.route import Route
    from gateway.routing.table import Decided
    from gateway.tenancy.auth import Principal


class Ask:
    """What the client asked. Written by read (body, alias, adapter) and the input guardrails (guard,
    schema), which screen it right after."""

    __slots__ = ("body", "alias", "adapter", "guard", "schema", "tags", "end_user")

    body: dict[str, Any]  # the request as chat, completions or embeddings (a dialect's translated)
    alias: str
    adapter: str | None  # the LoRA adapter of `alias:adapter` as the client named it
    guard: GuardPlan | None  # the guardrails it is held to (its output policy is read later)
    schema: Check | None  # its response_format JSON schema, when the output policy checks it
    tags: tuple[str, ...]  # `x-llmgw-tags` / `metadata.tags`, checked (gateway.budget.labels)
    end_user: str | None  # OpenAI's `user` (Anthropic's `metadata.user_id`), checked

    def __init__(
        self,
        body: dict[str, Any],
        alias: str,
        adapter: str | None,
        tags: tuple[str, ...] = (),
        end_user: str | None = None,
    ) -> None:
        self.body = body
        self.alias = alias
        self.adapter = adapter
        self.guard = None
        self.schema = None
        self.tags = tags
        self.end_user = end_user


class CacheState:
    """The response cache's verdict. Written by the cache lookup (gateway/relay/_cached.py)."""

    __slots__ = ("look", "status", "hit")

    look: Lookup | None  # a cacheable request's lookup (its answer is stored on success)
    status: bytes  # hit, semantic-hit, miss, bypass (gateway.relay.response_cache)
    hit: bool  # the cache answered

    def __init__(self, look: Lookup | None, status: bytes, hit: bool) -> None:
        self.look = look
        self.status = status
        self.hit = hit


class Budget:
    """The admission against the token budgets. Written by admit (gateway/relay/_admit.py): the
    reservation, the ticket, or the speculative admission still in flight."""

    __slots__ = ("reserved_in", "granted_out", "topup", "ticket", "speculation", "spend")

    # The reservation, what a pool's reported usage is checked against (gateway.budget.usage).
    reserved_in: int  # the input estimate
    granted_out: int  # the output the pool may generate, every multiplier included
    topup: bool  # a stream metered as it runs and topped up (gateway.budget.admission)
    ticket: Ticket | None  # the granted admission, to settle
    speculation: Speculation | None  # admitted speculatively (docs/design/017)
    spend: Spend | None  # 8 settle: what it cost (micro-dollars), charged, counted and written once

    def __init__(self, reserved_in: int, granted_out: int, topup: bool) -> None:
        self.reserved_in = reserved_in
        self.granted_out = granted_out
        self.topup = topup
        self.ticket = None
        self.speculation = None
        self.spend = None


class Speculation:
    """A speculative admission (docs/design/017): the pool is called while `admitting` is in flight; a
    refusal arriving then cancels the request's task and is answered as `refusal`. Written by admit,
    which makes it, and by the admission's done-callback."""

    __slots__ = ("http", "admitting", "speculating", "refusal")

    http: Exchange  # whose call a refusal stops
    admitting: asyncio.Task[Ticket]
    speculating: bool  # until the relay awaits the admission itself (then it raises the refusal)
    refusal: GatewayError | None

    def __init__(self, http: Exchange, admitting: asyncio.Task[Ticket]) -> None:
        self.http = http
        self.admitting = admitting
        self.speculating = True
        self.refusal = None
        admitting.add_done_callback(self._on_admission)

    def _on_admission(self, admission: asyncio.Future[Ticket]) -> None:
        """Done-callback of the admission: a refusal stops the pool call in flight."""
        http = self.http
        if admission.cancelled() or http.finished:
            return
        err = admission.exception()
        # Anything else (a bug) surfaces where the relay awaits the admission, as it would unspeculated.
        if isinstance(err, GatewayError) and self.speculating:
            self.speculating = False
            self.refusal = err
            if http.task is not None:
                http.task.cancel()


class Answer:
    """The answer and what it cost. Written by the call stage that made it (gateway/relay/_unary.py,
    _stream.py, _conform.py, gateway/routing/cascade_runner.py; a hit: gateway/relay/_cached.py);
    settle (gateway/relay/_admit.py) may then replace the input count with what it charged, and a
    routed alias that learns adds its outcome record."""

    __slots__ = (
        "route", "usage_in", "usage_out", "usage_cached", "reported", "fault", "broken", "costs", "capture",
        "ttft", "tpot", "outcome",
    )  # fmt: skip

    route: Route | None  # the tier that answered (a cascade's may be a later one); None: the cache
    usage_in: int
    usage_out: int
    usage_cached: int  # of usage_in, served from the engine's prefix cache (priced at its cached rate)
    reported: bool  # usage came from the pool (else it is the gateway's own count)
    fault: str | None  # what was wrong with the pool's usage (gateway.budget.usage)
    broken: bool  # the pool broke the stream off after it started
    costs: list[tuple[str, float]] | None  # a cascade's (pool, USD) per priced call
    # The answer's bytes, kept when something reads them: the cache stores a miss's, a routed alias's
    # explorer judges it, the request log writes its text (LLMGW_REQUEST_LOG_TEXT).
    capture: list[bytes] | None
    ttft: float | None  # arrival -> first token event sent (streams relayed live)
    tpot: float | None  # mean time per output token after the first (streams)
    # A routed answer's outcome record (gateway.routing.learning), kept with the delivery so that
    # feedback on it can teach the router, on whichever replica the feedback reaches.
    outcome: bytes | None

    def __init__(self, route: Route | None, capture: list[bytes] | None) -> None:
        self.route = route
        self.usage_in = 0
        self.usage_out = 0
        self.usage_cached = 0
        self.reported = False
        self.fault = None
        self.broken = False
        self.costs = None
        self.capture = capture
        self.ttft = None
        self.tpot = None
        self.outcome = None


class Observed:
    """What observability keeps for the request. Written by the observer when the request starts
    (the root span, tracing on) and when its body is parsed (the request log's notes, log on); the
    stages add to the notes (routing decision, escalations, guardrails)."""

    __slots__ = ("span", "notes")

    span: Any  # the root span (gateway.observability.tracing.RootSpan), None when tracing is off
    notes: dict[str, Any] | None  # the request log's notes (routing decision, guardrails, the body)

    def __init__(self, span: Any, notes: dict[str, Any] | None) -> None:
        self.span = span
        self.notes = notes


class RequestRecord:
    """One request: its exchange and the parts its stages wrote (None: that stage has not run)."""

    __slots__ = ("http", "who", "ask", "cache", "route", "decided", "prep", "budget", "answer", "obs")

    http: Exchange
    who: Principal | None
    ask: Ask | None
    cache: CacheState | None
    route: Route | None
    decided: Decided | None
    prep: Prepared | None
    budget: Budget | None
    answer: Answer | None
    obs: Observed | None

    def __init__(self, http: Exchange) -> None:
        self.http = http
        self.who = None
        self.ask = None
        self.cache = None
        self.route = None
        self.decided = None
        self.prep = None
        self.budget = None
        self.answer = None
        self.obs = None
