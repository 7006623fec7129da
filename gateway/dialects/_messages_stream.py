"""The Anthropic Messages dialect's answer side: a chat.completion.chunk stream as Messages SSE events,
and what the unary answer shares with it (ids, stop reasons, usage, error types).

The event sequence is Anthropic's: `message_start` (empty content, `stop_reason: null`, the usage
known so far), a `ping`, then per content block `content_block_start` / `content_block_delta`* /
`content_block_stop` (text deltas as `text_delta`, tool arguments as `input_json_delta` passed
through as the pool streams them), and on `[DONE]` `message_delta` (stop reason, stop sequence,
cumulative usage: `input_tokens` too, which the SDK's accumulator reads when present, so a pool that
reports usage only at the end still gives the right input count) and `message_stop`.

A chat stream switching between reasoning, text and a tool call (or between tool calls) closes the
open block and starts the next, so blocks never interleave; a late argument delta for an earlier tool
call is sent with that call's index (the SDK accumulates by index). Tool arguments are not
re-validated: a model that streams malformed JSON makes the SDK's `messages.stream()` accumulator
raise, like Anthropic's own malformed tool input would.

Reasoning (`reasoning_content`, or `reasoning` as newer vLLM names it; the first non-empty of the two
per message or delta, as a version that sends both sends the same text) is answered only when the
request asked for `thinking` (enabled / adaptive / between_tools): a `thinking` block before the
text, its `signature` the gateway's own (gateway.dialects.seal: `sign` over the text the block
carries, so it verifies when the client sends the block back). Streamed as Anthropic streams it:
`content_block_start` `{"type": "thinking", "thinking": "", "signature": ""}`, `thinking_delta`s,
one `signature_delta` (the whole text's signature), `content_block_stop`. `display: "omitted"`:
the block is still sent, with empty text and the signature of "" (Anthropic's documented omitted
display: the block opens, one `signature_delta`, no `thinking_delta`). Without `thinking`, or
with `disabled`, reasoning is dropped.

Unary (`message_of`): a thinking block if asked for and the answer has reasoning, a text block if the
answer has text, then one `tool_use` block per tool call.
A tool call whose arguments are not a JSON object becomes `input: {"_raw": "<the arguments>"}`
(visible to the tool runner rather than silently empty); empty arguments are `{}`. Ids: `msg_` +
the chat id (deterministic); tool ids are the pool's.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple

import orjson

from gateway.dialects.seal import Sealer

__all__ = ["MessagesStream", "Thinking", "error_body", "message_of", "thinking_of"]

# Chat finish reasons with a Messages counterpart of their own (the rest end the turn).
_FINISH: Final[Mapping[str, str]] = MappingProxyType(
    {
        "length": "max_tokens",
        "tool_calls": "tool_use",
        "function_call": "tool_use",
        "content_filter": "refusal",
    }
)
# The gateway's OpenAI error codes that name a Messages error type more precisely than their `type`.
_CODE_TYPES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "upstream_timeout": "timeout_error",
        "request_timeout": "timeout_error",
        "upstream_unavailable": "overloaded_error",
        "not_found": "not_found_error",
        "model_not_found": "not_found_error",
        "insufficient_quota": "billing_error",
    }
)
_SAME_TYPES: Final = frozenset(
    {"invalid_request_error", "authentication_error", "permission_error", "rate_limit_error", "api_error"}
)
# Anthropic's error type by HTTP status (https://docs.anthropic.com/en/api/errors); 503 is the
# gateway's "no replica could take it", which Anthropic calls overloaded (its 529).
_STATUS_TYPES: Final[Mapping[int, str]] = MappingProxyType(
    {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        408: "timeout_error",
        413: "request_too_large",
        429: "rate_limit_error",
        503: "overloaded_error",
        504: "timeout_error",
        529: "overloaded_error",
    }
)


_PING: Final = b'event: ping\ndata: {"type":"ping"}\n\n'
_THINKING_ON: Final = frozenset({"enabled", "adaptive", "between_tools"})
_HIDDEN = frozenset({"omitted", "updates"})  # displays whose thinking blocks carry no text
_REASONING: Final = ("reasoning_content", "reasoning")  # vLLM's names for it, older first


class Thinking(NamedTuple):
    """How an answer carries the pool's reasoning: signed by `sealer`, its text left out if `omitted`."""

    sealer: Sealer
    omitted: bool

    def shown(self, text: str) -> str:
        return "" if self.omitted else text


def thinking_of(request: Mapping[str, Any], sealer: Sealer) -> Thinking | None:
    """The request's `thinking` as the answer's (None: reasoning is dropped). The request was
    validated by `to_chat`; anything else here (an unparsed body) asks for none."""
    value = request.get("thinking")
    if not isinstance(value, dict) or value.get("type") not in _THINKING_ON:
        return None
    return Thinking(sealer, value.get("display") in _HIDDEN)


def reasoning_of(obj: Mapping[str, Any]) -> str:
    for key in _REASONING:
        v = obj.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def message_id(chat_id: Any) -> str:
    """`msg_` + the chat completion's id without its `chatcmpl-` prefix: deterministic, no randomness."""
    suffix = chat_id.removeprefix("chatcmpl-") if isinstance(chat_id, str) else ""
    return "msg_" + (suffix or "0")


def tool_id(call_id: Any, msg_id: str, index: int) -> str:
    """The pool's tool call id, or (absent) one made from the message id and the call's index."""
    if isinstance(call_id, str) and call_id:
        return call_id
    return f"toolu_{msg_id.removeprefix('msg_')}_{index}"


def stop_of(finish: Any, stop_reason: Any, tools: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a chat finish. vLLM names the stop string it matched in
    `choices[0].stop_reason` (a token id or null otherwise): that is a `stop_sequence` ending. A turn
    that called tools is `tool_use` unless it ran out of tokens (vLLM finishes a forced tool call
    with `stop`)."""
    if finish == "length":
        return "max_tokens", None
    if tools:
        return "tool_use", None
    if isinstance(finish, str) and finish in _FINISH:
        return _FINISH[finish], None
    if isinstance(stop_reason, str):
        return "stop_sequence", stop_reason
    return "end_turn", None


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def usage_of(usage: Any) -> dict[str, int]:
    """Chat usage as Messages usage. Anthropic's `input_tokens` excludes cache reads (the prompt is
    input + cache_creation + cache_read), so cached prompt tokens move to `cache_read_input_tokens`."""
    if not isinstance(usage, dict):
        usage = {}
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = _count(usage.get("prompt_tokens"))
    return {
        "input_tokens": max(prompt - cached, 0),
        "output_tokens": _count(usage.get("completion_tokens")),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": min(cached, prompt),
    }


def error_type(error: Mapping[str, Any]) -> str:
    """The Messages error type of the gateway's OpenAI error object (no HTTP status at hand)."""
    code, kind = error.get("code"), error.get("type")
    if isinstance(code, str) and code in _CODE_TYPES:
        return _CODE_TYPES[code]
    if code == "request_too_large" and kind == "invalid_request_error":
        return "request_too_large"
    return kind if isinstance(kind, str) and kind in _SAME_TYPES else "api_error"


def _tool_input(arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return parsed if isinstance(parsed, dict) else {"_raw": arguments}


def _content(
    message: Mapping[str, Any], msg_id: str, thinking: Thinking | None
) -> tuple[list[dict[str, Any]], bool]:
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message) if thinking is not None else ""
    if reasoning and thinking is not None:
        shown = thinking.shown(reasoning)
        content.append({"type": "thinking", "thinking": shown, "signature": thinking.sealer.sign(shown)})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    calls = [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    for k, call in enumerate(calls):
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name")
        block = {
            "type": "tool_use",
            "id": tool_id(call.get("id"), msg_id, k),
            "name": name if isinstance(name, str) else "",
            "input": _tool_input(fn.get("arguments")),
        }
        content.append(block)
    return content, bool(calls)


def message_of(chat: Mapping[str, Any], model: Any, thinking: Thinking | None = None) -> dict[str, Any]:
    """A chat.completion as a Messages `Message` (`model`: the client's, echoed; `thinking`: how to
    answer the pool's reasoning, None to drop it)."""
    choices = chat.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    msg_id = message_id(chat.get("id"))
    content, tools = _content(message if isinstance(message, dict) else {}, msg_id, thinking)
    reason, sequence = stop_of(choice.get("finish_reason"), choice.get("stop_reason"), tools)
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(chat.get("usage")),
    }


def error_body(status: int, error: Mapping[str, Any]) -> dict[str, Any]:
    """The gateway's OpenAI error object answered with HTTP `status` as a Messages error body; the
    OpenAI `param` is appended to the message (Anthropic's error object has no field for it)."""
    kind = _STATUS_TYPES.get(status) or (
        "api_error" if status >= 500 or status < 400 else "invalid_request_error"
    )
    message = error.get("message")
    message = message if isinstance(message, str) and message else f"HTTP {status}"
    param = error.get("param")
    if isinstance(param, str) and param and param not in message:
        message = f"{message} (param: {param})"
    return {"type": "error", "error": {"type": kind, "message": message}}


def event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class MessagesStream:
    """One streamed answer (gateway.dialects.StreamTranslator)."""

    def __init__(self, model: Any, thinking: Thinking | None = None) -> None:
        self._model = model
        self._thinking = thinking
        self._id = "msg_0"
        self._started = False
        self._done = False
        self._blocks = 0  # content blocks started
        self._open: int | None = None  # the open block's index
        self._open_text = False  # the open block is a text block
        self._reasoning: list[str] | None = None  # the open thinking block's text so far
        self._tools: dict[int, int] = {}  # chat tool call index -> block index
        self._finish: Any = None
        self._stop: Any = None
        self._usage: Any = None

    def feed(self, chunk: dict[str, Any]) -> bytes:
        if self._done:
            return b""
        out = bytearray()
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        if not self._started:
            out += self._start(chunk.get("id"))
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            self._choice(choices[0], out)
        return bytes(out)

    def close(self) -> bytes:
        if self._done:
            return b""
        out = bytearray() if self._started else bytearray(self._start(None))
        self._close_block(out)
        reason, sequence = stop_of(self._finish, self._stop, bool(self._tools))
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        out += event(
            "message_delta", {"type": "message_delta", "delta": delta, "usage": usage_of(self._usage)}
        )
        out += event("message_stop", {"type": "message_stop"})
        self._done = True
        return bytes(out)

    def fail(self, error: dict[str, Any]) -> bytes:
        self._done = True
        message = error.get("message")
        body = {
            "type": error_type(error),
            "message": message if isinstance(message, str) else "stream failed",
        }
        return event("error", {"type": "error", "error": body})

    def _start(self, chat_id: Any) -> bytes:
        self._started = True
        self._id = message_id(chat_id)
        message = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_of(self._usage),
        }
        return event("message_start", {"type": "message_start", "message": message}) + _PING

    def _choice(self, choice: dict[str, Any], out: bytearray) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if self._thinking is not None:
                reasoning = reasoning_of(delta)
                if reasoning:
                    self._reason(reasoning, self._thinking, out)
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._text(text, out)
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    self._tool(call, out)
        if choice.get("finish_reason") is not None:
            self._finish = choice.get("finish_reason")
            self._stop = choice.get("stop_reason")

    def _reason(self, text: str, thinking: Thinking, out: bytearray) -> None:
        if self._reasoning is None:
            self._open_block({"type": "thinking", "thinking": "", "signature": ""}, out)
            self._reasoning = []
        if not thinking.omitted:  # omitted: the block carries no text, and its signature is of ""
            self._reasoning.append(text)
            delta = {"type": "thinking_delta", "thinking": text}
            out += event(
                "content_block_delta", {"type": "content_block_delta", "index": self._open, "delta": delta}
            )

    def _text(self, text: str, out: bytearray) -> None:
        if not self._open_text:
            self._open_block({"type": "text", "text": ""}, out)
            self._open_text = True
        delta = {"type": "text_delta", "text": text}
        out += event(
            "content_block_delta", {"type": "content_block_delta", "index": self._open, "delta": delta}
        )

    def _tool(self, call: dict[str, Any], out: bytearray) -> None:
        index = call.get("index")
        index = index if isinstance(index, int) else 0
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        block = self._tools.get(index)
        if block is None:
            name = fn.get("name")
            start = {
                "type": "tool_use",
                "id": tool_id(call.get("id"), self._id, index),
                "name": name if isinstance(name, str) else "",
                "input": {},
            }
            block = self._tools[index] = self._open_block(start, out)
        arguments = fn.get("arguments")
        if isinstance(arguments, str) and arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            out += event(
                "content_block_delta", {"type": "content_block_delta", "index": block, "delta": delta}
            )

    def _open_block(self, block: dict[str, Any], out: bytearray) -> int:
        self._close_block(out)
        index = self._open = self._blocks
        self._blocks += 1
        out += event(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        )
        return index

    def _close_block(self, out: bytearray) -> None:
        if self._reasoning is not None and self._thinking is not None:
            # The signature comes last, over the whole text (joined once: no quadratic concatenation).
            shown = self._thinking.shown("".join(self._reasoning))
            delta = {"type": "signature_delta", "signature": self._thinking.sealer.sign(shown)}
            out += event(
                "content_block_delta", {"type": "content_block_delta", "index": self._open, "delta": delta}
            )
        if self._open is not None:
            out += event("content_block_stop", {"type": "content_block_stop", "index": self._open})
        self._open = None
        self._open_text = False
        self._reasoning = None
