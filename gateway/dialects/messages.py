"""Anthropic Messages (`POST /v1/messages`, `POST /v1/messages/count_tokens`) as Chat Completions.

Request (`to_chat`): `model`, `max_tokens` (required, >= 1), `messages` (user/assistant turns, a
string or content blocks), `system` (a string or text blocks: one leading system message),
`stop_sequences` -> `stop`, `temperature`, `top_p` (both 0-1), `top_k` (0 = off, not sent),
`metadata.user_id` -> `user`, `stream` (a stream asks for usage on every chunk), custom `tools` ->
function tools, `tool_choice` (auto / any -> required / tool -> named / none;
`disable_parallel_tool_use` -> `parallel_tool_calls: false`; a forcing choice without tools is
refused, a non-forcing one is not sent), `output_config.format` (json_schema) -> `response_format`.

Blocks: `text`; `image` (base64 -> a `data:` URL, url); `tool_use` in assistant turns -> `tool_calls`
(text and tool_use of one turn: one assistant message); `tool_result` in user turns -> a `tool`
message before the rest of that turn (its text blocks joined with newlines; `is_error: true` prefixes
the text with `Error: `, chat having no error flag); `thinking` / `redacted_thinking` are dropped.
Refused (400, `code: unsupported_value`, param such as `messages[2].content[0].type`): `document`,
`search_result`, server tool blocks, images inside tool results, `file` image sources, unknown block
types, and server tools (`web_search_*`, `bash_*`, `text_editor_*`, `computer_*`, ...).

Accepted and dropped: `thinking` (a reasoning pool's reasoning is not returned either),
`service_tier`, `container`, `mcp_servers`, `context_management`, `inference_geo`, `speed`,
`diagnostics`, `output_config.effort`, `cache_control` anywhere, tools' `strict` / `input_examples`
/ `defer_loading`, blocks' `citations`. Any other unknown key is dropped silently (vLLM's sampling
extras excepted: `gateway.dialects.ENGINE_EXTRAS` pass to the pool), as the chat relay passes
unknown chat fields through (Anthropic's beta fields would otherwise break clients).

Answers (`from_chat`, `stream`, `error`): gateway.dialects._messages_stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import orjson

from gateway.dialects import StreamTranslator, engine_extras
from gateway.dialects._messages_stream import MessagesStream, error_body, message_of
from gateway.errors import InvalidRequestError

__all__ = ["MessagesDialect", "count_request"]

_OWN_EXTRAS: Final = frozenset({"top_k"})  # Anthropic's own (0 means off: not sent)
_DROPPED_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})
_MEDIA_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_CHOICES: Final[Mapping[str, str]] = MappingProxyType({"auto": "auto", "any": "required", "none": "none"})
_STREAM_OPTIONS: Final = MappingProxyType({"include_usage": True, "continuous_usage_stats": True})


def _bad(message: str, param: str, code: str = "invalid_type") -> InvalidRequestError:
    return InvalidRequestError(f"{param}: {message}", param=param, code=code)


def _missing(param: str) -> InvalidRequestError:
    return _bad("Field required", param, "missing_required_parameter")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _str(obj: Mapping[str, Any], key: str, param: str, *, empty: bool = True) -> str:
    v = obj.get(key)
    if v is None:
        raise _missing(f"{param}.{key}")
    if not isinstance(v, str) or (not empty and not v):
        raise _bad("must be a non-empty string" if not empty else "must be a string", f"{param}.{key}")
    return v


def _dict(obj: Mapping[str, Any], key: str, param: str) -> dict[str, Any]:
    v = obj.get(key)
    if v is None:
        raise _missing(f"{param}.{key}")
    if not isinstance(v, dict):
        raise _bad("must be an object", f"{param}.{key}")
    return v


def _unsupported(what: str, param: str) -> InvalidRequestError:
    return _bad(f"{what} not supported by this gateway", f"{param}.type", "unsupported_value")


def _blocks(content: Any, param: str) -> list[tuple[str, dict[str, Any], str]]:
    """(param, block, type) of each block of a turn's content array."""
    if not isinstance(content, list):
        raise _bad("must be a string or an array of content blocks", param)
    out = []
    for j, block in enumerate(content):
        bp = f"{param}[{j}]"
        if not isinstance(block, dict):
            raise _bad("must be an object", bp)
        out.append((bp, block, _str(block, "type", bp)))
    return out


def _image(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = _dict(block, "source", param)
    sp = f"{param}.source"
    kind = _str(source, "type", sp)
    if kind == "base64":
        media = _str(source, "media_type", sp)
        if media not in _MEDIA_TYPES:
            raise _bad("must be a JPEG, PNG, GIF or WebP media type", f"{sp}.media_type", "invalid_value")
        url = f"data:{media};base64,{_str(source, 'data', sp)}"
    elif kind == "url":
        url = _str(source, "url", sp, empty=False)
    else:
        raise _unsupported(f"image source type '{kind}' is", sp)
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: dict[str, Any], param: str) -> dict[str, Any]:
    call = _str(block, "tool_use_id", param, empty=False)
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for bp, part, kind in _blocks(content, f"{param}.content"):
            if kind != "text":
                raise _unsupported(f"'{kind}' blocks in a tool_result are", bp)
            texts.append(_str(part, "text", bp))
        text = "\n".join(texts)
    error = block.get("is_error")
    if error is not None and not isinstance(error, bool):
        raise _bad("must be a boolean", f"{param}.is_error")
    return {"role": "tool", "tool_call_id": call, "content": f"Error: {text}" if error else text}


def _tool_use(block: dict[str, Any], param: str) -> dict[str, Any]:
    arguments = orjson.dumps(_dict(block, "input", param)).decode()
    function = {"name": _str(block, "name", param, empty=False), "arguments": arguments}
    return {"id": _str(block, "id", param, empty=False), "type": "function", "function": function}


def _misplaced(kind: str, param: str, role: str) -> InvalidRequestError:
    return _bad(f"'{kind}' blocks are not allowed in {role} turns", f"{param}.type", "invalid_value")


def _user_turn(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for bp, block, kind in _blocks(content, param):
        if kind == "text":
            parts.append({"type": "text", "text": _str(block, "text", bp)})
        elif kind == "image":
            parts.append(_image(block, bp))
        elif kind == "tool_result":
            results.append(_tool_result(block, bp))
        elif kind == "tool_use":
            raise _misplaced(kind, bp, "user")
        elif kind not in _DROPPED_BLOCKS:
            raise _unsupported(f"content block type '{kind}' is", bp)
    if parts or not results:
        results.append({"role": "user", "content": parts or ""})
    return results


def _assistant_turn(content: Any, param: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for bp, block, kind in _blocks(content, param):
        if kind == "text":
            texts.append(_str(block, "text", bp))
        elif kind == "tool_use":
            calls.append(_tool_use(block, bp))
        elif kind in ("tool_result", "image"):
            raise _misplaced(kind, bp, "assistant")
        elif kind not in _DROPPED_BLOCKS:
            raise _unsupported(f"content block type '{kind}' is", bp)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "\n".join(texts) if texts or not calls else None,
    }
    if calls:
        message["tool_calls"] = calls
    return message


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise _missing("messages")
    if not isinstance(value, list) or not value:
        raise _bad("must be a non-empty array", "messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(value):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad("must be an object", p)
        role, content = _str(m, "role", p), m.get("content")
        if content is None:
            raise _missing(f"{p}.content")
        if role == "user":
            out.extend(_user_turn(content, f"{p}.content"))
        elif role == "assistant":
            out.append(_assistant_turn(content, f"{p}.content"))
        elif role == "system":
            raise _bad(
                "'system' is not a message role: use the top-level `system` field",
                f"{p}.role",
                "invalid_value",
            )
        else:
            raise _bad(f"must be 'user' or 'assistant', not '{role}'", f"{p}.role", "invalid_value")
    return out


def _system(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        text = value
    elif isinstance(value, list):
        texts = []
        for bp, block, kind in _blocks(value, "system"):
            if kind != "text":
                raise _bad("system blocks must be 'text' blocks", f"{bp}.type", "invalid_value")
            texts.append(_str(block, "text", bp))
        text = "\n".join(texts)
    else:
        raise _bad("must be a string or an array of text blocks", "system")
    return [{"role": "system", "content": text}] if text else []


def _number(body: Mapping[str, Any], key: str, chat: dict[str, Any]) -> None:
    v = body.get(key)
    if v is None:
        return
    if not _is_number(v):
        raise _bad("must be a number", key)
    if not 0 <= v <= 1:
        raise _bad("must be between 0 and 1", key, "invalid_value")
    chat[key] = v


def _int(body: Mapping[str, Any], key: str, minimum: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not _is_int(v):
        raise _bad("must be an integer", key)
    if v < minimum:
        raise _bad(f"must be >= {minimum}", key, "invalid_value")
    return int(v)


def _sampling(body: Mapping[str, Any], chat: dict[str, Any]) -> None:
    _number(body, "temperature", chat)
    _number(body, "top_p", chat)
    top_k = _int(body, "top_k", 0)
    if top_k:
        chat["top_k"] = top_k
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _bad("must be an array of strings", "stop_sequences")
        if stop:
            chat["stop"] = stop
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise _bad("must be an object", "metadata")
        user = metadata.get("user_id")
        if user is not None and not isinstance(user, str):
            raise _bad("must be a string", "metadata.user_id")
        if user:
            chat["user"] = user


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad("must be an array", "tools")
    out = []
    for i, tool in enumerate(value):
        p = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad("must be an object", p)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _unsupported(f"tool type '{kind}' is (custom tools only)", p)
        function: dict[str, Any] = {"name": _str(tool, "name", p, empty=False)}
        description = tool.get("description")
        if description is not None:
            function["description"] = _str(tool, "description", p)
        function["parameters"] = _dict(tool, "input_schema", p)
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(value: Any, tools: bool) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad("must be an object", "tool_choice")
    kind = _str(value, "type", "tool_choice")
    choice: Any
    if kind == "tool":
        choice = {"type": "function", "function": {"name": _str(value, "name", "tool_choice", empty=False)}}
    elif kind in _CHOICES:
        choice = _CHOICES[kind]
    else:
        raise _bad("must be one of auto, any, tool, none", "tool_choice.type", "invalid_value")
    serial = value.get("disable_parallel_tool_use")
    if serial is not None and not isinstance(serial, bool):
        raise _bad("must be a boolean", "tool_choice.disable_parallel_tool_use")
    if not tools:
        if kind in ("any", "tool"):
            raise _bad(f"'{kind}' needs at least one tool in `tools`", "tool_choice.type", "invalid_value")
        return {}
    return {"tool_choice": choice, "parallel_tool_calls": False} if serial else {"tool_choice": choice}


def _output_format(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad("must be an object", "output_config")
    fmt = value.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _bad("must be an object", "output_config.format")
    if _str(fmt, "type", "output_config.format") != "json_schema":
        raise _bad("must be 'json_schema'", "output_config.format.type", "invalid_value")
    schema = _dict(fmt, "schema", "output_config.format")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def _translate(body: Mapping[str, Any], *, count: bool) -> dict[str, Any]:
    model = body.get("model")
    if model is None:
        raise _missing("model")
    if not isinstance(model, str) or not model:
        raise _bad("must be a non-empty string", "model")
    chat: dict[str, Any] = {
        "model": model,
        "messages": _system(body.get("system")) + _messages(body.get("messages")),
    }
    if not count:
        chat["max_tokens"] = _int(body, "max_tokens", 1)
        if chat["max_tokens"] is None:
            raise _missing("max_tokens")
        stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise _bad("must be a boolean", "stream")
        chat["stream"] = bool(stream)
        if stream:
            chat["stream_options"] = dict(_STREAM_OPTIONS)
    _sampling(body, chat)
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    chat.update(_tool_choice(body.get("tool_choice"), bool(tools)))
    response_format = _output_format(body.get("output_config"))
    if response_format is not None:
        chat["response_format"] = response_format
    engine_extras(dict(body), chat, _OWN_EXTRAS)
    return chat


def count_request(body: dict[str, Any]) -> dict[str, Any]:
    """A `/v1/messages/count_tokens` body validated like a Messages request (`max_tokens` and `stream`
    neither required nor read), as the chat body whose prompt size answers it: no `max_tokens`, no
    `stream`. The answer the gateway makes of its count is `{"input_tokens": N}`."""
    return _translate(body, count=True)


class MessagesDialect:
    """Anthropic Messages (gateway.dialects.Dialect)."""

    name = "messages"
    max_tokens_is_ceiling = True  # `max_tokens` is required

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return _translate(body, count=False)

    def from_chat(self, chat: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        return message_of(chat, request.get("model"))

    def stream(self, request: dict[str, Any]) -> StreamTranslator:
        return MessagesStream(request.get("model"))

    def error(self, status: int, error: dict[str, Any]) -> dict[str, Any]:
        return error_body(status, error)
