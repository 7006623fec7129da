"""vLLM's sampling extras a client sends through `extra_body` reach the pool on both dialects, as they do
on chat; what the API itself says wins over an extra of the same name."""

from __future__ import annotations

from gateway.dialects.messages import MessagesDialect
from gateway.dialects.responses import ResponsesDialect

EXTRAS = {"ignore_eos": True, "min_tokens": 3, "repetition_penalty": 1.1, "min_p": 0.05}


def test_responses_forwards_engine_extras() -> None:
    chat = ResponsesDialect().to_chat({"model": "m", "input": "hi", "stop": ["\n"], **EXTRAS})
    assert {k: chat[k] for k in EXTRAS} == EXTRAS and chat["stop"] == ["\n"]


def test_messages_forwards_engine_extras_and_keeps_its_own_stop_and_top_k() -> None:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    chat = MessagesDialect().to_chat({**body, "stop_sequences": ["END"], "top_k": 5, "stop": ["x"], **EXTRAS})
    assert {k: chat[k] for k in EXTRAS} == EXTRAS
    assert chat["stop"] == ["END"] and chat["top_k"] == 5  # the API's own fields win


def test_unknown_keys_are_still_dropped() -> None:
    chat = ResponsesDialect().to_chat({"model": "m", "input": "hi", "frobnicate": 1})
    assert "frobnicate" not in chat
