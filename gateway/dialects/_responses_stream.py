"""The Responses dialect's way out: the response object's envelope (shared by the unary answer and the
stream's lifecycle events), its output items, usage and ending, and the chat.completion.chunk ->
Responses SSE translator (gateway.dialects.responses exports the dialect; this module is its private
half).

Ids are derived from the chat id (`chatcmpl-X` -> `resp_X`, items `<prefix>_X_<output index>`: `rs`
reasoning, `msg` message, `fc` function call, `ctc` custom tool call, `lsc` local shell call), or from a
digest of the request when the chat answer has none: the same answer always translates to the same
bytes.

What an item is follows from the request (`Outward`, built by the dialect from the client's body):

- the pool's reasoning (`reasoning_content`, or `reasoning` as newer vLLM names it) is a `reasoning`
  item before the text: its text as `content: [{type: reasoning_text}]`, and as
  `summary: [{type: summary_text}]` when the request asked for a summary (the pool does not summarize:
  the summary is the reasoning itself); `encrypted_content` is the text sealed by the gateway
  (gateway.dialects.seal) when `include` asked for it;
- a tool call is named by the chat name the dialect gave the tool (`Callee`): a namespace's function
  comes back as a `function_call` with the function's own `name` and the `namespace`, a custom tool's
  call as a `custom_tool_call` whose `input` is the string argument, `local_shell` as a
  `local_shell_call` with an `exec` action; any other name is a plain `function_call`.

Streamed items in order of appearance: a reasoning item closes when text or a tool call starts, a
text item as soon as a tool call starts (text after it opens a new message item); tool-call items
stay open until the end (a chat stream may interleave argument deltas of several indices) and are
closed by `close()`, which then emits `response.completed` (or `response.incomplete` for
`finish_reason` "length" / "content_filter"). A custom tool's input is decoded from its JSON argument
as it arrives (`_FreeForm`), so `response.custom_tool_call_input.delta` streams the text itself.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

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
_PREFIXES: Final = MappingProxyType(
    {"function": "fc", "custom": "ctc", "local_shell": "lsc", "message": "msg", "reasoning": "rs"}
)


@dataclass(frozen=True, slots=True)
class Callee:
    """What the client declared behind a chat tool name: a `function` (inside `namespace`, or not), a
    `custom` tool (its call's input is the chat call's one string argument) or `local_shell`."""

    kind: str  # "function" | "custom" | "local_shell"
    name: str
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class Outward:
    """How the answer to one request is rendered: `callees` by chat tool name (plain functions are
    absent: their name is their own), whether reasoning carries a summary, and the sealer of
    `encrypted_content` when the request included it."""

    callees: Mapping[str, Callee] = field(default_factory=dict)
    summary: bool = False
    seal: Callable[[str], str] | None = None

    def callee(self, chat_name: str) -> Callee:
        return self.callees.get(chat_name) or Callee("function", chat_name)


PLAIN: Final = Outward()


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
    reasoning = request.get("reasoning")
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
        "reasoning": _reasoning_echo(reasoning) if isinstance(reasoning, dict) else None,
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


def _reasoning_echo(reasoning: dict[str, Any]) -> dict[str, Any]:
    summary = reasoning.get("summary", reasoning.get("generate_summary"))
    effort = reasoning.get("effort")
    return {
        "effort": effort if isinstance(effort, str) else None,
        "summary": summary if isinstance(summary, str) else None,
    }


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


def reasoning_of(message: Mapping[str, Any]) -> str:
    """The reasoning text of a chat message or delta: vLLM's `reasoning_content`, or `reasoning` (its
    newer name; one of the two, never both added: some versions send the same text under each)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def reasoning_item(item_id: str, text: str, outward: Outward, status: str) -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": [], "status": status}
    if outward.summary:
        item["summary"] = [{"type": "summary_text", "text": text}]
    item["content"] = [{"type": "reasoning_text", "text": text}]
    if outward.seal is not None:
        item["encrypted_content"] = outward.seal(text)
    return item


def call_item(
    item_id: str, callee: Callee, call_id: str, arguments: str, status: str, *, started: bool = False
) -> dict[str, Any]:
    """One tool call as the output item of its callee's kind (`started`: as `output_item.added` shows
    it, before its arguments)."""
    item: dict[str, Any] = {"id": item_id}
    if callee.kind == "custom":
        text = "" if started else custom_input(arguments)
        item.update(type="custom_tool_call", call_id=call_id, name=callee.name, input=text)
    elif callee.kind == "local_shell":
        action = {"type": "exec", "command": [], "env": {}} if started else shell_action(arguments)
        item.update(type="local_shell_call", call_id=call_id, action=action)
    else:
        item.update(
            type="function_call", call_id=call_id, name=callee.name, arguments="" if started else arguments
        )
    item["status"] = status
    if callee.namespace is not None:
        item["namespace"] = callee.namespace
    return item


def custom_input(arguments: str) -> str:
    """A custom tool's input: the string argument of its chat call (`{"input": "..."}`)."""
    free = _FreeForm()
    free.feed(arguments)
    return free.finish()


def shell_action(arguments: str) -> dict[str, Any]:
    """A `local_shell` chat call's arguments (`command` argv, `workdir`, `timeout_ms`) as the
    `local_shell_call`'s exec action; a command given as one string runs through `bash -lc`. Arguments
    that are no such object make an empty command: the client answers it with an error the model reads."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    parsed = parsed if isinstance(parsed, dict) else {}
    command = parsed.get("command")
    if isinstance(command, str):
        command = ["bash", "-lc", command]
    elif not (isinstance(command, list) and all(isinstance(part, str) for part in command)):
        command = []
    action: dict[str, Any] = {"type": "exec", "command": command, "env": {}}
    if isinstance(parsed.get("workdir"), str):
        action["working_directory"] = parsed["workdir"]
    timeout = parsed.get("timeout_ms")
    if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0:
        action["timeout_ms"] = timeout
    return action


def output_items(base: str, message: dict[str, Any], outward: Outward = PLAIN) -> list[dict[str, Any]]:
    """A chat.completion message as output items: its reasoning, its text (and refusal), its tool calls."""
    output: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(reasoning_item(f"rs_{base}_0", reasoning, outward, "completed"))
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    parts = [text_part(content)] if isinstance(content, str) and content else []
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        parts.append({"type": "refusal", "refusal": message["refusal"]})
    if parts:
        output.append(
            {
                "id": f"msg_{base}_{len(output)}",
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
        name = function.get("name")
        callee = outward.callee(name if isinstance(name, str) else "")
        output.append(
            call_item(
                f"{_PREFIXES[callee.kind]}_{base}_{len(output)}",
                callee,
                call_id if isinstance(call_id, str) and call_id else f"call_{base}_{position}",
                arguments if isinstance(arguments, str) else "",
                "completed",
            )
        )
    return output


# -- a custom tool's input, decoded as its JSON argument streams ---------------------------------------

_HEAD: Final = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_HEAD_MAX: Final = 64  # bytes of argument without the head found: not the expected shape
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_ESCAPES: Final = MappingProxyType(
    {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
)


class _FreeForm:
    """The `input` string of `{"input": "..."}` arriving in fragments: `feed` returns the text newly
    decoded (an escape split across fragments waits for its end; one JSON does not know is kept as
    written), `finish` the whole input. Linear in the argument's length. An argument of another shape
    (keys before `input`, a value that is no string) is not decoded as it comes: its input is the
    parsed argument's `input` if there is one, else the argument itself, given whole by `finish`."""

    __slots__ = ("_state", "_pending", "_raw", "_text")

    def __init__(self) -> None:
        self._state = "head"  # head -> body -> tail (the closing quote seen); head -> off
        self._pending = ""  # undecoded bytes (head: all of them; body: an unfinished escape)
        self._raw: list[str] = []
        self._text: list[str] = []

    def feed(self, fragment: str) -> str:
        self._raw.append(fragment)
        if self._state == "head":
            self._pending += fragment
            match = _HEAD.match(self._pending)
            if match is None:
                if len(self._pending) > _HEAD_MAX or not _could_start(self._pending):
                    self._state, self._pending = "off", ""
                return ""
            self._state, self._pending = "body", self._pending[match.end() :]
        elif self._state == "body":
            self._pending += fragment
        else:
            return ""
        decoded = self._decode()
        self._text.append(decoded)
        return decoded

    def finish(self) -> str:
        """The whole input (after the last `feed`)."""
        if self._state in ("body", "tail"):
            return "".join(self._text)
        raw = "".join(self._raw)
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
        value = parsed.get("input") if isinstance(parsed, dict) else None
        return value if isinstance(value, str) else raw

    @property
    def decoding(self) -> bool:
        """Whether `feed` decodes the input as it comes (else only `finish` gives it, whole)."""
        return self._state in ("body", "tail")

    def _decode(self) -> str:
        text, pending = self._pending, []
        i, n = 0, len(text)
        while i < n:
            quote, slash = text.find('"', i), text.find("\\", i)
            stop = min(x for x in (quote, slash, n) if x >= 0)
            pending.append(text[i:stop])
            i = stop
            if i == n:
                break
            if text[i] == '"':
                self._state = "tail"
                i = n
                break
            if i + 1 >= n:
                break  # a backslash at the end: its escape comes next
            escape = text[i + 1]
            if escape in _ESCAPES:
                pending.append(_ESCAPES[escape])
                i += 2
                continue
            if escape == "u" and i + 6 > n:
                break
            if escape != "u" or not _HEX4.fullmatch(text, i + 2, i + 6):
                pending.append(text[i : i + 2])  # not JSON: kept as the model wrote it
                i += 2
                continue
            code = int(text[i + 2 : i + 6], 16)
            if 0xD800 <= code < 0xDC00:  # a high surrogate: its low half should follow as \uXXXX
                after = text[i + 6 : i + 8]
                if (len(after) < 2 and "\\u".startswith(after)) or (after == "\\u" and i + 12 > n):
                    break
                low = int(text[i + 8 : i + 12], 16) if _HEX4.fullmatch(text, i + 8, i + 12) else -1
                if after == "\\u" and 0xDC00 <= low < 0xE000:
                    pending.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                    continue
                pending.append("\ufffd")
                i += 6
                continue
            pending.append("\ufffd" if 0xDC00 <= code < 0xE000 else chr(code))
            i += 6
        self._pending = text[i:] if self._state == "body" else ""
        return "".join(pending)


def _could_start(head: str) -> bool:
    """Whether `head` may still grow into `{"input": "` (whitespace aside)."""
    compact = "".join(head.split())
    target = '{"input":"'
    return target.startswith(compact) or compact.startswith(target)


# -- the stream ---------------------------------------------------------------------------------------


@dataclass
class _Item:
    """One output item being streamed: reasoning, a message (text) or a tool call."""

    index: int
    id: str
    kind: str  # "reasoning" | "message" | "call"
    callee: Callee = field(default_factory=lambda: Callee("function", ""))
    call_id: str = ""
    parts: list[str] = field(default_factory=list)
    free: _FreeForm | None = None  # a custom tool call's input, as it decodes
    open: bool = True
    status: str = "incomplete"  # its status once closed (an item never closed is incomplete)

    def render(self, status: str, outward: Outward, *, started: bool = False) -> dict[str, Any]:
        if self.kind == "message":
            content = [] if started else [text_part("".join(self.parts))]
            return {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": content,
            }
        if self.kind == "reasoning":
            if started:
                return {"id": self.id, "type": "reasoning", "summary": [], "content": [], "status": status}
            return reasoning_item(self.id, "".join(self.parts), outward, status)
        return call_item(self.id, self.callee, self.call_id, "".join(self.parts), status, started=started)


class ResponsesStream:
    """chat.completion.chunk objects in, Responses SSE events out (gateway.dialects.StreamTranslator)."""

    def __init__(self, request: dict[str, Any], outward: Outward = PLAIN) -> None:
        self._request = request
        self._outward = outward
        self._seq = 0
        self._base = ""
        self._created_at: object = None
        self._started = False
        self._ended = False
        self._items: list[_Item] = []
        self._reasoning: _Item | None = None  # the open reasoning item
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
            reasoning = reasoning_of(delta)
            if reasoning:
                self._reasoning_delta(out, reasoning)
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
            response["output"] = [item.render(item.status, self._outward) for item in self._items]
            response["usage"] = usage(self._usage)
        return response

    def _open(self, kind: str, prefix: str, callee: Callee | None = None) -> _Item:
        index = len(self._items)
        item = _Item(index=index, id=f"{prefix}_{self._base}_{index}", kind=kind)
        if callee is not None:
            item.callee = callee
        self._items.append(item)
        return item

    def _added(self, out: list[bytes], item: _Item) -> None:
        rendered = item.render("in_progress", self._outward, started=True)
        self._emit(out, "response.output_item.added", {"output_index": item.index, "item": rendered})

    def _reasoning_delta(self, out: list[bytes], text: str) -> None:
        item = self._reasoning
        if item is None:
            if self._text is not None:
                self._close_item(out, self._text, "completed")
            item = self._reasoning = self._open("reasoning", "rs")
            self._added(out, item)
            if self._outward.summary:
                part = {"type": "summary_text", "text": ""}
                self._emit(
                    out, "response.reasoning_summary_part.added", _at(item, summary_index=0, part=part)
                )
            part = {"type": "reasoning_text", "text": ""}
            self._emit(out, "response.content_part.added", _at(item, content_index=0, part=part))
        item.parts.append(text)
        if self._outward.summary:
            self._emit(out, "response.reasoning_summary_text.delta", _at(item, summary_index=0, delta=text))
        self._emit(out, "response.reasoning_text.delta", _at(item, content_index=0, delta=text))

    def _text_delta(self, out: list[bytes], text: str) -> None:
        item = self._text
        if item is None:
            if self._reasoning is not None:
                self._close_item(out, self._reasoning, "completed")
            item = self._text = self._open("message", "msg")
            self._added(out, item)
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
            for current in (self._reasoning, self._text):
                if current is not None:
                    self._close_item(out, current, "completed")
            callee = self._outward.callee(name if isinstance(name, str) else "")
            item = self._tools[key] = self._open("call", _PREFIXES[callee.kind], callee)
            if callee.kind == "custom":
                item.free = _FreeForm()
            call_id = call.get("id")
            item.call_id = call_id if isinstance(call_id, str) and call_id else f"call_{self._base}_{key}"
            self._added(out, item)
        elif isinstance(name, str) and name and not item.callee.name:
            # A name after the item was announced: too late to change its kind, not its name.
            item.callee = Callee("function", name)
        arguments = function.get("arguments")
        if not (isinstance(arguments, str) and arguments):
            return
        item.parts.append(arguments)
        if item.free is not None:
            text = item.free.feed(arguments)
            if text:
                self._emit(out, "response.custom_tool_call_input.delta", _at(item, delta=text))
        elif item.callee.kind == "function":
            self._emit(out, "response.function_call_arguments.delta", _at(item, delta=arguments))

    def _close_item(self, out: list[bytes], item: _Item, status: str) -> None:
        item.open = False
        if item is self._text:
            self._text = None
        if item is self._reasoning:
            self._reasoning = None
        text = "".join(item.parts)
        if item.kind == "message":
            self._emit(out, "response.output_text.done", _at(item, content_index=0, text=text, logprobs=[]))
            self._emit(out, "response.content_part.done", _at(item, content_index=0, part=text_part(text)))
        elif item.kind == "reasoning":
            if self._outward.summary:
                part = {"type": "summary_text", "text": text}
                self._emit(out, "response.reasoning_summary_text.done", _at(item, summary_index=0, text=text))
                self._emit(out, "response.reasoning_summary_part.done", _at(item, summary_index=0, part=part))
            part = {"type": "reasoning_text", "text": text}
            self._emit(out, "response.reasoning_text.done", _at(item, content_index=0, text=text))
            self._emit(out, "response.content_part.done", _at(item, content_index=0, part=part))
        elif item.free is not None:
            whole = item.free.finish()
            if whole and not item.free.decoding:  # an argument of another shape: its input in one delta
                self._emit(out, "response.custom_tool_call_input.delta", _at(item, delta=whole))
            self._emit(out, "response.custom_tool_call_input.done", _at(item, input=whole))
        elif item.callee.kind == "function":
            self._emit(out, "response.function_call_arguments.done", _at(item, arguments=text))
        item.status = status
        self._emit(
            out,
            "response.output_item.done",
            {"output_index": item.index, "item": item.render(status, self._outward)},
        )


def _at(source: _Item, /, **fields: Any) -> dict[str, Any]:
    """An item event's payload: `item_id` and `output_index`, then its own fields."""
    return {"item_id": source.id, "output_index": source.index, **fields}
