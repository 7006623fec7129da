"""The official openai SDK (sync, async, streaming) through the gateway to real simulator processes."""

from __future__ import annotations

import json

import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.e2e.conftest import SharedStack

pytestmark = pytest.mark.e2e

MSG = [{"role": "user", "content": "Tell me about continuous batching."}]


@pytest.fixture
def client(base_url: str, stack: SharedStack) -> OpenAI:
    return OpenAI(base_url=base_url, api_key=stack.api_key, max_retries=0)


@pytest.fixture
def aclient(base_url: str, stack: SharedStack) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key=stack.api_key, max_retries=0)


@pytest.mark.parametrize(("alias", "served"), [("small", "sim-small"), ("large", "sim-large")])
def test_sync_chat_reaches_each_pool(client: OpenAI, alias: str, served: str) -> None:
    resp = client.chat.completions.create(model=alias, messages=MSG, max_tokens=8)  # type: ignore[arg-type]
    assert resp.model == served
    assert resp.choices[0].message.content
    assert resp.usage is not None and 0 < resp.usage.completion_tokens <= 8
    assert resp._request_id  # x-request-id on every response


async def test_async_chat_and_completions(aclient: AsyncOpenAI) -> None:
    chat = await aclient.chat.completions.create(model="large", messages=MSG, max_completion_tokens=6)  # type: ignore[arg-type]
    assert chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens <= 6
    comp = await aclient.completions.create(model="small", prompt="Once upon a time", max_tokens=5)
    assert comp.object == "text_completion"
    assert comp.choices[0].text
    assert comp.usage is not None and comp.usage.completion_tokens <= 5


def test_output_token_default_and_cap(client: OpenAI, stack: SharedStack) -> None:
    # The alias default (24) applies when the client sends nothing; larger asks are capped (64).
    before = stack.sim_metric("small", "vllm:generation_tokens_total")
    resp = client.chat.completions.create(model="small", messages=MSG, max_tokens=100_000)  # type: ignore[arg-type]
    assert resp.usage is not None and resp.usage.completion_tokens <= 64
    assert stack.sim_metric("small", "vllm:generation_tokens_total") - before == resp.usage.completion_tokens


def test_stream_with_usage_yields_every_chunk_and_one_usage_chunk(client: OpenAI, stack: SharedStack) -> None:
    gen0 = stack.sim_metric("small", "vllm:generation_tokens_total")
    prompt0 = stack.sim_metric("small", "vllm:prompt_tokens_total")
    chunks = list(
        client.chat.completions.create(
            model="small",
            messages=MSG,
            max_tokens=20,
            stream=True,
            stream_options={"include_usage": True},  # type: ignore[arg-type]
        )
    )
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1
    assert chunks[-1] is usage_chunks[0] and chunks[-1].choices == []
    usage = usage_chunks[0].usage
    assert usage is not None
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) == usage.completion_tokens  # one chunk per token, none lost
    assert usage.completion_tokens == stack.sim_metric("small", "vllm:generation_tokens_total") - gen0
    assert usage.prompt_tokens == stack.sim_metric("small", "vllm:prompt_tokens_total") - prompt0
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")


def test_stream_without_include_usage_has_no_usage_chunk(client: OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="small", messages=MSG, max_tokens=10, stream=True))  # type: ignore[arg-type]
    assert chunks
    assert all(c.usage is None and c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks)


async def test_async_stream_completions(aclient: AsyncOpenAI) -> None:
    stream = await aclient.completions.create(
        model="large", prompt="Hello", max_tokens=6, stream=True, stream_options={"include_usage": True}
    )
    texts, usage = [], None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        texts += [c.text for c in chunk.choices]
    assert usage is not None and usage.completion_tokens == len([t for t in texts if t])


def test_done_terminates_the_raw_stream(stack: SharedStack) -> None:
    import httpx

    body = {"model": "small", "messages": MSG, "max_tokens": 5, "stream": True}
    auth = {"authorization": f"Bearer {stack.api_key}"}
    with httpx.stream(
        "POST", f"{stack.gateway}/v1/chat/completions", json=body, headers=auth, timeout=30
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-request-id"]
        raw = resp.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    assert all('"usage":{' not in e for e in events)


def test_tools_and_response_format_reach_the_pool(client: OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    resp = client.chat.completions.create(
        model="small",
        messages=MSG,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    call = resp.choices[0].message.tool_calls
    assert call and call[0].function.name == "get_weather"  # type: ignore[union-attr]
    json.loads(call[0].function.arguments)  # type: ignore[union-attr]
    resp = client.chat.completions.create(
        model="small", messages=MSG, response_format={"type": "json_object"}
    )  # type: ignore[arg-type]
    assert isinstance(json.loads(resp.choices[0].message.content or ""), dict)


def test_embeddings_and_models(client: OpenAI) -> None:
    emb = client.embeddings.create(model="small", input=["a b c", "d e"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0
    assert {m.id for m in client.models.list()} == {"small", "large", "slow"}


def test_errors_arrive_as_sdk_exceptions(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="no-such-alias", messages=MSG)  # type: ignore[arg-type]
    assert nf.value.code == "model_not_found"
    assert nf.value.request_id
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="large", input="large serves no embeddings")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="small", messages=[])
