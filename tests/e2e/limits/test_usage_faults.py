"""A pool that misreports usage costs its own requests their reservation, and nothing else.

A fake pool (a real aiohttp server on its own port) answers OpenAI-shaped JSON and SSE with the usage
missing, negative, a string, or 10^18, behind a real gateway process on a real Redis. Each fault must
be answered 200 (never a 500), charge the request its whole reservation (read back from the next
request's `x-ratelimit-remaining-tokens`), be counted in `llmgw_ratelimit_usage_*_total`, and leave
another tenant's next request admitted as usual (10^18 used to ride on the next admission's script
and fail it with `ERR value is not an integer`).

The same stack checks a cancelled cascade: the client leaves while the second tier is still working;
the first tier's call must be charged as the pool reported it, the cut-off call at its input estimate.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from aiohttp import web

from gateway.edge.exchange import Kind
from gateway.relay.normalize import estimate_input_tokens
from gateway.tenancy.keys import hash_key
from tests.e2e.limits.conftest import gateway
from tests.support.limits_stack import TenantKey
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.redis_server import REDIS_SERVER
from tests.support.stack import Stack
from tests.support.thread_server import serve_in_thread

LIMIT = 100_000
MAX_TOKENS = 16
FAULTS: dict[str, Any] = {
    "missing": None,
    "negative": {"prompt_tokens": -5, "completion_tokens": -3, "total_tokens": -8},
    "string": {"prompt_tokens": "12", "completion_tokens": "3", "total_tokens": "15"},
    "huge": {"prompt_tokens": 10**18, "completion_tokens": 10**18, "total_tokens": 2 * 10**18},
}
CASES = [(mode, stream) for mode in FAULTS for stream in (False, True)]


async def _fake_pool(request: web.Request) -> web.StreamResponse:
    """Answers every chat completion well, except for its usage (the path's first part names how)."""
    mode = request.match_info["mode"]
    body = orjson.loads(await request.read())
    usage = FAULTS[mode]
    base = {"id": "chatcmpl-fake", "created": 1, "model": "m"}
    if not body.get("stream"):
        answer: dict[str, Any] = {
            **base,
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
            ],
        }
        if usage is not None:
            answer["usage"] = usage
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    chunk = {**base, "object": "chat.completion.chunk"}
    for delta, finish in (({"role": "assistant", "content": "h"}, None), ({"content": "i"}, "stop")):
        event = {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
    if usage is not None:
        await resp.write(b"data: " + orjson.dumps({**chunk, "choices": [], "usage": usage}) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def _policy(path: Path, fake: str, sims: dict[str, str], keys: list[TenantKey]) -> Path:
    timeouts = "timeouts: {connect_s: 2, first_token_s: 20, total_s: 60}"
    pools = [
        f'  - {{name: {m}, model: m, endpoints: {{static: ["{fake}/{m}"]}}, {timeouts}}}' for m in FAULTS
    ]
    pools += [
        f'  - {{name: {n}, model: m, endpoints: {{static: ["{u}"]}}, {timeouts}}}' for n, u in sims.items()
    ]
    out = f"max_tokens: {{default: {MAX_TOKENS}, cap: 64}}"
    models = [f"  - {{name: {n}, route: {{pool: {n}}}, {out}}}" for n in [*FAULTS, *sims]]
    models += [
        "  - name: auto",
        f"    {out}",
        "    route:",
        "      policy:",
        "        tiers: [{pool: cheap}, {pool: strong}]",
        "        # exp(mean logprob) never reaches 1: the cheap answer is always escalated.",
        "        cascade: {scorers: [{kind: logprob, accept_threshold: 1.0}], max_escalations: 1}",
    ]
    lines = ["pools:", *pools, "models:", *models, "limits: {backend: redis, on_backend_error: fail_closed}"]
    lines += ["tenancy:", "  keys:"]
    for k in keys:
        lines.append(
            f"    - {{id: {k.id}, sha256: {hash_key(k.key)}, org: {k.org}, app: {k.app}, "
            f"limits: {{tokens_per_min: {LIMIT}}}}}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(frozen=True)
class FaultStack:
    url: str
    keys: dict[str, TenantKey]
    sims: dict[str, str]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    if REDIS_SERVER is None:
        pytest.fail("redis-server binary not found on PATH (apt install redis-server)")
    tmp = tmp_path_factory.mktemp("usage-faults")
    names = [f"{m}-{'stream' if s else 'unary'}" for m, s in CASES] + ["cascade"]
    keys = {n: TenantKey.new(n, "acme", n) for n in names}
    keys |= {f"other-{n}": TenantKey.new(f"other-{n}", "globex", n) for n in names}
    fake_port = free_port()

    def build() -> web.Application:
        app = web.Application()
        app.router.add_post("/{mode}/v1/chat/completions", _fake_pool)
        return app

    with Stack(tmp) as s:
        redis = s.redis()
        s.enter(serve_in_thread(fake_port, build, "fake pool"))
        cheap = s.sim("m", "--profile", "instant", name="sim-cheap")
        # Every engine step of the strong tier takes 3 s: a client with a 1 s timeout leaves mid-call.
        strong = s.sim("m", "--profile", "instant", "--step-base-ms", "3000", name="sim-strong")
        urls = {"cheap": cheap.url, "strong": strong.url}
        policy = _policy(tmp / "policy.yaml", f"http://127.0.0.1:{fake_port}", urls, list(keys.values()))
        url, _ = s.enter(gateway(policy, redis.url, tmp / "gateway.log"))
        yield FaultStack(url, keys, urls)


def _client(stack: FaultStack, key: str, timeout: float = 20) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=timeout)


def _messages(text: str) -> Any:  # the SDK wants its TypedDicts; a plain list of dicts is what it sends
    return [{"role": "user", "content": text}]


def _reservation(text: str) -> int:
    """What a fresh gateway reserves for a chat of `text` with MAX_TOKENS (no calibration yet)."""
    return estimate_input_tokens(Kind.CHAT, {"messages": _messages(text)}, 1.0) + MAX_TOKENS


def _remaining_after_probe(stack: FaultStack, key: str) -> tuple[int, int]:
    """A well-behaved request of `key`: (its x-ratelimit-remaining-tokens, its own reservation)."""
    text = "probe: count to three"
    raw = _client(stack, key).chat.completions.with_raw_response.create(
        model="cheap", messages=_messages(text), max_tokens=MAX_TOKENS
    )
    assert raw.status_code == 200
    return int(raw.headers["x-ratelimit-remaining-tokens"]), _reservation(text)


def _fault_metrics(stack: FaultStack) -> str:
    return httpx.get(f"{stack.url}/metrics", timeout=10).text


@pytest.mark.parametrize(
    ("mode", "stream"), CASES, ids=[f"{m}-{'stream' if s else 'unary'}" for m, s in CASES]
)
def test_a_usage_fault_charges_the_reservation_and_nothing_else(
    stack: FaultStack, mode: str, stream: bool
) -> None:
    name = f"{mode}-{'stream' if stream else 'unary'}"
    key, other = stack.keys[name].key, stack.keys[f"other-{name}"].key
    text = f"misreported usage, {name}: say hi"
    before = _fault_metrics(stack)
    client = _client(stack, key)
    kwargs: dict[str, Any] = {"model": mode, "messages": _messages(text), "max_tokens": MAX_TOKENS}
    if stream:
        with client.chat.completions.with_streaming_response.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        ) as resp:
            assert resp.status_code == 200
            body = resp.read()
        assert b"data: [DONE]" in body and b'"error"' not in body
    else:
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        assert raw.status_code == 200
        assert raw.parse().choices[0].message.content == "hi"
    time.sleep(0.3)  # settlement is fire-and-forget

    # Charged: the whole reservation, whatever the pool said.
    remaining, probe = _remaining_after_probe(stack, key)
    assert remaining == LIMIT - _reservation(text) - probe, (remaining, _reservation(text), probe)

    # Another tenant is admitted as usual right after (a huge value no longer breaks the script).
    remaining, probe = _remaining_after_probe(stack, other)
    assert remaining == LIMIT - probe

    after = _fault_metrics(stack)
    if mode == "missing":
        series, labels = "llmgw_ratelimit_usage_missing_total", f'pool="{mode}"'
    else:
        reason = {"negative": "negative", "string": "not_integer", "huge": "absurd"}[mode]
        series, labels = "llmgw_ratelimit_usage_invalid_total", f'pool="{mode}",reason="{reason}"'
    assert metric(after, series, labels) == metric(before, series, labels) + 1


def test_a_cancelled_cascade_charges_the_calls_it_made(stack: FaultStack) -> None:
    key = stack.keys["cascade"].key
    text = "cascade: name three colours"
    sim_before = _sim_tokens(stack.sims["cheap"])
    with pytest.raises(openai.APITimeoutError):
        # The cheap tier answers at once and is escalated; the strong tier takes 3 s: the client leaves.
        _client(stack, key, timeout=1.0).chat.completions.create(
            model="auto", messages=_messages(text), max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True}
        )
    time.sleep(0.5)
    cheap = _sim_tokens(stack.sims["cheap"]) - sim_before
    assert cheap > MAX_TOKENS  # the cheap call ran (prompt + 16 generated tokens)
    remaining, probe = _remaining_after_probe(stack, key)
    cut_off = estimate_input_tokens(Kind.CHAT, {"messages": _messages(text)}, 1.0)  # one call's share
    # Before the fix the cheap call was forgotten: the request settled at its input estimate only.
    assert LIMIT - remaining - probe == cheap + cut_off, (remaining, probe, cheap, cut_off)


def _sim_tokens(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return int(metric(text, "vllm:prompt_tokens_total") + metric(text, "vllm:generation_tokens_total"))
