"""What the engine does behind the API, read from its /metrics: disconnects, the prefix cache, the metric
names the gateway's scraper, dashboards and alerts use, replica picking over two replicas, and budget
settlement against the engine's own token counts."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from pools.vllm_metrics import parse_load
from tests.conformance.conftest import BLOCK, Backend
from tests.support.chart_names import families, names_in_chart
from tests.support.poll import wait_until
from tests.support.prom import metric

pytestmark = pytest.mark.conformance

RUNNING = "vllm:num_requests_running"
# A long request: LONG_N choices x 1,000 tokens. It must outlast what a test does while it runs (the
# least-load test's six short requests; the disconnect test's path from the client closing to vLLM
# aborting, through the gateway). 16 choices ended first in CI, in both tests: the tiny model is fast,
# and the engine generates on while the relay and the client are behind it. 48 last ~3x as long and fit
# the KV cache (1 GiB: 48 x 8 blocks of 128 tokens).
LONG_N = 48
GENERATED = "vllm:generation_tokens_total"
ABORTS = ("vllm:request_success_total", 'finished_reason="abort"')
POLL = {"timeout": 5.0, "interval": 0.05}
SLOW = {"timeout": 30.0, "interval": 0.5}  # generation to stop (the disconnect test), on a loaded machine


SNIPPET = "def value(self, key):\n    return self.items[key]\n"  # ~16 tokens of the tiny model's BPE


def _long_prompt(repeats: int) -> str:
    # A fresh nonce first: no earlier test can have cached these blocks.
    return f"{uuid.uuid4().hex}\n" + SNIPPET * repeats


@pytest.mark.parametrize("via", ["direct", "gateway"])
def test_client_disconnect_stops_generation(backend: Backend, via: str) -> None:
    """vLLM 0.32: a client that leaves a stream takes its request out of the batch and generation stops;
    the abort counter does not move."""
    base = backend.replicas[0] if via == "direct" else backend.gateway
    headers = {"authorization": f"Bearer {backend.api_key}"} if via == "gateway" else {}
    before_gen = metric(backend.metrics(), GENERATED)
    before_aborts = metric(backend.metrics(), *ABORTS)
    # 48 x 1,000 tokens (ignore_eos: a finish is exactly 48,000): ~12 s for the real engine on an idle
    # machine, so a finish cannot pass for a stop
    body = {"model": "tiny", "prompt": "tell a long story", "max_tokens": 1000, "n": LONG_N}
    body |= {"ignore_eos": True, "stream": True}
    t0 = time.monotonic()
    seen: list[tuple[float, float, float]] = []  # (seconds since the request, running, generated)

    def stopped() -> bool:
        """Nothing runs, and no token was generated since the last poll."""
        text = backend.metrics()
        seen.append((round(time.monotonic() - t0, 2), metric(text, RUNNING), metric(text, GENERATED)))
        return len(seen) > 1 and seen[-1][1] == 0 and seen[-1][2] == seen[-2][2]

    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{base}/v1/completions", json=body, headers=headers) as resp,
    ):
        assert resp.status_code == 200
        lines = resp.iter_lines()
        data = 0
        while data < 5:
            data += next(lines).startswith("data: ")
        # Leave at once. Waiting here for the gauge to show all 48 (the least-load test checks that a
        # choice is a running request) let the engine finish first: on a loaded machine one read of
        # /metrics took 5 s, and the engine generates on while the client and the relay are behind it.
        left = round(time.monotonic() - t0, 2)
    wait_until(stopped, lambda: f"generation to stop; (s, running, generated): {seen}", **SLOW)
    # Fewer than every choice's 1,000 tokens: it stopped (if the disconnect had not reached the engine,
    # the polls would have waited for all 48,000). How many came before the engine noticed depends on
    # the machine: a few hundred idle, ~15,600 under two CPU hogs.
    generated = seen[-1][2] - before_gen
    assert 5 <= generated < LONG_N * 1000, f"{generated} generated; left at {left} s; polled {seen}"
    assert metric(backend.metrics(), *ABORTS) == before_aborts


def test_prefix_cache_counts_whole_blocks(backend: Backend) -> None:
    """The same long prompt twice: the second reuses every full 128-token block but the one holding the
    last prompt token; hits are counted in whole blocks (vLLM 0.32 on CPU measured +768 of 867)."""
    for replica in (0, 1):
        client = backend.direct(replica)
        prompt = _long_prompt(40)
        before = backend.metrics(replica)
        usages = []
        for _ in range(2):
            comp = client.completions.create(model="tiny", prompt=prompt, max_tokens=2)
            assert comp.usage is not None
            usages.append(comp.usage)
        after = backend.metrics(replica)
        n = usages[0].prompt_tokens
        assert 300 < n < 1000
        expected_hits = (n - 1) // BLOCK * BLOCK

        def delta(name: str, text0: str = before, text1: str = after) -> float:
            return metric(text1, name) - metric(text0, name)

        assert delta("vllm:prefix_cache_queries_total") == 2 * n
        assert delta("vllm:prefix_cache_hits_total") == expected_hits
        assert delta("vllm:prompt_tokens_cached_total") == expected_hits
        assert delta("vllm:prompt_tokens_total") == 2 * n
        assert [u.completion_tokens_details for u in usages] == [None, None]
        details = [u.prompt_tokens_details for u in usages]
        if replica == 0:  # default flags: no details at all
            assert details == [None, None]
        else:  # --enable-prompt-tokens-details
            assert [d.cached_tokens if d else None for d in details] == [0, expected_hits]


def test_stream_usage_carries_cached_tokens_only_with_the_flag(backend: Backend) -> None:
    prompt = _long_prompt(25)
    for replica, flag in ((0, False), (1, True)):
        client = backend.direct(replica)
        client.completions.create(model="tiny", prompt=prompt, max_tokens=1)
        chunks = list(
            client.completions.create(
                model="tiny", prompt=prompt, max_tokens=2, stream=True, stream_options={"include_usage": True}
            )
        )
        usage = chunks[-1].usage
        assert usage is not None
        if flag:
            assert usage.prompt_tokens_details is not None
            assert usage.prompt_tokens_details.cached_tokens == (usage.prompt_tokens - 1) // BLOCK * BLOCK
        else:
            assert usage.prompt_tokens_details is None


# Families an engine exports only with an option on: speculation (checked against a speculating
# server in test_conformance_speculative) and LoRA (test_conformance_lora).
OPTIONAL = ("vllm:spec_decode_", "vllm:lora_")


def test_every_vllm_metric_the_chart_and_scraper_use_exists(backend: Backend) -> None:
    backend.direct().completions.create(model="tiny", prompt="warm up the histograms", max_tokens=3)
    text = backend.metrics()
    exported = families(text)
    used = [n for n in names_in_chart() if not n.startswith(OPTIONAL)]
    missing = sorted(n for n in used if n not in exported)
    assert not missing, (
        f"the chart's dashboards/alerts name metrics {backend.kind} does not export: {missing}"
    )
    load = parse_load(text, time.time())  # the pools' scraper reads the primary (0.32) names
    assert load is not None
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
    ):
        assert name in exported, name
    assert "vllm:gpu_cache_usage_perc" not in exported  # gone in 0.32: the scraper must not need it
    for reason in ("stop", "length", "abort", "error", "repetition"):  # every reason exported from start
        assert f'finished_reason="{reason}"' in text, reason


def _served(backend: Backend) -> list[float]:
    return [metric(backend.metrics(i), "vllm:request_success_total") for i in (0, 1)]


def test_least_load_avoids_the_busy_replica(backend: Backend) -> None:
    """A long stream through the least_load pool occupies one replica; the next requests all go to the
    other one (with two replicas both are compared: the busier never wins)."""
    body = {"model": "tiny-ll", "prompt": "a long answer", "max_tokens": 1000, "n": LONG_N}
    body |= {"ignore_eos": True, "stream": True}
    headers = {"authorization": f"Bearer {backend.api_key}"}
    client = backend.through_gateway()
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{backend.gateway}/v1/completions", json=body, headers=headers) as resp,
    ):
        lines = resp.iter_lines()
        while not next(lines).startswith("data: "):
            pass
        wait_until(lambda: sum(metric(backend.metrics(i), RUNNING) for i in (0, 1)) == LONG_N, "busy", **POLL)
        busy = [metric(backend.metrics(i), RUNNING) for i in (0, 1)]
        idle = busy.index(0)
        before = _served(backend)
        for i in range(6):
            client.completions.create(model="tiny-ll", prompt=f"short {i}", max_tokens=2)
        # vLLM records a request's metrics a moment after its response may have reached the client
        wait_until(lambda: _served(backend)[idle] - before[idle] >= 6, "six requests counted", **POLL)
        after = _served(backend)
        assert [metric(backend.metrics(i), RUNNING) for i in (0, 1)] == busy  # the long one still runs
    served = [a - b for a, b in zip(after, before, strict=True)]
    assert served[idle] == 6 and served[1 - idle] == 0


def test_prefix_affinity_keeps_a_shared_prompt_on_one_replica(backend: Backend) -> None:
    system = _long_prompt(47)  # > 2,048 characters: the affinity key (prefix_chars) is the system prompt
    client = backend.through_gateway()
    # Nothing left running from earlier tests, and the gateway's scrapes (every 0.2 s) have seen it.
    wait_until(
        lambda: all(metric(backend.metrics(i), RUNNING) == 0 for i in (0, 1)),
        "idle replicas",
        timeout=10,
        interval=0.05,
    )
    time.sleep(0.6)
    before = _served(backend)
    hits0 = [metric(backend.metrics(i), "vllm:prefix_cache_hits_total") for i in (0, 1)]
    for i in range(4):
        client.chat.completions.create(
            model="tiny-pa",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}],
            max_tokens=2,
        )
    served = [a - b for a, b in zip(_served(backend), before, strict=True)]
    assert sorted(served) == [0, 4]
    chosen = served.index(4)
    hits = metric(backend.metrics(chosen), "vllm:prefix_cache_hits_total") - hits0[chosen]
    assert hits >= 3 * 3 * BLOCK  # each later request reused at least three full blocks of the system prompt


def test_budget_settlement_equals_the_engines_token_counts(backend: Backend) -> None:
    """Every request through the gateway is settled to exactly what the engine counted (prompt + generated
    tokens on its /metrics), for unary answers and for streams with and without usage asked for."""
    client = backend.through_gateway()

    def engine_tokens() -> float:
        text = backend.metrics()
        return metric(text, "vllm:prompt_tokens_total") + metric(text, GENERATED)

    def settled() -> float:
        text = httpx.get(f"{backend.gateway}/metrics", timeout=10).text
        return metric(text, "llmgw_ratelimit_tokens_total", 'phase="settled"')

    engine0, settled0 = engine_tokens(), settled()
    reported = 0
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "settle me"}], max_tokens=7
    )
    assert chat.usage is not None
    reported += chat.usage.total_tokens
    stream_kwargs: list[dict[str, Any]] = [{"stream_options": {"include_usage": True}}, {}]
    for extra in stream_kwargs:
        for chunk in client.completions.create(
            model="tiny", prompt="count these", max_tokens=5, stream=True, **extra
        ):
            if chunk.usage is not None:
                reported += chunk.usage.total_tokens
    wait_until(
        lambda: settled() - settled0 == engine_tokens() - engine0, "the engine's count settled", **POLL
    )
    used = engine_tokens() - engine0
    assert used > reported > 0  # the stream without usage was settled too, from the engine's own count
