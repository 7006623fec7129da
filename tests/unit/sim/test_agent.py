"""The simulator behind an agent loop (eval/sim/agent.py): tool calls on a `[[sim:call]]` marker or at
`--tool-call-rate`, the closing answer after a tool result, reasoning with `--reasoning-parser`, and vLLM's
`POST /tokenize` counting exactly what a chat request's usage reports."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import orjson
import pytest

from eval.sim import cli
from eval.sim.agent import arguments, parse_marker
from eval.sim.profile import SimProfile
from eval.sim.requests import Context, Job, parse_chat
from eval.sim.responses import StreamRenderer, full_response
from eval.sim.server import SimConfig, build_app
from tests.unit.sim.conftest import make_context

BASH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "Bash",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout": {"type": "number"},
                "description": {"type": "string"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}
# Codex 0.169's shell tool (shared/reference/agent-requests), flattened out of nothing: a plain function.
EXEC_COMMAND: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "exec_command",
        "parameters": {
            "type": "object",
            "properties": {
                "cmd": {"type": "string"},
                "login": {"type": "boolean"},
                "sandbox_permissions": {"type": "string", "enum": ["use_default", "require_escalated"]},
                "workdir": {"type": "string"},
                "yield_time_ms": {"type": "number"},
            },
            "required": ["cmd"],
            "additionalProperties": False,
        },
    },
}
READ: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "Read",
        "parameters": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["file_path"],
        },
    },
}


def body(
    prompt: str, *, tools: list[Any] | None = None, after: list[Any] | None = None, **kw: Any
) -> dict[str, Any]:
    messages: list[Any] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": prompt},
    ]
    return {"model": "small", "messages": messages + (after or []), "tools": tools or [BASH, READ], **kw}


def unary(job: Job) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(full_response(job, 0))
    return out


def stream(job: Job) -> list[dict[str, Any]]:
    renderer = StreamRenderer(job)
    parts = renderer.head() + renderer.tokens(0, len(job.choices[0].pieces), 0) + renderer.tail(0)
    assert parts[-1] == b"data: [DONE]\n\n"
    return [orjson.loads(p[6:]) for p in parts[:-1]]


def tool_result(call_id: str, text: str) -> list[Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": text},
    ]


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("Run it [[sim:call Bash]] now", "Bash", {}),
        ('Run the command: echo hi [[sim:call Bash {"command": "echo hi"}]]', "Bash", {"command": "echo hi"}),
        ('[[sim:call shell {"command": ["sh", "echo ]]"]} ]]', "shell", {"command": ["sh", "echo ]]"]}),
        ("[[sim:call Bash {not json}]]", None, None),
        ("[[sim:call ]]", None, None),
        ("[[sim:call Bash", None, None),
        ("no marker here", None, None),
    ],
)  # fmt: skip
def test_marker_parsing(text: str, name: str | None, args: dict[str, Any] | None) -> None:
    marker = parse_marker(text)
    if name is None:
        assert marker is None
    else:
        assert marker is not None and (marker.name, marker.args) == (name, args)


def test_marker_calls_the_tool_with_schema_valid_arguments_and_the_given_ones(ctx: Context) -> None:
    job = parse_chat(ctx, body('Run the command: echo hi [[sim:call Bash {"command": "echo hi"}]]'))
    choice = unary(job)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None  # vLLM's tool parser: nothing but the call
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "Bash"
    args = orjson.loads(call["function"]["arguments"])
    assert args == {"command": "echo hi"}
    jsonschema.validate(args, BASH["function"]["parameters"])


def test_default_arguments_are_valid_and_a_command_is_harmless(ctx: Context) -> None:
    job = parse_chat(ctx, body("go [[sim:call exec_command]]", tools=[READ, EXEC_COMMAND]))
    call = job.choices[0].tool_call
    assert call is not None
    args = orjson.loads(call.arguments)
    assert args == {"cmd": "echo sim"}
    jsonschema.validate(args, EXEC_COMMAND["function"]["parameters"])
    array = {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
             "required": ["command"]}  # fmt: skip
    assert arguments(array, ctx.rng) == {"command": ["bash", "-lc", "echo sim"]}
    read_call = parse_chat(ctx, body("[[sim:call Read]]")).choices[0].tool_call
    assert read_call is not None
    read = orjson.loads(read_call.arguments)
    jsonschema.validate(read, READ["function"]["parameters"])
    assert set(read) == {"file_path"}  # optional properties are left out


def test_a_namespaced_or_flattened_name_matches_its_suffix(ctx: Context) -> None:
    shell = {
        "type": "function",
        "function": {"name": "tools__shell", "parameters": BASH["function"]["parameters"]},
    }
    job = parse_chat(ctx, body("[[sim:call shell]]", tools=[READ, shell]))
    assert job.choices[0].tool_call is not None and job.choices[0].tool_call.name == "tools__shell"


@pytest.mark.parametrize(
    "kw",
    [
        {"tool_choice": "none"},
        {"tools": [READ]},  # the marker names a tool that is not offered
    ],
)
def test_no_call_without_the_tool_or_with_tool_choice_none(ctx: Context, kw: dict[str, Any]) -> None:
    job = parse_chat(ctx, body("[[sim:call Bash]]", **kw))
    assert job.choices[0].tool_call is None and job.choices[0].finish_reason in ("stop", "length")
    no_tools = body("[[sim:call Bash]]")
    del no_tools["tools"]
    assert parse_chat(ctx, no_tools).choices[0].tool_call is None


def test_after_the_tool_result_the_answer_closes_the_loop(ctx: Context) -> None:
    result = "hi\nand a long tail of output that is cut after forty characters"
    job = parse_chat(ctx, body("[[sim:call Bash]]", after=tool_result("call-1", result)))
    choice = unary(job)["choices"][0]
    assert choice["finish_reason"] == "stop" and not choice["message"]["tool_calls"]
    assert choice["message"]["content"] == "Done: " + result[:40]
    # A new user turn without a marker after the loop: an ordinary answer again.
    later = body("[[sim:call Bash]]", after=[*tool_result("c", "x"), {"role": "assistant", "content": "ok"},
                                            {"role": "user", "content": "thanks"}])  # fmt: skip
    gen = parse_chat(ctx, later).choices[0]
    assert gen.tool_call is None and not gen.text.startswith("Done:")


def test_the_call_streams_like_vllms_tool_parser(ctx: Context) -> None:
    job = parse_chat(ctx, body('[[sim:call Bash {"command": "echo hi"}]]', stream=True,
                               stream_options={"include_usage": True}))  # fmt: skip
    chunks = stream(job)
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    calls = [d["delta"]["tool_calls"][0] for d in deltas if "tool_calls" in d["delta"]]
    assert calls[0] == {"index": 0, "id": calls[0]["id"], "type": "function", "function": {"name": "Bash"}}
    assert all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in calls[1:])
    assert orjson.loads("".join(c["function"]["arguments"] for c in calls[1:])) == {"command": "echo hi"}
    assert deltas[-1]["finish_reason"] == "tool_calls" and all(
        d["finish_reason"] is None for d in deltas[:-1]
    )
    assert chunks[-1]["usage"]["completion_tokens"] == len(calls)  # the name is a token too


def test_max_tokens_cuts_the_call_with_length(ctx: Context) -> None:
    job = parse_chat(ctx, body('[[sim:call Bash {"command": "echo hi"}]]', max_tokens=3))
    gen = job.choices[0]
    assert gen.finish_reason == "length" and len(gen.pieces) == 3


def test_tool_call_rate_calls_without_a_marker_deterministically() -> None:
    always = dataclasses.replace(make_context(), tool_call_rate=1.0)
    never = make_context()
    for seed in range(10):
        gen = parse_chat(always, body("What is up?", seed=seed)).choices[0]
        assert gen.tool_call is not None and gen.tool_call.name in ("Bash", "Read")
        assert parse_chat(never, body("What is up?", seed=seed)).choices[0].tool_call is None
    half = dataclasses.replace(make_context(), tool_call_rate=0.5)
    calls = [
        parse_chat(half, body("What is up?", seed=s)).choices[0].tool_call is not None for s in range(40)
    ]
    assert 8 < sum(calls) < 32
    again = [
        parse_chat(half, body("What is up?", seed=s)).choices[0].tool_call is not None for s in range(40)
    ]
    assert calls == again  # seeded: the same requests call the same way
    # Once a result came back, no further unprompted call: the loop ends.
    assert parse_chat(always, body("What is up?", after=tool_result("c", "out"))).choices[0].tool_call is None


# --- reasoning ------------------------------------------------------------------------------------


def reasoning_ctx() -> Context:
    return dataclasses.replace(make_context(), reasoning_parser="qwen3")


@pytest.mark.parametrize(
    "kw", [{"chat_template_kwargs": {"enable_thinking": True}}, {"reasoning_effort": "low"}]
)
def test_thinking_requests_get_reasoning_first_and_count_it(kw: dict[str, Any]) -> None:
    job = parse_chat(reasoning_ctx(), body("Think about cats.", tools=[], seed=3, **kw))
    gen = job.choices[0]
    out = unary(job)
    msg, usage = out["choices"][0]["message"], out["usage"]
    assert msg["reasoning"] and msg["reasoning"].startswith("Let me think.") and msg["content"]
    assert "reasoning_content" not in msg  # vLLM 0.32 names the field `reasoning`
    assert usage["completion_tokens_details"] == {"reasoning_tokens": gen.reasoning_len}
    assert usage["completion_tokens"] == len(gen.pieces) > gen.reasoning_len > 5

    streamed = parse_chat(reasoning_ctx(), body("Think about cats.", tools=[], seed=3, stream=True,
                                                stream_options={"include_usage": True}, **kw))  # fmt: skip
    chunks = stream(streamed)
    kinds = [next(iter(c["choices"][0]["delta"])) for c in chunks[1:] if c["choices"]]
    r = kinds.count("reasoning")
    assert r == gen.reasoning_len and kinds == ["reasoning"] * r + ["content"] * (len(kinds) - r)
    text = "".join(c["choices"][0]["delta"].get("reasoning", "") for c in chunks if c["choices"])
    assert text == msg["reasoning"]
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": r}


def test_reasoning_needs_the_parser_and_the_request() -> None:
    plain = unary(parse_chat(reasoning_ctx(), body("Hi.", tools=[])))
    assert plain["choices"][0]["message"]["reasoning"] is None
    assert plain["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    off = body("Hi.", tools=[], chat_template_kwargs={"enable_thinking": False}, reasoning_effort="none")
    assert parse_chat(reasoning_ctx(), off).choices[0].reasoning_len == 0
    no_parser = unary(parse_chat(make_context(), body("Hi.", tools=[], reasoning_effort="high")))
    assert "reasoning" not in no_parser["choices"][0]["message"]
    assert no_parser["usage"]["completion_tokens_details"] is None


def test_reasoning_then_a_tool_call_share_max_tokens() -> None:
    job = parse_chat(reasoning_ctx(), body("[[sim:call Bash]]", reasoning_effort="high", max_tokens=100))
    gen = job.choices[0]
    assert gen.reasoning_len > 0 and gen.tool_call is not None and gen.finish_reason == "tool_calls"
    short = parse_chat(reasoning_ctx(), body("[[sim:call Bash]]", reasoning_effort="high", max_tokens=4))
    assert short.choices[0].finish_reason == "length" and len(short.choices[0].pieces) == 4
    assert short.choices[0].reasoning_len == 4 and short.choices[0].tool_call is None


# --- CLI and /tokenize -----------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--tool-call-rate", "1.5"], ["--tool-call-rate", "-0.1"]])
def test_cli_refuses_a_rate_outside_0_1(argv: list[str]) -> None:
    assert cli.main(argv) == 2


def test_cli_refuses_an_unknown_reasoning_parser() -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--reasoning-parser", "nope"])
    assert exc.value.code == 2


async def test_tokenize_counts_what_chat_usage_reports() -> None:
    app = build_app(SimConfig(SimProfile(), ("small",), api_keys=("k",)))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        chat = body("Count me [[sim:call Bash]]", tools=[BASH, READ])
        del chat["model"]
        auth = {"authorization": "Bearer k"}
        done = (await client.post("/v1/chat/completions", json=chat, headers=auth)).json()
        tok = await client.post("/tokenize", json={"model": "small", "messages": chat["messages"],
                                                   "tools": chat["tools"]})  # fmt: skip
        assert tok.status_code == 200
        out = tok.json()
        assert set(out) == {"count", "max_model_len", "tokens", "token_strs"}
        assert out["count"] == done["usage"]["prompt_tokens"] == len(out["tokens"])
        assert out["max_model_len"] == 8192 and out["token_strs"] is None
        prompt = (
            await client.post("/tokenize", json={"prompt": "Hello there", "return_token_strs": True})
        ).json()
        assert prompt["token_strs"] == ["Hell", "o", " ther", "e"] and prompt["count"] == 4
        assert prompt["tokens"][0] != prompt["tokens"][1]
        completion = (await client.post("/v1/completions", json={"prompt": "Hello there", "max_tokens": 2},
                                        headers=auth)).json()  # fmt: skip
        assert completion["usage"]["prompt_tokens"] == prompt["count"]
        missing = await client.post("/tokenize", json={"model": "small"})
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "body.prompt"
        unknown = await client.post("/tokenize", json={"model": "other", "prompt": "x"})
        assert unknown.status_code == 404


async def test_record_requests_appends_each_body_even_a_refused_one(tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    app = build_app(SimConfig(SimProfile(), ("small",), record_requests=str(record)))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        ok = body("Hi [[sim:call Bash]]")
        assert (await client.post("/v1/chat/completions", json=ok)).status_code == 200
        bad = {"model": "small", "messages": []}
        assert (await client.post("/v1/chat/completions", json=bad)).status_code == 400
        assert (
            await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
        ).status_code == 200
    lines = [orjson.loads(line) for line in record.read_bytes().splitlines()]
    assert lines == [ok, bad, {"prompt": "x", "max_tokens": 1}]
