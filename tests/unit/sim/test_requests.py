"""Request parsing and answer generation: determinism, stop strings, limits, usage flags, errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from eval.sim.errors import ApiError
from eval.sim.profile import SimProfile
from eval.sim.requests import Context, parse_chat, parse_completion
from eval.sim.responses import StreamRenderer, full_response
from eval.sim.tokenizer import tokenize


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "small", "messages": [{"role": "user", "content": "Tell me about cats."}], **kw}


def test_same_seed_same_answer_across_servers(make_ctx: Callable[..., Context]) -> None:
    a = parse_chat(make_ctx(seed=1), chat(seed=42, max_tokens=30))
    b = parse_chat(make_ctx(seed=2), chat(seed=42, max_tokens=30))
    c = parse_chat(make_ctx(seed=1), chat(seed=43, max_tokens=30))
    assert a.choices[0].text == b.choices[0].text
    assert a.choices[0].text != c.choices[0].text


def test_without_seed_calls_differ_and_greedy_is_fixed(ctx: Context) -> None:
    texts = {parse_chat(ctx, chat(max_tokens=20, ignore_eos=True)).choices[0].text for _ in range(5)}
    assert len(texts) > 1
    greedy = {parse_chat(ctx, chat(max_tokens=20, temperature=0)).choices[0].text for _ in range(3)}
    assert len(greedy) == 1


def test_generated_tokens_match_the_tokenizer(ctx: Context) -> None:
    for seed in range(20):
        gen = parse_chat(ctx, chat(seed=seed, max_tokens=300)).choices[0]
        assert tokenize(gen.text) == gen.pieces
        assert 1 <= len(gen.pieces) <= 300


def test_max_tokens_gives_length_and_completion_tokens_wins(ctx: Context) -> None:
    job = parse_chat(ctx, chat(max_tokens=500, max_completion_tokens=7, ignore_eos=True))
    assert len(job.choices[0].pieces) == 7 and job.choices[0].finish_reason == "length"
    short = parse_completion(ctx, {"model": "small", "prompt": "hi", "max_tokens": 3, "ignore_eos": True})
    assert len(short.choices[0].pieces) == 3 and short.choices[0].finish_reason == "length"


def test_sampled_eos_finishes_with_stop(make_ctx: Callable[..., Context]) -> None:
    ctx = make_ctx(SimProfile(output_len_mean=10, output_len_sigma=0.1))
    gen = parse_chat(ctx, chat(seed=1, max_tokens=1000)).choices[0]
    assert gen.finish_reason == "stop" and 5 <= len(gen.pieces) <= 20


def test_stop_string_cuts_text(ctx: Context) -> None:
    full = parse_chat(ctx, chat(seed=5, max_tokens=60, ignore_eos=True)).choices[0]
    stop_word = full.pieces[10]  # e.g. " fire": appears first at token 10 or earlier
    cut = parse_chat(ctx, chat(seed=5, max_tokens=60, ignore_eos=True, stop=[stop_word, "zzz"])).choices[0]
    first = full.text.find(stop_word)
    assert cut.text == full.text[:first]
    assert cut.finish_reason == "stop"
    assert stop_word not in cut.text
    assert len(cut.pieces) <= 11


def test_n_choices_sum_tokens(ctx: Context) -> None:
    job = parse_chat(ctx, chat(n=3, seed=1, max_tokens=10, ignore_eos=True))
    body = orjson.loads(full_response(job, 0))
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"]["completion_tokens"] == 30
    assert len({c["message"]["content"] for c in body["choices"]}) == 3


def test_logprobs_shape(ctx: Context) -> None:
    job = parse_chat(ctx, chat(seed=1, max_tokens=5, logprobs=True, top_logprobs=3))
    content = orjson.loads(full_response(job, 0))["choices"][0]["logprobs"]["content"]
    assert len(content) == len(job.choices[0].pieces)
    assert all(len(c["top_logprobs"]) == 3 and c["logprob"] <= 0 for c in content)
    assert bytes(content[0]["bytes"]).decode() == content[0]["token"]
    comp = parse_completion(ctx, {"model": "small", "prompt": "x", "max_tokens": 4, "logprobs": 2})
    lp = orjson.loads(full_response(comp, 0))["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"])


@pytest.mark.parametrize(
    ("options", "usage"),
    [(None, False), ({}, True), ({"include_usage": True}, True), ({"include_usage": False}, False)],
)
def test_stream_usage_follows_vllm(ctx: Context, options: dict[str, Any] | None, usage: bool) -> None:
    body = chat(stream=True, max_tokens=3)
    if options is not None:
        body["stream_options"] = options
    job = parse_chat(ctx, body)
    assert job.include_usage is usage
    renderer = StreamRenderer(job)
    chunks = [*renderer.head(), *renderer.tokens(0, 3, 0), *renderer.tail(0)]
    assert chunks[-1] == b"data: [DONE]\n\n"
    parsed = [orjson.loads(c[6:]) for c in chunks[:-1]]
    usage_chunks = [p for p in parsed if "usage" in p]
    assert len(usage_chunks) == (1 if usage else 0)
    if usage:
        assert usage_chunks[0]["choices"] == [] and usage_chunks[0]["usage"]["completion_tokens"] == len(
            job.choices[0].pieces
        )
    assert parsed[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_json_response_format_is_valid_json(ctx: Context) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
    job = parse_chat(
        ctx, chat(response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    )
    value = orjson.loads(job.choices[0].text)
    assert isinstance(value["name"], str) and isinstance(value["age"], int)
    assert isinstance(
        orjson.loads(parse_chat(ctx, chat(response_format={"type": "json_object"})).choices[0].text), dict
    )


def test_forced_tool_call(ctx: Context) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
    job = parse_chat(ctx, chat(tools=tools, tool_choice="required"))
    msg = orjson.loads(full_response(job, 0))["choices"][0]
    assert msg["finish_reason"] == "tool_calls"
    call = msg["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert isinstance(orjson.loads(call["function"]["arguments"])["city"], str)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "does not exist"),
        ({"model": "small", "messages": []}, 400, "messages"),
        ({"model": "small", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400,
         "max_tokens"),
        ({"model": "small", "messages": [{"role": "user", "content": "x"}], "n": "2.5"}, 400,
         "valid integer"),
        ({"model": "small", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9000}, 400,
         "max_tokens=9000 cannot be greater than max_model_len=8192"),
        ({"model": "small", "messages": [{"role": "user", "content": "x " * 9000}]}, 400,
         "maximum context length is 8192 tokens. However, your prompt contains at least 8193"),
    ],
)  # fmt: skip
def test_errors(ctx: Context, body: dict[str, Any], status: int, fragment: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_chat(ctx, body)
    assert err.value.status == status and fragment in err.value.message
    rendered = orjson.loads(err.value.body())["error"]
    assert rendered["code"] == status and set(rendered) == {"message", "type", "param", "code"}


def test_alias_model_echoes_first_name(ctx: Context) -> None:
    assert parse_chat(ctx, chat(model="alias")).model == "small"
