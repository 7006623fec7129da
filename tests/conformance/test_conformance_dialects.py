"""The Responses and Anthropic Messages APIs through the gateway, with the official SDKs and the clients
built on them (openai-agents, LangChain), on the simulator and on real vLLM 0.32.

The gateway translates both to chat (gateway.dialects), so a greedy answer in either dialect must say
what the same chat request says, token for token, with the same usage; a stream must say what its
unary answer says. `auto` (routed over two pools by difficulty) must pick the same tier for the same
prompt on every endpoint.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai import AsyncOpenAI

from tests.conformance.conftest import EASY, HARD, Backend
from tests.support.prom import metric

pytestmark = pytest.mark.conformance

QUESTION = "Name a colour."
GREEDY: Any = {"temperature": 0}  # anthropic 2.x takes no temperature argument: sent as an extra field
TOOLED = "tiny-details"  # replica 1: its vLLM parses tool calls and ends structured output (conftest)
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,
}
FN_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": WEATHER,
}


def _chat_text(backend: Backend, alias: str = "tiny", max_tokens: int = 8) -> tuple[str, int, int]:
    chat = backend.through_gateway().chat.completions.create(
        model=alias, messages=[{"role": "user", "content": QUESTION}], max_tokens=max_tokens, temperature=0
    )
    assert chat.usage is not None
    return chat.choices[0].message.content or "", chat.usage.prompt_tokens, chat.usage.completion_tokens


def _anthropic(backend: Backend) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=backend.gateway, api_key=backend.api_key, max_retries=0, timeout=60)


# -- Responses ---------------------------------------------------------------------------------------


def test_responses_unary_says_what_chat_says(backend: Backend) -> None:
    text, prompt_tokens, completion_tokens = _chat_text(backend)
    client = backend.through_gateway()
    raw = client.responses.with_raw_response.create(
        model="tiny", input=QUESTION, max_output_tokens=8, temperature=0
    )
    resp = raw.parse()
    assert raw.headers["x-llmgw-tier"] == "one"
    assert resp.object == "response" and resp.model == "tiny"
    assert resp.status in ("completed", "incomplete")
    assert resp.output_text == text
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (prompt_tokens, completion_tokens)
    # The same conversation as items, with instructions as the system turn, is the same request.
    items = client.responses.create(
        model="tiny",
        input=[{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}],
        max_output_tokens=8,
        temperature=0,
    )
    assert items.output_text == text


def test_responses_stream_says_what_unary_says_settled_to_the_engine(backend: Backend) -> None:
    client = backend.through_gateway()
    unary = client.responses.create(model="tiny", input=QUESTION, max_output_tokens=12, temperature=0)
    before_gw = httpx.get(f"{backend.gateway}/metrics").text
    before_engine = backend.metrics()
    events = list(
        client.responses.create(
            model="tiny", input=QUESTION, max_output_tokens=12, temperature=0, stream=True
        )
    )
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == sorted(e.sequence_number for e in events)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert deltas == final.output_text == unary.output_text
    assert final.usage is not None and unary.usage is not None
    assert final.usage.output_tokens == unary.usage.output_tokens
    # Settled to what the engine generated: the gateway's token count moved by the engine's.
    after_gw = httpx.get(f"{backend.gateway}/metrics").text
    engine = metric(backend.metrics(), "vllm:generation_tokens_total") - metric(
        before_engine, "vllm:generation_tokens_total"
    )
    counted = metric(after_gw, "llmgw_tokens_total", 'direction="output",model="tiny"') - metric(
        before_gw, "llmgw_tokens_total", 'direction="output",model="tiny"'
    )
    assert counted == engine == final.usage.output_tokens
    ended = metric(after_gw, "llmgw_requests_total", 'endpoint="responses"') - metric(
        before_gw, "llmgw_requests_total", 'endpoint="responses"'
    )
    assert ended == 1


def test_responses_function_tool_round_trip(backend: Backend) -> None:
    client = backend.through_gateway()
    first = client.responses.create(
        model=TOOLED, input="Weather in Paris?", tools=[FN_TOOL], tool_choice="required", max_output_tokens=48
    )
    calls = [o for o in first.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    args = json.loads(calls[0].arguments)
    assert isinstance(args.get("city"), str)
    second = client.responses.create(
        model=TOOLED,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": calls[0].call_id,
                "name": "get_weather",
                "arguments": calls[0].arguments,
            },
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"},
        ],
        tools=[FN_TOOL],
        tool_choice="none",
        max_output_tokens=8,
    )
    assert second.status in ("completed", "incomplete") and isinstance(second.output_text, str)
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the call and its output were in the prompt


def test_responses_json_schema(backend: Backend) -> None:
    resp = backend.through_gateway().responses.create(
        model=TOOLED,
        input="A city, as JSON.",
        text={"format": {"type": "json_schema", "name": "city", "schema": WEATHER, "strict": True}},
        max_output_tokens=64,
        temperature=0,
    )
    assert resp.status == "completed", resp.incomplete_details
    assert isinstance(json.loads(resp.output_text)["city"], str)


def test_openai_agents_default_model_with_a_function_tool(backend: Backend) -> None:
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel
    from pydantic import BaseModel, Field

    set_tracing_disabled(True)
    called: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return "sunny"

    class Answer(BaseModel):
        # A typed final output (text.format json_schema): a random model's free text would run to
        # max_tokens, which agents reports as an error; a schema's end ends the answer.
        summary: str = Field(max_length=12)

    client = AsyncOpenAI(base_url=f"{backend.gateway}/v1", api_key=backend.api_key, max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Answer briefly.",
        tools=[get_weather],
        # The first turn is forced so the round trip happens whatever the tiny model says; agents then
        # resets tool_choice (auto: answered with text by the pool's tool parser).
        model=OpenAIResponsesModel(model=TOOLED, openai_client=client),
        model_settings=ModelSettings(tool_choice="required", max_tokens=64, temperature=0),
        output_type=Answer,
    )
    result = Runner.run_sync(agent, "Weather in Paris?", max_turns=4)
    assert called and isinstance(result.final_output, Answer)


def test_langchain_chat_openai_with_the_responses_api(backend: Backend) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="tiny",
        base_url=f"{backend.gateway}/v1",
        api_key=backend.api_key,  # type: ignore[arg-type,unused-ignore]
        use_responses_api=True,
        max_tokens=8,  # type: ignore[call-arg,unused-ignore]
        temperature=0,
        max_retries=0,
    )
    text, _, completion_tokens = _chat_text(backend)
    msg = llm.invoke(QUESTION)
    assert msg.text == text
    assert msg.usage_metadata is not None and msg.usage_metadata["output_tokens"] == completion_tokens


# -- Anthropic Messages ------------------------------------------------------------------------------


def test_messages_create_and_stream_say_what_chat_says(backend: Backend) -> None:
    text, prompt_tokens, completion_tokens = _chat_text(backend)
    client = _anthropic(backend)
    raw = client.messages.with_raw_response.create(
        model="tiny", max_tokens=8, extra_body=GREEDY, messages=[{"role": "user", "content": QUESTION}]
    )
    msg = raw.parse()
    assert raw.headers["x-llmgw-tier"] == "one"
    assert msg.type == "message" and msg.role == "assistant" and msg.model == "tiny"
    assert "".join(b.text for b in msg.content if b.type == "text") == text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (prompt_tokens, completion_tokens)
    with client.messages.stream(
        model="tiny", max_tokens=8, extra_body=GREEDY, messages=[{"role": "user", "content": QUESTION}]
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text
    assert final.usage.output_tokens == completion_tokens and final.stop_reason == msg.stop_reason
    count = client.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": QUESTION}])
    assert count.input_tokens == prompt_tokens  # the engine's own tokenizer (issue 40)


# Twenty varied conversations: one turn and many, system prompts (top level and in place, as Claude Code
# sends one), Unicode, code, long and short, content blocks.
COUNT_CASES: list[tuple[str | None, list[Any]]] = [
    (None, [{"role": "user", "content": "hi"}]),
    (None, [{"role": "user", "content": QUESTION}]),
    ("You are terse.", [{"role": "user", "content": "Why is the sky blue?"}]),
    (None, [{"role": "user", "content": "Zürich, naïve café, 東京 and 🎉"}]),
    (None, [{"role": "user", "content": "def f(x):\n    return x ** 2  # square\n"}]),
    (None, [{"role": "user", "content": "word " * 200}]),
    ("Be kind." * 20, [{"role": "user", "content": "Tell me a story."}]),
    (None, [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]),
    (None, [
        {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
        {"role": "user", "content": "times 3?"},
    ]),
    ("S", [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
        {"role": "user", "content": "e"},
    ]),
    (None, [{"role": "user", "content": "   leading and trailing spaces   "}]),
    (None, [{"role": "user", "content": "tabs\tand\nnew\nlines"}]),
    (None, [{"role": "user", "content": "ünïcödé " * 30}]),
    (None, [{"role": "user", "content": "SELECT * FROM users WHERE id = 1;"}]),
    (None, [{"role": "user", "content": "1234567890 " * 20}]),
    ("You translate.", [{"role": "user", "content": "Translate 'good morning' to French."}]),
    (None, [{"role": "user", "content": "<html><body>hi</body></html>"}]),
    (None, [{"role": "user", "content": "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}"}]),
    (None, [
        {"role": "user", "content": "Summarise."},
        {"role": "system", "content": "The user prefers short answers."},
    ]),
    ("Long system. " * 40, [{"role": "user", "content": "ok"}]),
]  # fmt: skip


def test_count_tokens_equals_the_engines_tokenize(backend: Backend) -> None:
    """Issue 40: count_tokens is vLLM's `/tokenize` count of the same conversation (the chat template
    applied, as the engine counts a chat request's prompt), for twenty varied conversations."""
    client = _anthropic(backend)
    for system, messages in COUNT_CASES:
        extra: Any = {"system": system} if system else {}
        raw = client.messages.with_raw_response.count_tokens(model="tiny", messages=messages, **extra)
        assert raw.headers["x-llmgw-token-count"] == "exact"
        chat = ([{"role": "system", "content": system}] if system else []) + [
            {"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
             else "\n".join(b["text"] for b in m["content"])}
            for m in messages
        ]  # fmt: skip
        direct = httpx.post(
            f"{backend.replicas[0]}/tokenize",
            json={"model": "tiny", "messages": chat, "add_generation_prompt": True},
            timeout=30,
        )
        assert direct.status_code == 200, direct.text
        assert raw.parse().input_tokens == direct.json()["count"], (system, messages)


def test_cache_read_input_tokens_on_a_repeated_prefix(backend: Backend) -> None:
    """Issue 40: the cached prompt tokens the engine reports (`--enable-prompt-tokens-details`, replica 1)
    come back as `cache_read_input_tokens` on the second turn of a conversation with a long prefix."""
    client = _anthropic(backend)
    system: Any = [
        {"type": "text", "text": "You are a careful assistant. " * 60, "cache_control": {"type": "ephemeral"}}
    ]
    turn: Any = [{"role": "user", "content": "Say one word."}]
    first = client.messages.create(model="tiny-details", max_tokens=2, system=system, messages=turn)
    second = client.messages.create(model="tiny-details", max_tokens=2, system=system, messages=turn)
    assert (first.usage.cache_read_input_tokens or 0) < (second.usage.cache_read_input_tokens or 0)
    assert (second.usage.cache_read_input_tokens or 0) >= 128  # one whole KV block at least
    total = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    assert second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0) == total


def test_messages_tool_round_trip(backend: Backend) -> None:
    client = _anthropic(backend)
    tool: Any = {"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}
    first = client.messages.create(
        model=TOOLED,
        max_tokens=48,
        tools=[tool],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )
    uses = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and uses and uses[0].name == "get_weather"
    assert isinstance(uses[0].input, dict) and isinstance(uses[0].input.get("city"), str)
    turns: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [u.model_dump() for u in uses]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}],
        },
    ]
    second = client.messages.create(
        model=TOOLED, max_tokens=8, tools=[tool], tool_choice={"type": "none"}, messages=turns
    )
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert second.usage.input_tokens > first.usage.input_tokens


def test_messages_errors_are_anthropic_shaped(backend: Backend) -> None:
    client = _anthropic(backend)
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body["type"] == "error"  # type: ignore[index]
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=backend.gateway, api_key="sk-wrong", max_retries=0).messages.create(
            model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    image: Any = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="tiny", max_tokens=8, messages=[{"role": "user", "content": [image]}])
    assert bad.value.status_code == 400  # a text-only engine refuses an image, in Anthropic's shape
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


# -- model retrieval, and `auto` on every endpoint ---------------------------------------------------


def test_models_retrieve(backend: Backend) -> None:
    client = backend.through_gateway()
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("not-an-alias")


@pytest.mark.parametrize("prompt,tier", [(EASY, "one"), (HARD, "details")])
def test_auto_picks_the_tier_by_difficulty_on_every_endpoint(
    backend: Backend, prompt: str, tier: str
) -> None:
    client = backend.through_gateway()
    msgs: Any = [{"role": "user", "content": prompt}]
    seen: dict[str, Any] = {
        "chat": client.chat.completions.with_raw_response.create(model="auto", messages=msgs, max_tokens=2),
        "completions": client.completions.with_raw_response.create(model="auto", prompt=prompt, max_tokens=2),
        "responses": client.responses.with_raw_response.create(
            model="auto", input=prompt, max_output_tokens=2
        ),
        "messages": _anthropic(backend).messages.with_raw_response.create(
            model="auto", max_tokens=2, messages=msgs
        ),
    }
    tiers = {endpoint: raw.headers["x-llmgw-tier"] for endpoint, raw in seen.items()}
    assert tiers == dict.fromkeys(seen, tier)
    difficulties = {raw.headers["x-llmgw-difficulty"] for raw in seen.values()}
    assert len(difficulties) == 1  # the same prompt scored the same on every endpoint
