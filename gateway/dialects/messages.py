"""Anthropic Messages (`POST /v1/messages`, `POST /v1/messages/count_tokens`) as Chat Completions.

Request (`to_chat`): `model`, `max_tokens` (required, >= 1), `messages` (user/assistant turns, a
string or content blocks; `system`-role messages too, see below), `system` (a string or text blocks:
one leading system message), `stop_sequences` -> `stop`, `temperature`, `top_p` (both 0-1), `top_k`
(0 = off, not sent), `metadata.user_id` -> `user`, `stream` (a stream asks for usage on every chunk),
custom `tools` -> function tools, `tool_choice` (auto / any -> required / tool -> named / none;
`disable_parallel_tool_use` -> `parallel_tool_calls: false`; a forcing choice without tools is
refused, a non-forcing one is not sent), `output_config.format` (json_schema) -> `response_format`.

Blocks: `text`; `image` (base64 -> a `data:` URL, url); `tool_use` in assistant turns -> `tool_calls`
(text and tool_use of one turn: one assistant message); `tool_result` in user turns -> a `tool`
message before the rest of that turn (its text blocks joined with newlines, a `tool_reference` as
the line `Tool available: <name>`; `is_error: true` prefixes the text with `Error: `, chat having
no error flag). Refused (400, `code: unsupported_value`, param such as
`messages[2].content[0].type`): `document`, `search_result`, server tool blocks, images inside tool
results, `file` image sources, unknown block types.

As Claude Code speaks it (docs/design/022-dialects.md, "Messages as Claude Code speaks it"), one
decision a line:
- `system`-role messages inside `messages` (a string or text blocks): a chat `system` message at
  that position (empty ones are left out); the top-level `system` stays the leading one.
- `thinking` (`enabled` with integer `budget_tokens` >= 1024, `adaptive`, `between_tools`,
  `disabled`; optional `display`: `summarized` | `display` | `omitted` | `updates`, the last
  answered as omitted): validated (400 naming `thinking.*`), then
  `chat_template_kwargs.enable_thinking` (true, or false for `disabled`; merged over a client-sent
  `chat_template_kwargs`), and when on, `reasoning_effort` from `output_config.effort`. Absent:
  nothing is added. `budget_tokens` is not held to `max_tokens` (interleaved thinking lets it
  exceed it) and is not sent (the pool has no thinking budget).
- `output_config.effort` (`low` | `medium` | `high` | `xhigh` | `max`, else 400): with thinking on,
  `reasoning_effort` (`xhigh` and `max` -> `high`); otherwise validated and dropped.
- `thinking` blocks in assistant turns: `thinking` and `signature` strings, the signature one this
  gateway issued for that text (`Sealer.verify`), else 400 on `...signature`; then dropped (the pool
  takes no reasoning back). `redacted_thinking`: its `data` sealed by this gateway
  (`Sealer.unseal`), else 400; dropped. Either in a user turn: 400 (assistant content only).
- `cache_control` (an object) on any block, tool or system block: accepted, not sent. When the
  request has one, `prompt_cache_key` = sha256 hex of the JSON of the model and the translated
  conversation root (its system messages and messages up to the first user message): the same for
  every turn of one conversation wherever the client moves its breakpoints, for replica affinity.
- Tools: custom (`type` absent or `custom`) -> function tools; `strict`, `input_examples`,
  `eager_input_streaming`, `allowed_callers` and `cache_control` validated for type and ignored;
  `defer_loading: true` holds the tool back until a `tool_reference` in some `tool_result` names it
  (Anthropic's tool search contract). Anthropic-defined tools (`web_search_*`, `web_fetch_*`,
  `code_execution_*`, `tool_search_tool_*`, `mcp_toolset`, `bash_*`, `text_editor_*`,
  `computer_*`, `memory_*`, any `<name>_<YYYYMMDD>`): dropped, named by `dropped_tools(body)`; a
  `tool_choice` naming a dropped or held-back tool is a 400. Another tool `type`: 400.
- `mcp_servers`: a non-empty array is refused (400 `unsupported_value`: a gateway runs no MCP
  servers); empty: accepted.
- `context_management` (an object), `container` (a string or an object), `service_tier` (a
  string): validated for type and dropped (no server-side context edits, containers or tiers).
- `metadata.user_id` -> `user`.
Any other unknown key is dropped silently (vLLM's sampling extras excepted:
`gateway.dialects.ENGINE_EXTRAS` pass to the pool), as the chat relay passes unknown chat fields
through (Anthropic's beta fields would otherwise break clients): `inference_geo`, `speed`,
`diagnostics`, blocks' `citations`, ...

Answers (`from_chat`, `stream`, `error`): gateway.dialects._messages_stream.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import orjson

from gateway.dialects import StreamTranslator, engine_extras
from gateway.dialects._messages_stream import MessagesStream, error_body, message_of, thinking_of
from gateway.dialects.seal import Sealer
from gateway.errors import InvalidRequestError

__all__ = ["MessagesDialect", "count_request", "dropped_tools"]

_OWN_EXTRAS: Final = frozenset({"top_k"})  # Anthropic's own (0 means off: not sent)
_THINKING_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})
_MEDIA_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_CHOICES: Final[Mapping[str, str]] = MappingProxyType({"auto": "auto", "any": "required", "none": "none"})
_STREAM_OPTIONS: Final = MappingProxyType({"include_usage": True, "continuous_usage_stats": True})
_THINKING_TYPES: Final = frozenset({"enabled", "adaptive", "between_tools", "disabled"})
# `updates` (Anthropic's 2026-08 beta: progress notes between tool calls, reasoning hidden; Claude Code
# sends it) is answered as `omitted`: a self-hosted pool writes no progress notes.
_DISPLAYS: Final = frozenset({"summarized", "display", "omitted", "updates"})
# Anthropic's effort levels as the reasoning_effort vLLM takes (low / medium / high).
_EFFORTS: Final[Mapping[str, str]] = MappingProxyType(
    {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
)
# Anthropic-defined tools are versioned `<family>_<YYYYMMDD>`; these three have undated names too.
_ANTHROPIC_TOOL: Final = re.compile(r"[a-z][a-z0-9_]*_[0-9]{8}")
_ANTHROPIC_ALIASES: Final = frozenset({"mcp_toolset", "tool_search_tool_regex", "tool_search_tool_bm25"})


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


def _typed(obj: Mapping[str, Any], key: str, param: str, kind: type | tuple[type, ...], what: str) -> None:
    """An optional field's type (accepted, then ignored or read by the caller)."""
    v = obj.get(key)
    if v is not None and not isinstance(v, kind):
        raise _bad(f"must be {what}", f"{param}.{key}" if param else key)


def _unsupported(what: str, param: str) -> InvalidRequestError:
    return _bad(f"{what} not supported by this gateway", f"{param}.type", "unsupported_value")


class _Scan:
    """What translating one request learns on the way: the sealer that checks thinking blocks sent
    back (None: count_tokens without one, which checks their shape only), whether any block asked
    for caching, and the tools `tool_reference` blocks loaded."""

    __slots__ = ("sealer", "cached", "loaded")

    def __init__(self, sealer: Sealer | None) -> None:
        self.sealer = sealer
        self.cached = False
        self.loaded: set[str] = set()

    def cache_control(self, obj: Mapping[str, Any], param: str) -> None:
        if obj.get("cache_control") is not None:
            _typed(obj, "cache_control", param, dict, "an object")
            self.cached = True


def _blocks(content: Any, param: str, scan: _Scan) -> list[tuple[str, dict[str, Any], str]]:
    """(param, block, type) of each block of a turn's content array."""
    if not isinstance(content, list):
        raise _bad("must be a string or an array of content blocks", param)
    out = []
    for j, block in enumerate(content):
        bp = f"{param}[{j}]"
        if not isinstance(block, dict):
            raise _bad("must be an object", bp)
        scan.cache_control(block, bp)
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


def _tool_result(block: dict[str, Any], param: str, scan: _Scan) -> dict[str, Any]:
    call = _str(block, "tool_use_id", param, empty=False)
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for bp, part, kind in _blocks(content, f"{param}.content", scan):
            if kind == "text":
                texts.append(_str(part, "text", bp))
            elif kind == "tool_reference":  # Anthropic's tool search: the named deferred tool loads
                name = _str(part, "tool_name", bp, empty=False)
                scan.loaded.add(name)
                texts.append(f"Tool available: {name}")
            else:
                raise _unsupported(f"'{kind}' blocks in a tool_result are", bp)
        text = "\n".join(texts)
    error = block.get("is_error")
    if error is not None and not isinstance(error, bool):
        raise _bad("must be a boolean", f"{param}.is_error")
    return {"role": "tool", "tool_call_id": call, "content": f"Error: {text}" if error else text}


def _tool_use(block: dict[str, Any], param: str) -> dict[str, Any]:
    arguments = orjson.dumps(_dict(block, "input", param)).decode()
    function = {"name": _str(block, "name", param, empty=False), "arguments": arguments}
    return {"id": _str(block, "id", param, empty=False), "type": "function", "function": function}


def _thinking_block(block: dict[str, Any], kind: str, param: str, scan: _Scan) -> None:
    """A thinking block sent back: checked (the gateway's own, unchanged), then dropped."""
    if kind == "thinking":
        text = _str(block, "thinking", param)
        signature = _str(block, "signature", param)
        if scan.sealer is not None and not scan.sealer.verify(text, signature):
            raise _bad(
                "the signature was not issued by this gateway for this thinking text",
                f"{param}.signature",
                "invalid_value",
            )
    else:
        data = _str(block, "data", param)
        if scan.sealer is not None and scan.sealer.unseal(data) is None:
            raise _bad("the data was not issued by this gateway", f"{param}.data", "invalid_value")


def _misplaced(kind: str, param: str, role: str) -> InvalidRequestError:
    return _bad(f"'{kind}' blocks are not allowed in {role} turns", f"{param}.type", "invalid_value")


def _user_turn(content: Any, param: str, scan: _Scan) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for bp, block, kind in _blocks(content, param, scan):
        if kind == "text":
            parts.append({"type": "text", "text": _str(block, "text", bp)})
        elif kind == "image":
            parts.append(_image(block, bp))
        elif kind == "tool_result":
            results.append(_tool_result(block, bp, scan))
        elif kind == "tool_use" or kind in _THINKING_BLOCKS:
            raise _misplaced(kind, bp, "user")
        else:
            raise _unsupported(f"content block type '{kind}' is", bp)
    if parts or not results:
        results.append({"role": "user", "content": parts or ""})
    return results


def _assistant_turn(content: Any, param: str, scan: _Scan) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for bp, block, kind in _blocks(content, param, scan):
        if kind == "text":
            texts.append(_str(block, "text", bp))
        elif kind == "tool_use":
            calls.append(_tool_use(block, bp))
        elif kind in _THINKING_BLOCKS:
            _thinking_block(block, kind, bp, scan)
        elif kind in ("tool_result", "image"):
            raise _misplaced(kind, bp, "assistant")
        else:
            raise _unsupported(f"content block type '{kind}' is", bp)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "\n".join(texts) if texts or not calls else None,
    }
    if calls:
        message["tool_calls"] = calls
    return message


def _system_text(value: Any, param: str, scan: _Scan) -> str:
    """A system prompt (the top-level `system`, or a `system`-role message's content): a string, or
    text blocks joined with newlines."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _bad("must be a string or an array of text blocks", param)
    texts = []
    for bp, block, kind in _blocks(value, param, scan):
        if kind != "text":
            raise _bad("system blocks must be 'text' blocks", f"{bp}.type", "invalid_value")
        texts.append(_str(block, "text", bp))
    return "\n".join(texts)


def _messages(value: Any, scan: _Scan) -> list[dict[str, Any]]:
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
            out.extend(_user_turn(content, f"{p}.content", scan))
        elif role == "assistant":
            out.append(_assistant_turn(content, f"{p}.content", scan))
        elif role == "system":
            text = _system_text(content, f"{p}.content", scan)
            if text:
                out.append({"role": "system", "content": text})
        else:
            raise _bad(f"must be 'user', 'assistant' or 'system', not '{role}'", f"{p}.role", "invalid_value")
    return out


def _system(value: Any, scan: _Scan) -> list[dict[str, Any]]:
    if value is None:
        return []
    text = _system_text(value, "system", scan)
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


def _int(body: Mapping[str, Any], key: str, minimum: int, param: str = "") -> int | None:
    v = body.get(key)
    param = param or key
    if v is None:
        return None
    if not _is_int(v):
        raise _bad("must be an integer", param)
    if v < minimum:
        raise _bad(f"must be >= {minimum}", param, "invalid_value")
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


def _accepted(body: Mapping[str, Any]) -> None:
    """Fields accepted for what Anthropic runs server-side, which a gateway in front of chat pools
    does not: their type checked, then dropped. MCP servers are refused (the model would expect
    their tools to run)."""
    _typed(body, "context_management", "", dict, "an object")
    _typed(body, "container", "", (str, dict), "a string or an object")
    _typed(body, "service_tier", "", str, "a string")
    servers = body.get("mcp_servers")
    if servers is not None:
        if not isinstance(servers, list):
            raise _bad("must be an array", "mcp_servers")
        if servers:
            message = "MCP servers are not supported by this gateway (it runs none)"
            raise _bad(message, "mcp_servers", "unsupported_value")


def _is_anthropic_tool(kind: str) -> bool:
    return kind in _ANTHROPIC_ALIASES or _ANTHROPIC_TOOL.fullmatch(kind) is not None


def _tool_name(tool: Mapping[str, Any], kind: str) -> str:
    for key in ("name", "mcp_server_name"):
        v = tool.get(key)
        if isinstance(v, str) and v:
            return v
    return kind


def dropped_tools(body: Mapping[str, Any]) -> list[str]:
    """The names of the Anthropic-defined tools (server tools and Anthropic-schema client tools) in
    `body` that the translation leaves out of the chat request, in request order (an
    `mcp_toolset` by its server's name, a nameless one by its type). Tolerant: reads what
    `to_chat` validated, and answers [] for anything malformed."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    out = []
    for tool in tools:
        if isinstance(tool, dict):
            kind = tool.get("type")
            if isinstance(kind, str) and kind != "custom" and _is_anthropic_tool(kind):
                out.append(_tool_name(tool, kind))
    return out


class _Tools:
    """The chat tools of a request, and the names the pool is not given: Anthropic-defined tools
    (dropped) and deferred tools no `tool_reference` loaded (held back)."""

    __slots__ = ("chat", "dropped", "held")

    def __init__(self) -> None:
        self.chat: list[dict[str, Any]] = []
        self.dropped: set[str] = set()
        self.held: set[str] = set()


def _custom_tool(tool: dict[str, Any], p: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": _str(tool, "name", p, empty=False)}
    if tool.get("description") is not None:
        function["description"] = _str(tool, "description", p)
    function["parameters"] = _dict(tool, "input_schema", p)
    _typed(tool, "strict", p, bool, "a boolean")
    _typed(tool, "defer_loading", p, bool, "a boolean")
    _typed(tool, "eager_input_streaming", p, bool, "a boolean")
    _typed(tool, "input_examples", p, list, "an array")
    _typed(tool, "allowed_callers", p, list, "an array")
    return function


def _tools(value: Any, scan: _Scan) -> _Tools:
    out = _Tools()
    if value is None:
        return out
    if not isinstance(value, list):
        raise _bad("must be an array", "tools")
    for i, tool in enumerate(value):
        p = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad("must be an object", p)
        scan.cache_control(tool, p)
        kind = tool.get("type")
        if kind is not None and not isinstance(kind, str):
            raise _bad("must be a string", f"{p}.type")
        if kind not in (None, "custom"):
            if not _is_anthropic_tool(kind):
                raise _unsupported(f"tool type '{kind}' is", p)
            out.dropped.add(_tool_name(tool, kind))
            continue
        function = _custom_tool(tool, p)
        if tool.get("defer_loading") and function["name"] not in scan.loaded:
            out.held.add(function["name"])
        else:
            out.chat.append({"type": "function", "function": function})
    return out


def _tool_choice(value: Any, tools: _Tools) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad("must be an object", "tool_choice")
    kind = _str(value, "type", "tool_choice")
    choice: Any
    if kind == "tool":
        name = _str(value, "name", "tool_choice", empty=False)
        if name in tools.dropped or name in tools.held:
            why = (
                "an Anthropic-defined tool this gateway cannot run"
                if name in tools.dropped
                else "a deferred tool no tool_reference has loaded"
            )
            raise _bad(f"'{name}' is {why}", "tool_choice.name", "invalid_value")
        choice = {"type": "function", "function": {"name": name}}
    elif kind in _CHOICES:
        choice = _CHOICES[kind]
    else:
        raise _bad("must be one of auto, any, tool, none", "tool_choice.type", "invalid_value")
    serial = value.get("disable_parallel_tool_use")
    if serial is not None and not isinstance(serial, bool):
        raise _bad("must be a boolean", "tool_choice.disable_parallel_tool_use")
    if not tools.chat:
        if kind in ("any", "tool"):
            raise _bad(f"'{kind}' needs at least one tool in `tools`", "tool_choice.type", "invalid_value")
        return {}
    return {"tool_choice": choice, "parallel_tool_calls": False} if serial else {"tool_choice": choice}


def _output_config(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(response_format, reasoning effort) of `output_config`."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise _bad("must be an object", "output_config")
    given = value.get("effort")
    if given is not None and (not isinstance(given, str) or given not in _EFFORTS):
        raise _bad("must be one of low, medium, high, xhigh, max", "output_config.effort", "invalid_value")
    effort = _EFFORTS[given] if given is not None else None
    fmt = value.get("format")
    if fmt is None:
        return None, effort
    if not isinstance(fmt, dict):
        raise _bad("must be an object", "output_config.format")
    if _str(fmt, "type", "output_config.format") != "json_schema":
        raise _bad("must be 'json_schema'", "output_config.format.type", "invalid_value")
    schema = _dict(fmt, "schema", "output_config.format")
    response_format = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    return response_format, effort


def _thinking(value: Any) -> bool | None:
    """Whether `thinking` turns the pool's reasoning on (None: not asked either way)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad("must be an object", "thinking")
    kind = _str(value, "type", "thinking")
    if kind not in _THINKING_TYPES:
        raise _bad("must be one of enabled, adaptive, disabled", "thinking.type", "invalid_value")
    if kind == "enabled":
        if value.get("budget_tokens") is None:
            raise _missing("thinking.budget_tokens")
        _int(value, "budget_tokens", 1024, "thinking.budget_tokens")
    display = value.get("display")
    if display is not None and (not isinstance(display, str) or display not in _DISPLAYS):
        raise _bad(
            "must be one of summarized, display, omitted, updates", "thinking.display", "invalid_value"
        )
    return kind != "disabled"


def _reasoning(body: Mapping[str, Any], thinking: bool, effort: str | None, chat: dict[str, Any]) -> None:
    """The pool's reasoning controls: vLLM's Qwen3-style templates read `enable_thinking` from
    `chat_template_kwargs` (the client's own merged under it); `reasoning_effort` when on."""
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise _bad("must be an object", "chat_template_kwargs")
    chat["chat_template_kwargs"] = {**(kwargs or {}), "enable_thinking": thinking}
    if thinking and effort is not None:
        chat["reasoning_effort"] = effort


def _cache_key(model: str, messages: list[dict[str, Any]]) -> str:
    """The conversation root's digest: system messages and messages up to the first user message,
    as translated (without the `cache_control` markers, which clients move from turn to turn)."""
    root = []
    for m in messages:
        root.append(m)
        if m["role"] == "user":
            break
    return hashlib.sha256(orjson.dumps([model, root])).hexdigest()


def _translate(body: Mapping[str, Any], sealer: Sealer | None, *, count: bool) -> dict[str, Any]:
    model = body.get("model")
    if model is None:
        raise _missing("model")
    if not isinstance(model, str) or not model:
        raise _bad("must be a non-empty string", "model")
    scan = _Scan(sealer)
    messages = _system(body.get("system"), scan) + _messages(body.get("messages"), scan)
    chat: dict[str, Any] = {"model": model, "messages": messages}
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
    tools = _tools(body.get("tools"), scan)
    if tools.chat:
        chat["tools"] = tools.chat
    chat.update(_tool_choice(body.get("tool_choice"), tools))
    response_format, effort = _output_config(body.get("output_config"))
    if response_format is not None:
        chat["response_format"] = response_format
    thinking = _thinking(body.get("thinking"))
    _accepted(body)
    if not count:  # a count's chat body only sizes the prompt
        if thinking is not None:
            _reasoning(body, thinking, effort, chat)
        if scan.cached:
            chat["prompt_cache_key"] = _cache_key(model, messages)
    engine_extras(dict(body), chat, _OWN_EXTRAS)
    return chat


def count_request(body: dict[str, Any], sealer: Sealer | None = None) -> dict[str, Any]:
    """A `/v1/messages/count_tokens` body validated like a Messages request (`max_tokens` and `stream`
    neither required nor read), as the chat body whose prompt size answers it: no `max_tokens`, no
    `stream`, no reasoning controls, no `prompt_cache_key`. The answer the gateway makes of its count
    is `{"input_tokens": N}`. Thinking blocks sent back are verified with `sealer`; without one only
    their shape is checked (a count reaches no pool, so an unverified text reaches no model)."""
    return _translate(body, sealer, count=True)


class MessagesDialect:
    """Anthropic Messages (gateway.dialects.Dialect). `sealer` signs the thinking blocks it answers
    and checks those sent back: one per deployment key (gateway.dialects.seal), shared with the
    Responses dialect; the default, a random key, verifies only on this instance."""

    name = "messages"
    max_tokens_is_ceiling = True  # `max_tokens` is required

    def __init__(self, *, sealer: Sealer | None = None) -> None:
        self._sealer = sealer if sealer is not None else Sealer()

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return _translate(body, self._sealer, count=False)

    def count_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """`count_request` with this dialect's sealer (thinking blocks verified as `to_chat` does)."""
        return count_request(body, self._sealer)

    def from_chat(self, chat: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        return message_of(chat, request.get("model"), thinking_of(request, self._sealer))

    def stream(self, request: dict[str, Any]) -> StreamTranslator:
        return MessagesStream(request.get("model"), thinking_of(request, self._sealer))

    def error(self, status: int, error: dict[str, Any]) -> dict[str, Any]:
        return error_body(status, error)
