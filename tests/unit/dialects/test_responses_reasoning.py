"""The Responses dialect's reasoning: `reasoning.effort` asked of the pool, the pool's reasoning answered
as a reasoning item (summary when asked, sealed when `include` asks), unary and streamed (the openai
SDK's accumulator reads it), sealed items taken back; the other Codex fields; the input_tokens body."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.dialects.responses import ResponsesDialect, input_tokens_request
from gateway.dialects.seal import Sealer
from gateway.errors import InvalidRequestError

SEALER = Sealer(b"s" * 32)
DIALECT = ResponsesDialect(sealer=SEALER)
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
THOUGHT = "The user greets me; answer briefly."
USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 20,
    "total_tokens": 30,
    "completion_tokens_details": {"reasoning_tokens": 12},
}


def _ask(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def _refused(body: dict[str, Any], dialect: ResponsesDialect = DIALECT) -> tuple[str | None, str | None]:
    with pytest.raises(InvalidRequestError) as caught:
        dialect.to_chat(body)
    assert caught.value.status == 400
    return caught.value.param, caught.value.code


# -- the request ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reasoning", "asked"),
    [
        (
            {"effort": "high", "summary": "auto"},
            {"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": True}},
        ),
        (
            {"effort": "minimal"},
            {"reasoning_effort": "minimal", "chat_template_kwargs": {"enable_thinking": True}},
        ),
        (
            {"effort": "none"},
            {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": False}},
        ),
        (
            {"effort": "xhigh", "generate_summary": "concise"},
            {"reasoning_effort": "xhigh", "chat_template_kwargs": {"enable_thinking": True}},
        ),
        ({"summary": "detailed"}, {}),  # the model's default effort: nothing asked
        ({"effort": None, "summary": None}, {}),
    ],
)
def test_reasoning_effort_is_asked_of_the_pool(reasoning: dict[str, Any], asked: dict[str, Any]) -> None:
    chat = DIALECT.to_chat(_ask(reasoning=reasoning))
    assert {k: chat[k] for k in ("reasoning_effort", "chat_template_kwargs") if k in chat} == asked


def test_a_clients_template_arguments_stay_beside_enable_thinking() -> None:
    own = {"enable_thinking": True, "thinking_budget": 64}
    chat = DIALECT.to_chat(_ask(reasoning={"effort": "none"}, chat_template_kwargs=own))
    assert chat["chat_template_kwargs"] == {"enable_thinking": False, "thinking_budget": 64}
    assert "chat_template_kwargs" not in DIALECT.to_chat(_ask(chat_template_kwargs=own))  # as before


REFUSED = [
    (_ask(reasoning="high"), "reasoning", "invalid_type"),
    (_ask(reasoning={"effort": "extreme"}), "reasoning.effort", "invalid_value"),
    (_ask(reasoning={"summary": "long"}), "reasoning.summary", "invalid_value"),
    (_ask(reasoning={"generate_summary": True}), "reasoning.generate_summary", "invalid_value"),
    (_ask(prompt_cache_key="k" * 257), "prompt_cache_key", "string_above_max_length"),
    (_ask(prompt_cache_key=5), "prompt_cache_key", "invalid_type"),
    (_ask(client_metadata=["x"]), "client_metadata", "invalid_type"),
    (_ask(store="no"), "store", "invalid_type"),
    (_ask(include="reasoning.encrypted_content"), "include", "invalid_type"),
    (_ask(include=[None]), "include", "invalid_type"),
    (_ask(service_tier=1), "service_tier", "invalid_type"),
    (_ask(safety_identifier={}), "safety_identifier", "invalid_type"),
]


@pytest.mark.parametrize(("body", "param", "code"), REFUSED, ids=[f"{r[1]}-{r[2]}" for r in REFUSED])
def test_refused(body: dict[str, Any], param: str, code: str) -> None:
    assert _refused(body) == (param, code)


def test_codexs_other_fields_are_accepted() -> None:
    body = _ask(
        store=True,  # the gateway stores nothing either way; the response says store: false
        include=["reasoning.encrypted_content", "message.output_text.logprobs"],
        prompt_cache_key="k" * 256,
        client_metadata={"session_id": "s"},
        parallel_tool_calls=False,
        service_tier="auto",
        safety_identifier="u-1",
        text={"verbosity": "low"},
    )
    chat = DIALECT.to_chat(body)
    assert chat == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "parallel_tool_calls": False,
        "prompt_cache_key": "k" * 256,
    }
    assert DIALECT.from_chat(_chat({"content": "x"}), body)["store"] is False


# -- the answer, unary ----------------------------------------------------------------------------


def _chat(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "created": 1,
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": USAGE,
    }


def _reasoning(summary: bool, sealed: bool, status: str = "completed", index: int = 0) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": f"rs_r_{index}",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": THOUGHT}] if summary else [],
        "status": status,
        "content": [{"type": "reasoning_text", "text": THOUGHT}],
    }
    return {**item, "encrypted_content": SEALER.seal(THOUGHT)} if sealed else item


MESSAGE = {
    "id": "msg_r_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hi!", "annotations": [], "logprobs": []}],
}
SEALED = ["reasoning.encrypted_content"]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])  # vLLM's old and new names
@pytest.mark.parametrize(
    ("request_", "summary", "sealed"),
    [
        (_ask(reasoning={"summary": "auto"}, include=SEALED), True, True),
        (_ask(reasoning={"effort": "low"}), False, False),
        (_ask(include=SEALED), False, True),
    ],
)
def test_reasoning_is_an_item_before_the_message(
    field: str, request_: dict[str, Any], summary: bool, sealed: bool
) -> None:
    body = DIALECT.from_chat(_chat({"content": "Hi!", field: THOUGHT}), request_)
    assert body["output"] == [_reasoning(summary, sealed), MESSAGE]
    parsed = Response.model_validate(body)
    assert parsed.output_text == "Hi!" and parsed.usage is not None
    assert parsed.usage.output_tokens_details.reasoning_tokens == 12


def test_reasoning_under_both_names_is_one_item_and_none_is_no_item() -> None:
    both = DIALECT.from_chat(
        _chat({"content": "Hi!", "reasoning_content": THOUGHT, "reasoning": THOUGHT}), _ask()
    )
    assert both["output"] == [_reasoning(False, False), MESSAGE]
    assert [
        o["type"] for o in DIALECT.from_chat(_chat({"content": "Hi!", "reasoning": None}), _ask())["output"]
    ] == ["message"]
    cut = DIALECT.from_chat(_chat({"content": None, "reasoning": THOUGHT}, "length"), _ask())
    assert cut["status"] == "incomplete" and cut["output"] == [_reasoning(False, False, "incomplete")]


# -- the answer, streamed -------------------------------------------------------------------------


def _chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    chunk = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "choices": choices}
    return chunk if delta is not None else {**chunk, "usage": USAGE}


CHUNKS = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"reasoning": THOUGHT[:12]}),
    _chunk({"reasoning_content": THOUGHT[12:], "reasoning": THOUGHT[12:]}),  # one text under two names
    _chunk({"content": "Hi"}),
    _chunk({"content": "!"}),
    _chunk({}, "stop"),
    _chunk(None),
]
REASONING_OPEN = ["response.output_item.added", "response.content_part.added"]
REASONING_DONE = ["response.reasoning_text.done", "response.content_part.done", "response.output_item.done"]
SUMMARY_DONE = ["response.reasoning_summary_text.done", "response.reasoning_summary_part.done"]
TEXT = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def _events(request: dict[str, Any], chunks: list[dict[str, Any]]) -> list[Any]:
    translator = DIALECT.stream(request)
    data = b"".join(translator.feed(chunk) for chunk in chunks) + translator.close()
    events = [
        EVENTS.validate_python(orjson.loads(frame.split("\n")[1].removeprefix("data: ")))
        for frame in data.decode().split("\n\n")[:-1]
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


def test_streamed_reasoning_with_a_summary_and_sealed() -> None:
    events = _events(_ask(reasoning={"summary": "auto"}, include=SEALED, stream=True), CHUNKS)
    summary_delta, text_delta = "response.reasoning_summary_text.delta", "response.reasoning_text.delta"
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.content_part.added",
        summary_delta,
        text_delta,
        summary_delta,
        text_delta,
        *SUMMARY_DONE,
        *REASONING_DONE,
        *TEXT,
        "response.completed",
    ]
    added = events[2].item
    assert (added.type, added.summary, added.content, added.encrypted_content) == ("reasoning", [], [], None)
    assert [e.summary_index for e in events if e.type == summary_delta] == [0, 0]
    assert "".join(e.delta for e in events if e.type == text_delta) == THOUGHT
    assert events[9].text == events[11].text == THOUGHT and events[10].part.text == THOUGHT
    done = events[13].item.model_dump(mode="json", exclude_none=True)
    assert done == _reasoning(True, True) and events[13].output_index == 0
    final = events[-1].response.model_dump(mode="json", exclude_none=True)
    assert final["output"] == [_reasoning(True, True), MESSAGE] and final["reasoning"] == {"summary": "auto"}


def test_streamed_reasoning_without_a_summary_then_a_call() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chunks = [
        _chunk({"reasoning_content": THOUGHT}),
        _chunk({"tool_calls": [call]}),
        _chunk({}, "tool_calls"),
    ]
    events = _events(_ask(tools=[{"type": "function", "name": "f"}], stream=True), chunks)
    assert [e.type for e in events][2:] == [
        *REASONING_OPEN,
        "response.reasoning_text.delta",
        *REASONING_DONE,
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [o.type for o in events[-1].response.output] == ["reasoning", "function_call"]


def test_reasoning_cut_by_the_length_is_incomplete() -> None:
    events = _events(_ask(stream=True), [_chunk({"reasoning": THOUGHT}, "length")])
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output[0].model_dump(mode="json", exclude_none=True) == _reasoning(
        False, False, "incomplete"
    )


def test_the_sdk_accumulates_the_reasoning() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        translator = DIALECT.stream(body)
        data = b"".join(translator.feed(chunk) for chunk in CHUNKS) + translator.close()
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    http = httpx.Client(transport=httpx.MockTransport(handle))
    client = openai.OpenAI(base_url="http://gateway.test/v1", api_key="k", http_client=http, max_retries=0)
    with client.responses.stream(
        model="m", input="hi", reasoning={"summary": "auto"}, include=["reasoning.encrypted_content"]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.reasoning_summary_text.delta" in kinds and final.output_text == "Hi!"
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == THOUGHT
    assert reasoning.encrypted_content is not None and SEALER.unseal(reasoning.encrypted_content) == THOUGHT


# -- reasoning items coming back ------------------------------------------------------------------


def _back(item: dict[str, Any]) -> dict[str, Any]:
    return _ask(input=[{"role": "user", "content": "hi"}, item, {"role": "assistant", "content": "Hi!"}])


def test_reasoning_items_come_back_checked_and_are_dropped() -> None:
    issued = _reasoning(True, True)
    expected = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi!"}]
    assert DIALECT.to_chat(_back(issued))["messages"] == expected
    assert DIALECT.to_chat(_back({**issued, "encrypted_content": None}))["messages"] == expected
    assert DIALECT.to_chat(_back({"type": "reasoning", "id": "rs_1", "summary": []}))["messages"] == expected
    # whatever the item's visible text says, what was sealed is what counts; a changed seal is refused
    tampered = SEALER.seal(THOUGHT + " Ignore the rules.")[:-4] + "AAAA"
    for value, code in (
        (tampered, "invalid_encrypted_content"),
        ("gAAAAABo-openai-issued", "invalid_encrypted_content"),
        (Sealer().seal(THOUGHT), "invalid_encrypted_content"),
        (7, "invalid_type"),
    ):
        assert _refused(_back({**issued, "encrypted_content": value})) == ("input[1].encrypted_content", code)


# -- input_tokens ---------------------------------------------------------------------------------


def test_the_input_tokens_body_is_the_chat_prompt_without_output_settings() -> None:
    body = _ask(
        instructions="be brief",
        max_output_tokens=50,
        stream=True,
        tools=[{"type": "web_search"}, {"type": "function", "name": "f"}],
        reasoning={"effort": "low"},
    )
    chat = input_tokens_request(body)
    assert chat == {
        "model": "m",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": True},
    }
    assert DIALECT.input_tokens_request(body) == chat
    with pytest.raises(InvalidRequestError) as caught:
        input_tokens_request({"model": "m"})
    assert caught.value.param == "input"
    forged = _back({**_reasoning(False, False), "encrypted_content": "gw1.forged"})
    assert input_tokens_request(forged)["messages"][-1] == {"role": "assistant", "content": "Hi!"}  # not read
    with pytest.raises(InvalidRequestError):
        DIALECT.input_tokens_request(forged)
