"""The red team's burst, repeated: no shape of request gets more tokens admitted than the budget allows.

Two gateway processes share one Redis; each shape of request has its own key with a small
tokens-per-minute budget, and 200 requests of it arrive within 10 s (all shapes at once, alternating
between the gateways): chat, stream, stream without max_tokens (metered and topped up), completions
of 1, 20 and 100 prompts, n=4, and a cascade alias that always escalates (two calls per request).
"Tokens admitted" is what the simulators then reported to the clients of every admitted request;
it must stay within the budget plus one reservation of the shape (the one admission that may be in
flight when the budget runs out). Before reservations covered every multiplier, 4 requests of 100
prompts admitted 13.5x a key's budget.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import openai

from gateway.budget.estimate import PoolEstimate
from gateway.config import Model, OutputTokens, Route
from gateway.edge.exchange import Kind
from gateway.relay.normalize import prepare
from gateway.tenancy.keys import hash_key
from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import TenantKey
from tests.support.redis_server import RedisServer

BUDGET = 30_000  # tokens per minute, per shape's key
REQUESTS = 200
BURST_S = 10.0
DEFAULT_MAX, CAP = 1024, 2048  # the alias's output tokens (what an open-ended stream may use)
PASSAGE = (
    "The budget of a key is a number of tokens per minute. Every request reserves what it may use "
    "before the pool sees it, and settles what the pool reports once it is done; a request whose "
    "reservation does not fit waits or is refused. List the planets of the solar system, in order."
)


@dataclass(frozen=True)
class Shape:
    name: str
    kind: Kind
    params: dict[str, Any]  # the request, without model and prompt text
    alias: str = "sim"
    calls: int = 1  # pool calls per request (a cascade that always escalates: 2)

    def request(self, i: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.alias, **self.params}
        prompts = body.pop("prompts", None)
        if prompts is not None:
            # Short prompts, long answers: the red team's shape (the output multiplier is what matters).
            body["prompt"] = [f"{i}.{j}: name a planet" for j in range(prompts)]
            return body
        # A prompt long enough to calibrate the pool's input estimate (gateway.budget.estimate).
        text = f"request {i} of {self.name}: " + PASSAGE
        if self.kind is Kind.CHAT:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        return body

    def reservation(self) -> int:
        """The most one request of this shape may reserve: a fresh gateway's estimate, whole output."""
        model = Model(
            name="sim", route=Route(pool="sim"), max_tokens=OutputTokens(default=DEFAULT_MAX, cap=CAP)
        )
        prep = prepare(self.kind, self.request(REQUESTS), model, "sim")
        assert prep.max_tokens is not None
        return (PoolEstimate(1.0).tokens(prep.size) + prep.max_tokens * prep.outputs) * self.calls


SHAPES = [
    Shape("chat", Kind.CHAT, {"max_tokens": 200}),
    Shape("stream", Kind.CHAT, {"max_tokens": 200, "stream": True}),
    Shape("stream, no max_tokens", Kind.CHAT, {"stream": True}),
    Shape("completions, 1 prompt", Kind.COMPLETIONS, {"max_tokens": 200}),
    Shape("completions, 20 prompts", Kind.COMPLETIONS, {"max_tokens": 100, "prompts": 20}),
    Shape("completions, 100 prompts", Kind.COMPLETIONS, {"max_tokens": 100, "prompts": 100}),
    Shape("chat, n=4", Kind.CHAT, {"max_tokens": 100, "n": 4}),
    Shape("cascade alias", Kind.CHAT, {"max_tokens": 100}, alias="auto", calls=2),
]


@dataclass
class Outcome:
    admitted: int = 0
    refused: int = 0
    tokens: int = 0  # usage of the admitted requests, as the clients were told
    errors: list[str] = field(default_factory=list)


def _policy(path: Path, sims: dict[str, str], keys: dict[str, TenantKey]) -> Path:
    timeouts = "timeouts: {connect_s: 2, first_token_s: 20, total_s: 60}"
    out = f"max_tokens: {{default: {DEFAULT_MAX}, cap: {CAP}}}"
    lines = ["pools:"]
    lines += [
        f'  - {{name: {n}, model: sim, endpoints: {{static: ["{u}"]}}, {timeouts}}}' for n, u in sims.items()
    ]
    lines += [
        "models:",
        f"  - {{name: sim, route: {{pool: sim}}, {out}}}",
        "  - name: auto",
        f"    {out}",
        "    route:",
        "      policy:",
        "        tiers: [{pool: sim}, {pool: strong}]",
        "        # exp(mean logprob) never reaches 1: every request makes both calls.",
        "        cascade: {scorers: [{kind: logprob, accept_threshold: 1.0}], max_escalations: 1}",
        "limits: {backend: redis, on_backend_error: fail_closed}",
        "tenancy:",
        "  keys:",
    ]
    for k in keys.values():
        lines.append(
            f"    - {{id: {k.id}, sha256: {hash_key(k.key)}, org: {k.org}, app: {k.app}, "
            f"limits: {{tokens_per_min: {BUDGET}}}}}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


async def _one(client: openai.AsyncOpenAI, shape: Shape, i: int, out: Outcome) -> None:
    body = shape.request(i)
    stream = body.pop("stream", False)
    api: Any = client.chat.completions if shape.kind is Kind.CHAT else client.completions
    extra = {"ignore_eos": True}  # every choice runs to max_tokens: the costliest answer
    try:
        if stream:
            usage = None
            events = await api.create(
                **body, stream=True, stream_options={"include_usage": True}, extra_body=extra
            )
            async for chunk in events:
                usage = chunk.usage or usage
        else:
            usage = (await api.create(**body, extra_body=extra)).usage
    except openai.RateLimitError:
        out.refused += 1
        return
    except openai.APIError as exc:
        out.errors.append(f"{shape.name}: {exc!r}"[:300])
        return
    if usage is None:
        out.errors.append(f"{shape.name}: no usage")
        return
    out.admitted += 1
    out.tokens += usage.prompt_tokens + usage.completion_tokens


async def _burst(urls: list[str], keys: dict[str, TenantKey]) -> dict[str, Outcome]:
    outcomes = {s.name: Outcome() for s in SHAPES}
    clients = {
        (s.name, u): openai.AsyncOpenAI(
            base_url=f"{u}/v1",
            api_key=keys[s.name].key,
            max_retries=0,  # a refusal is an outcome here, not something to wait out
            timeout=60,
            # A fresh connection per request: reusing one the server is closing as idle is a connection
            # error that no retry-free client survives (it is no outcome of the limiter's).
            http_client=openai.DefaultAsyncHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0)),
        )
        for s in SHAPES
        for u in urls
    }
    tasks = []
    for i in range(REQUESTS):
        for s in SHAPES:
            client = clients[(s.name, urls[i % len(urls)])]
            tasks.append(asyncio.ensure_future(_one(client, s, i, outcomes[s.name])))
        await asyncio.sleep(BURST_S / REQUESTS)
    await asyncio.gather(*tasks)
    for c in clients.values():
        await c.close()
    return outcomes


async def test_no_shape_gets_more_than_its_budget(
    tmp_path: Path, redis_server: RedisServer, sims: SimFactory
) -> None:
    # Every engine step takes 10 ms: a request of 200 tokens runs for 2 s, so many are in flight at once
    # and the reservations (not the settlements) are what holds the budget.
    fast = ("--profile", "instant", "--step-base-ms", "10")
    pools = {"sim": sims("sim", *fast), "strong": sims("strong", *fast)}
    keys = {s.name: TenantKey.new(f"k{i}", f"org{i}", "burst") for i, s in enumerate(SHAPES)}
    policy = _policy(tmp_path / "policy.yaml", pools, keys)
    with ExitStack() as es:
        # One client process sends the 1,600 requests from one event loop on a shared box: a body may
        # reach the gateway over a second after its headers, which the edge's body grace (5 s, issue
        # 25) must allow; the default edge limits are kept on purpose.
        env: dict[str, str] = {}
        urls = [
            es.enter_context(gateway(policy, redis_server.url, tmp_path / f"gateway-{g}.log", env=env))[0]
            for g in "ab"
        ]
        outcomes = await _burst(urls, keys)

    rows = [("shape", "requests", "admitted", "tokens admitted", "budget", "reservation", "ratio")]
    for s in SHAPES:
        o = outcomes[s.name]
        rows.append(
            (
                s.name,
                str(REQUESTS),
                str(o.admitted),
                str(o.tokens),
                str(BUDGET),
                str(s.reservation()),
                f"{o.tokens / BUDGET:.2f}",
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    table = "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)
    print(f"\n[burst] two gateways, one Redis, {REQUESTS} requests per shape in {BURST_S:g} s\n{table}")

    errors = [e for o in outcomes.values() for e in o.errors]
    assert not errors, errors[:5]
    for s in SHAPES:
        o = outcomes[s.name]
        assert o.admitted + o.refused == REQUESTS, (s.name, o)
        assert o.refused > 0, f"{s.name}: the budget did not bind"  # not a vacuous bound
        assert o.admitted > 0, f"{s.name}: nothing admitted"
        assert o.tokens <= BUDGET + s.reservation(), (s.name, o.tokens, s.reservation())
