"""The Responses dialect's way out: the response object's envelope (shared by the unary answer and the
stream's lifecycle events), its usage and ending, and the chat.completion.chunk -> Responses SSE
translator (gateway.dialects.responses exports the dialect; this module is its private half).

Ids are derived from the chat id (`chatcmpl-X` -> `resp_X`, items `msg_X_<output index>` /
`fc_X_<output index>`), or from a digest of the request when the chat answer has none: the same
answer always translates to the same bytes.

Streamed items in order of appearance: a text item is closed as soon as a tool call starts (text
after it opens a new message item); tool-call items stay open until the end (a chat stream may
interleave argument deltas of several indices) and are closed by `close()`, which then emits
`response.completed` (or `response.incomplete` for `finish_reason` "length" / "content_filter").
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

# ResponseError.code is a closed set in the SDKs: any other gateway code is reported as server_error.
_ERROR_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)
# chat finish_reason -> Responses incomplete_details.reason (any other reason completes the response)
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_base(chat_id: object, request: dict[str, Any]) -> str:
    """The id stem of a response and its items: the chat id without `chatcmpl-`, else a digest."""
    if isinstance(chat_id, str) and chat_id:
        return chat_id.removeprefix("chatcmpl-")
    digest = hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS, default=str))
    return digest.hexdigest()[:32]


def envelope(request: dict[str, Any], base: str, created_at: object, status: str) -> dict[str, Any]:
    """The response object around `output`, echoing the request's settings (what the SDK requires)."""
    text = request.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    tools = request.get("tools")
    metadata = request.get("metadata")
    return {
        "id": f"resp_{base}",
        "object": "response",
        "created_at": created_at if isinstance(created_at, int | float) else int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": _echo(request, "instructions", str),
        "max_output_tokens": _echo(request, "max_output_tokens", int),
        "model": request.get("model"),
        "output": [],
        "parallel_tool_calls": _echo(request, "parallel_tool_calls", bool, True),
        "previous_response_id": None,
        "store": False,
        "temperature": _echo(request, "temperature", int | float),
        "text": {"format": fmt if isinstance(fmt, dict) else {"type": "text"}},
        "tool_choice": _echo(request, "tool_choice", str | dict, "auto"),
        "tools": tools if isinstance(tools, list) else [],
        "top_p": _echo(request, "top_p", int | float),
        "truncation": _echo(request, "truncation", str, "disabled"),
        "usage": None,
        "user": _echo(request, "user", str),
        "metadata": metadata if isinstance(metadata, dict) else {},
    }


def _echo(request: dict[str, Any], key: str, kind: Any, default: Any = None) -> Any:
    value = request.get(key)
    return value if isinstance(value, kind) else default


def usage(chat_usage: object) -> dict[str, Any] | None:
    """Chat usage (`prompt_tokens`, `completion_tokens`, details) as Responses usage."""
    if not isinstance(chat_usage, dict):
        return None
    prompt = _count(chat_usage.get("prompt_tokens"))
    completion = _count(chat_usage.get("completion_tokens"))
    total = chat_usage.get("total_tokens")
    prompt_details = chat_usage.get("prompt_tokens_details")
    completion_details = chat_usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    reasoning = completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _count(cached), "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(reasoning)},
        "total_tokens": total if isinstance(total, int) else prompt + completion,
    }


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def ending(finish_reason: object) -> tuple[str, dict[str, Any] | None]:
    """The response status and incomplete_details for a chat finish_reason."""
    reason = _INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def response_error(error: dict[str, Any]) -> dict[str, Any]:
    """The gateway's OpenAI error object as a Responses `error` (its code within the SDK's set)."""
    code = error.get("code")
    message = error.get("message")
    return {
        "code": code if code in _ERROR_CODES else "server_error",
        "message": message if isinstance(message, str) and message else "The response failed.",
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def output_items(base: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat.completion message as output items: its text (and refusal), then its tool calls."""
    output: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    parts = [text_part(content)] if isinstance(content, str) and content else []
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        parts.append({"type": "refusal", "refusal": message["refusal"]})
    if parts:
        output.append(
            {
                "id": f"msg_{base}_0",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": parts,
            }
        )
    calls = message.get("tool_calls")
    for position, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        call_id = call.get("id")
        arguments = function.get("arguments")
        output.append(
            {
                "id": f"fc_{base}_{len(output)}",
                "type": "function_call",
                "call_id": call_id if isinstance(call_id, str) and call_id else f"call_{base}_{position}",
                "name": function.get("name") if isinstance(function.get("name"), str) else "",
                "arguments": arguments if isinstance(arguments, str) else "",
                "status": "completed",
            }
        )
    return output


@dataclass
class _Item:
    """One output item being streamed: a message (text) or a function call."""

    index: int
    id: str
    kind: str  # "message" | "function_call"
    call_id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    open: bool = True
    status: str = "incomplete"  # its status once closed (an item never closed is incomplete)

    def render(self, status: str, *, started: bool = False) -> dict[str, Any]:
        if self.kind == "message":
            content = [] if started else [text_part("".join(self.parts))]
            return {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": content,
            }
        arguments = "" if started else "".join(self.parts)
        return {
            "id": self.id,
            "type": "function_call",
            "call_id": self.call_id,
            "name": self.name,
            "arguments": arguments,
            "status": status,
        }


class ResponsesStream:
    """chat.completion.chunk objects in, Responses SSE events out (gateway.dialects.StreamTranslator)."""

    def __init__(self, request: dict[str, Any]) -> None:
        self._request = request
        self._seq = 0
        self._base = ""
        self._created_at: object = None
        self._started = False
        self._ended = False
        self._items: list[_Item] = []
        self._text: _Item | None = None  # the open message item
        self._tools: dict[int, _Item] = {}  # chat tool_calls index -> its item
        self._usage: dict[str, Any] | None = None
        self._finish: object = None

    # -- the protocol ---------------------------------------------------------------------------

    def feed(self, chunk: dict[str, Any]) -> bytes:
        if self._ended:
            return b""
        out: list[bytes] = []
        if not self._started:
            self._start(out, chunk.get("id"), chunk.get("created"))
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text_delta(out, content)
            calls = delta.get("tool_calls")
            for position, call in enumerate(calls if isinstance(calls, list) else []):
                if isinstance(call, dict):
                    self._tool_delta(out, call, position)
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        return b"".join(out)

    def close(self) -> bytes:
        if self._ended:
            return b""
        out: list[bytes] = []
        if not self._started:
            self._start(out, None, None)
        status, details = ending(self._finish)
        last = self._items[-1] if self._items else None
        for item in self._items:
            if item.open:
                self._close_item(out, item, "incomplete" if details and item is last else "completed")
        response = self._response(status)
        response["incomplete_details"] = details
        self._emit(out, f"response.{status}", {"response": response})
        self._ended = True
        return b"".join(out)

    def fail(self, error: dict[str, Any]) -> bytes:
        if self._ended:
            return b""
        out: list[bytes] = []
        if not self._started:
            self._start(out, None, None)
        response = self._response("failed")
        response["error"] = response_error(error)
        self._emit(out, "response.failed", {"response": response})
        self._ended = True
        return b"".join(out)

    # -- events ---------------------------------------------------------------------------------

    def _emit(self, out: list[bytes], kind: str, payload: dict[str, Any]) -> None:
        data = orjson.dumps({"type": kind, "sequence_number": self._seq, **payload})
        self._seq += 1
        out.append(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")

    def _start(self, out: list[bytes], chat_id: object, created: object) -> None:
        self._started = True
        self._base = response_base(chat_id, self._request)
        self._created_at = created if isinstance(created, int | float) else int(time.time())
        self._emit(out, "response.created", {"response": self._response("in_progress")})
        self._emit(out, "response.in_progress", {"response": self._response("in_progress")})

    def _response(self, status: str) -> dict[str, Any]:
        response = envelope(self._request, self._base, self._created_at, status)
        if status != "in_progress":
            response["output"] = [item.render(item.status) for item in self._items]
            response["usage"] = usage(self._usage)
        return response

    def _open(self, kind: str, prefix: str) -> _Item:
        index = len(self._items)
        item = _Item(index=index, id=f"{prefix}_{self._base}_{index}", kind=kind)
        self._items.append(item)
        return item

    def _text_delta(self, out: list[bytes], text: str) -> None:
        item = self._text
        if item is None:
            item = self._text = self._open("message", "msg")
            self._emit(
                out, "response.output_item.added", _at(item, item=item.render("in_progress", started=True))
            )
            self._emit(out, "response.content_part.added", _at(item, content_index=0, part=text_part("")))
        item.parts.append(text)
        self._emit(out, "response.output_text.delta", _at(item, content_index=0, delta=text, logprobs=[]))

    def _tool_delta(self, out: list[bytes], call: dict[str, Any], position: int) -> None:
        index = call.get("index")
        key = index if isinstance(index, int) else position
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        name = function.get("name")
        item = self._tools.get(key)
        if item is None:
            if self._text is not None:
                self._close_item(out, self._text, "completed")
            item = self._tools[key] = self._open("function_call", "fc")
            call_id = call.get("id")
            item.call_id = call_id if isinstance(call_id, str) and call_id else f"call_{self._base}_{key}"
            item.name = name if isinstance(name, str) else ""
            self._emit(
                out, "response.output_item.added", _at(item, item=item.render("in_progress", started=True))
            )
        elif isinstance(name, str) and name and not item.name:
            item.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.parts.append(arguments)
            self._emit(out, "response.function_call_arguments.delta", _at(item, delta=arguments))

    def _close_item(self, out: list[bytes], item: _Item, status: str) -> None:
        item.open = False
        if item is self._text:
            self._text = None
        text = "".join(item.parts)
        if item.kind == "message":
            self._emit(out, "response.output_text.done", _at(item, content_index=0, text=text, logprobs=[]))
            self._emit(out, "response.content_part.done", _at(item, content_index=0, part=text_part(text)))
        else:
            self._emit(out, "response.function_call_arguments.done", _at(item, arguments=text))
        item.status = status
        self._emit(
            out, "response.output_item.done", {"output_index": item.index, "item": item.render(status)}
        )


def _at(source: _Item, /, **fields: Any) -> dict[str, Any]:
    """An item event's payload: `item_id` (unless it carries the item) and `output_index`, then its own."""
    if "item" in fields:
        return {"output_index": source.index, **fields}
    return {"item_id": source.id, "output_index": source.index, **fields}
