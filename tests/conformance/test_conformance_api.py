"""The OpenAI surface, through the gateway and directly, on the simulator and on real vLLM 0.32.

Greedy (temperature 0) answers are deterministic on both backends, so a stream must say what the unary
answer says, token for token, and its usage must match; the gateway must change neither.
"""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.conformance.conftest import Backend

pytestmark = pytest.mark.conformance

MESSAGES: Any = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a colour."},
]
TOOLS: Any = [
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


def test_chat_unary(client: OpenAI) -> None:
    chat = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, temperature=0)
    assert chat.object == "chat.completion" and chat.model == "tiny"
    choice = chat.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    usage = chat.usage
    assert usage is not None and 1 <= usage.completion_tokens <= 8 and usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    again = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, temperature=0)
    assert again.choices[0].message.content == choice.message.content


def test_completions_unary_default_max_tokens(client: OpenAI) -> None:
    comp = client.completions.create(model="tiny", prompt="Once upon a time", temperature=0)
    assert comp.object == "text_completion" and comp.choices[0].text
    assert comp.usage is not None
    # vLLM's completions default is 16 tokens; the gateway's alias default is also 16.
    assert comp.usage.completion_tokens <= 16
    if comp.choices[0].finish_reason == "length":
        assert comp.usage.completion_tokens == 16


def test_chat_stream_with_include_usage_matches_unary(client: OpenAI) -> None:
    unary = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert [c for c in chunks if c.usage is not None] == [last]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == unary.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [unary.choices[0].finish_reason]
    assert unary.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        unary.usage.prompt_tokens,
        unary.usage.completion_tokens,
    )


def test_completions_stream_continuous_usage_stats(client: OpenAI) -> None:
    chunks = list(
        client.completions.create(
            model="tiny",
            prompt="The quick brown fox",
            max_tokens=6,
            temperature=0,
            stream=True,
            # continuous_usage_stats is vLLM's, unknown to the SDK's types: sent as an extra body field
            extra_body={
                "ignore_eos": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
    )
    with_choices = [c for c in chunks if c.choices]
    # vLLM may put two tokens in one chunk (e.g. one that is not a whole UTF-8 character alone)
    assert 1 <= len(with_choices) <= 6 and all(c.usage is not None for c in with_choices)
    counts = [c.usage.completion_tokens for c in with_choices if c.usage is not None]
    assert counts == sorted(counts) and len(set(counts)) == len(counts) and counts[-1] == 6
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6


def test_stream_without_stream_options_has_no_usage(client: OpenAI) -> None:
    chunks = list(client.completions.create(model="tiny", prompt="hi", max_tokens=3, stream=True))
    assert chunks and all(c.usage is None for c in chunks)
    assert sum(1 for c in chunks if c.choices and c.choices[0].text is not None) >= 1


def test_tools_and_response_format_pass_through(backend: Backend) -> None:
    """The gateway forwards `tools`, `tool_choice` and `response_format` untouched: greedy answers
    through it equal the engine's own, including the engine's refusal of what it is not set up for."""
    direct, gateway = backend.direct(), backend.through_gateway()
    for extra in (
        {"tools": TOOLS, "tool_choice": "none"},
        {"response_format": {"type": "json_object"}},
    ):
        a = direct.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=24, temperature=0, **extra
        )
        b = gateway.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=24, temperature=0, **extra
        )
        assert a.choices[0].message.content == b.choices[0].message.content, extra
        if "response_format" in extra and a.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(a.choices[0].message.content or ""), dict)


def test_tool_choice_needs_a_tool_parser_on_vllm(backend: Backend) -> None:
    """A known divergence, pinned: vLLM started without --tool-call-parser refuses tool_choice "auto"
    (400); the simulator answers as a server started with a tool parser would (a forced call here)."""
    for client, message in (
        (backend.direct(), "tool choice requires --enable-auto-tool-choice"),
        # the gateway relays the pool's reason, its internal names replaced (gateway/upstream/failures.py)
        (backend.through_gateway(), r"rejected the request \(HTTP 400\): .*enable-auto-tool-choice"),
    ):
        if backend.kind == "vllm":
            with pytest.raises(openai.BadRequestError, match=message):
                client.chat.completions.create(
                    model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="auto"
                )
        else:
            forced = client.chat.completions.create(
                model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=64
            )
            calls = forced.choices[0].message.tool_calls
            assert calls and calls[0].type == "function" and calls[0].function.name == "get_weather"


def test_logprobs_and_top_logprobs(client: OpenAI) -> None:
    chat = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3
    )
    assert chat.usage is not None and chat.choices[0].logprobs is not None
    content = chat.choices[0].logprobs.content
    assert content is not None and len(content) == chat.usage.completion_tokens
    for tok in content:
        assert tok.logprob <= 0 and math.isfinite(tok.logprob)
        assert 3 <= len(tok.top_logprobs) <= 4  # vLLM: the top 3, plus the sampled token if not among them
        assert tok.token in [t.token for t in tok.top_logprobs]
    comp = client.completions.create(model="tiny", prompt="hello", max_tokens=3, logprobs=2, temperature=0)
    lp = comp.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.token_logprobs is not None
    assert len(lp.tokens) == len(lp.token_logprobs) == 3
    assert lp.top_logprobs is not None and all(2 <= len(t) <= 3 for t in lp.top_logprobs)
    # The engine's reason reaches the caller through the gateway too (issue 40: relayed, cleaned).
    with pytest.raises(openai.BadRequestError, match="greater than max allowed: 20"):
        client.chat.completions.create(model="tiny", messages=MESSAGES, logprobs=True, top_logprobs=25)


def _check_prompt_logprobs(entries: list[Any] | None, prompt_tokens: int, top: int) -> None:
    assert entries is not None and len(entries) == prompt_tokens
    assert entries[0] is None
    for entry in entries[1:]:
        assert top <= len(entry) <= top + 1
        ranks = sorted(v["rank"] for v in entry.values())
        assert ranks[:top] == list(range(1, top + 1))
        assert all(v["logprob"] <= 0 and isinstance(v["decoded_token"], str) for v in entry.values())


def test_prompt_logprobs(client: OpenAI) -> None:
    comp = client.completions.create(
        model="tiny", prompt="hello world, again", max_tokens=2, extra_body={"prompt_logprobs": 1}
    )
    assert comp.usage is not None
    raw = comp.choices[0].model_extra or {}
    _check_prompt_logprobs(raw.get("prompt_logprobs"), comp.usage.prompt_tokens, 1)
    chat = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=2, extra_body={"prompt_logprobs": 2}
    )
    assert chat.usage is not None
    _check_prompt_logprobs((chat.model_extra or {}).get("prompt_logprobs"), chat.usage.prompt_tokens, 2)
