"""OpenAI Responses (`POST /v1/responses`) <-> Chat Completions (gateway.dialects).

The request becomes a chat body:

- `input` (a string: one user message; or a list of items): `message` items (`type` may be absent;
  roles user / assistant / system / developer, developer -> system at its position; content a string
  or `input_text` / `output_text` / `refusal` / `input_image` parts); calls (`function_call`,
  `custom_tool_call`, `local_shell_call`: consecutive ones, and a preceding assistant message, make one
  assistant message with `tool_calls`) and their outputs (`function_call_output`,
  `custom_tool_call_output`, `local_shell_call_output` -> `tool` messages); `reasoning` items are
  dropped (the pool takes no reasoning back), but one carrying `encrypted_content` must be the
  gateway's own (gateway.dialects.seal), else 400;
- `instructions` -> a leading system message; `max_output_tokens` -> `max_tokens`; `temperature`,
  `top_p`, `user`, `parallel_tool_calls`, `seed`, `prompt_cache_key` (<= 256 characters) copied;
  `reasoning.effort` -> `reasoning_effort` (as given: vLLM and OpenAI chat take the same values) and
  `chat_template_kwargs.enable_thinking` (false for `none` only: `minimal` still thinks, briefly; a
  client's own `chat_template_kwargs` kept beside it);
  `text.format` -> `response_format`; `stream: true` asks for usage on every chunk
  (`stream_options: {include_usage, continuous_usage_stats}`).
- Tools (the client's own become chat function tools): `function` as it is; `namespace` (a named group
  of function and custom tools, what Codex sends) flattened, each member named
  `<namespace>__<name>`, or, when that is not a valid chat name (`^[A-Za-z0-9_-]{1,64}$`) or is taken,
  a 55-character stem plus `_` and 8 hex characters of a digest of the pair (deterministic: the way
  out rebuilds the same table from the request); `custom` (free-form input, optionally a grammar) as a
  function of one string parameter `input` (the grammar, which chat cannot enforce, is written into
  the description); `local_shell` as a function `local_shell` of an argv `command`. Hosted tools
  (`HOSTED_TOOLS`: OpenAI runs them, no pool can) are dropped, and a `tool_choice` naming one becomes
  `auto` (with no tool left, no `tool_choice` is sent); `hosted_tools(body)` lists them so the
  pipeline can refuse them instead (an alias's `route.hosted_tools: reject`, `reject_hosted`).

Refused (400): `previous_response_id`, `conversation`, `prompt` and `background: true` (the gateway
stores no responses: send the whole conversation as `input`); `shell` and `apply_patch` tools (client
tools whose calls are not translated); `input_image` by `file_id`; unknown item, part and tool types.
Accepted and not forwarded: `store` (true or false: the response says `store: false`), `metadata`
(echoed in the response), `client_metadata`, `reasoning.summary` (read on the way out), `truncation`,
`include` (`reasoning.encrypted_content` read on the way out), `service_tier`, `safety_identifier`,
`stream_options`, `text.verbosity`. Any other top-level key is dropped silently (vLLM's sampling
extras excepted: `gateway.dialects.ENGINE_EXTRAS` pass to the pool), as OpenAI-compatible servers do.
Params in errors are named in the Responses API's terms (`input[3].content[0].type`).

The answer (a chat.completion, or its chunk stream: gateway.dialects._responses_stream) becomes a
Response object: a `reasoning` item for the pool's reasoning, a `message` item for the text, one call
item per tool call, named as the client declared it; finish_reason `length` makes it `incomplete`
(`incomplete_details.reason: max_output_tokens`).

`input_tokens_request` is `POST /v1/responses/input_tokens`' body as the chat body whose prompt size
answers it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from gateway.dialects import engine_extras
from gateway.dialects._responses_stream import (
    Callee,
    Outward,
    ResponsesStream,
    ending,
    envelope,
    output_items,
    response_base,
    usage,
)
from gateway.dialects.seal import Sealer
from gateway.errors import InvalidRequestError

__all__ = [
    "HOSTED_TOOLS",
    "LOCAL_SHELL",
    "ResponsesDialect",
    "flat_name",
    "hosted_tools",
    "input_tokens_request",
    "reject_hosted",
]

# Tools OpenAI's servers run (search, files, code, images, a computer, remote MCP servers, tool search).
HOSTED_TOOLS: Final = frozenset(
    {
        "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11",
        "file_search", "code_interpreter", "image_generation", "computer", "computer_use_preview", "mcp",
        "tool_search", "programmatic_tool_calling",
    }
)  # fmt: skip
LOCAL_SHELL: Final = "local_shell"  # the chat name of the `local_shell` tool
_CLIENT_UNTRANSLATED: Final = frozenset({"shell", "apply_patch"})
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_STATELESS = "the gateway stores no responses: send the whole conversation as `input`"
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
_EFFORTS: Final = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
_SUMMARIES: Final = ("auto", "concise", "detailed")
_ENCRYPTED: Final = "reasoning.encrypted_content"
_CACHE_KEY_MAX: Final = 256
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NOT_NAME: Final = re.compile(r"[^A-Za-z0-9_-]")
_SEP: Final = "__"
_STEM: Final = 55  # + "_" + 8 hex characters = 64, the longest chat function name
_ITEMS: Final = (
    "message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, "
    "local_shell_call, local_shell_call_output, reasoning"
)


def _bad(message: str, param: str | None, code: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def _missing(param: str) -> InvalidRequestError:
    return _bad(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def _wrong_type(param: str, expected: str) -> InvalidRequestError:
    return _bad(f"Invalid type for '{param}': expected {expected}.", param, "invalid_type")


def _string(item: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    value = item.get(key)
    if value is None:
        if required:
            raise _missing(f"{path}.{key}" if path else key)
        return None
    if not isinstance(value, str):
        raise _wrong_type(f"{path}.{key}" if path else key, "a string")
    return value


def _text(item: Mapping[str, Any], key: str, path: str) -> str:
    value = _string(item, key, path)
    assert value is not None
    return value


# -- tools ----------------------------------------------------------------------------------------


def flat_name(namespace: str, name: str, taken: frozenset[str] | set[str] = frozenset()) -> str:
    """The chat name of `namespace`'s tool `name`: `<namespace>__<name>` when that is a valid chat
    function name not in `taken`, else a stem of it (invalid characters made `_`) and 8 hex characters
    of a digest of the exact pair, salted until free."""
    plain = f"{namespace}{_SEP}{name}"
    if len(plain) <= 64 and plain not in taken and _NAME.fullmatch(plain):
        return plain
    stem = _NOT_NAME.sub("_", plain[:_STEM])
    pair = f"{namespace}\x00{name}".encode()
    for salt in range(len(taken) + 1):
        flat = f"{stem}_{hashlib.sha256(pair + salt.to_bytes(8, 'big')).hexdigest()[:8]}"
        if flat not in taken:
            return flat
    raise _bad(f"No free name for tool {name!r} of namespace {namespace!r}.", "tools", "invalid_value")


@dataclass
class _Tools:
    """The request's tools as chat tools, and what is needed to name calls both ways."""

    chat: list[dict[str, Any]] = field(default_factory=list)
    callees: dict[str, Callee] = field(default_factory=dict)  # chat name -> declared (non-plain only)
    names: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, name) -> chat name
    hosted: list[str] = field(default_factory=list)  # hosted tool types dropped, first seen first

    def chat_name(self, namespace: str | None, name: str) -> str:
        """The chat name of a call coming back (a namespace no longer declared: named as if it were)."""
        if namespace is None:
            return name
        return self.names.get((namespace, name)) or flat_name(namespace, name)


def _function(tool: Mapping[str, Any], path: str, name: str, note: str | None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    description = _string(tool, "description", path, required=False)
    if note:
        description = f"{description}\n\n{note}" if description else note
    if description is not None:
        function["description"] = description
    if tool.get("parameters") is not None:
        if not isinstance(tool["parameters"], dict):
            raise _wrong_type(f"{path}.parameters", "an object")
        function["parameters"] = tool["parameters"]
    if tool.get("strict") is not None:
        if not isinstance(tool["strict"], bool):
            raise _wrong_type(f"{path}.strict", "a boolean")
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _custom(tool: Mapping[str, Any], path: str, name: str, note: str | None) -> dict[str, Any]:
    description = _string(tool, "description", path, required=False) or ""
    fmt = tool.get("format")
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise _wrong_type(f"{path}.format", "an object")
        kind = fmt.get("type")
        if kind == "grammar":
            syntax = _text(fmt, "syntax", f"{path}.format")
            definition = _text(fmt, "definition", f"{path}.format")
            description += f"\n\nThe input must match this {syntax} grammar:\n{definition}"
        elif kind != "text":
            raise _bad(
                f"Invalid value for '{path}.format.type': {kind!r}; supported: text, grammar.",
                f"{path}.format.type",
                "invalid_value",
            )
    if note:
        description += f"\n\n{note}"
    parameters = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "the tool's whole input, as free text"}},
        "required": ["input"],
        "additionalProperties": False,
    }
    function = {"name": name, "description": description.strip(), "parameters": parameters}
    return {"type": "function", "function": function}


def _local_shell() -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": {
            "command": {
                "type": "array",
                "items": {"type": "string"},
                "description": 'the program and its arguments, e.g. ["ls", "-la"]',
            },
            "workdir": {"type": "string", "description": "the directory to run it in"},
            "timeout_ms": {"type": "integer", "description": "how long it may run, in milliseconds"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    description = "Run a command on the user's machine and read its output."
    return {
        "type": "function",
        "function": {"name": LOCAL_SHELL, "description": description, "parameters": parameters},
    }


def _tools(value: object) -> _Tools:
    """Every tool of the request, checked and translated (see the module docstring)."""
    out = _Tools()
    if value is None:
        return out
    if not isinstance(value, list):
        raise _wrong_type("tools", "an array")
    # (path, tool, kind, namespace, the namespace's note): the client's own tools in their order
    own: list[tuple[str, dict[str, Any], str, str | None, str | None]] = []
    for i, tool in enumerate(value):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _wrong_type(path, "an object")
        kind = tool.get("type")
        if kind in HOSTED_TOOLS:
            if kind not in out.hosted:
                out.hosted.append(kind)
        elif kind == "namespace":
            own.extend(_members(tool, path))
        elif kind in ("function", "custom", LOCAL_SHELL):
            own.append((path, tool, kind, None, None))
        elif kind is None:
            raise _missing(f"{path}.type")
        else:
            raise _unsupported_tool(kind, path)
    # Top-level names are the client's own and taken first; a namespace's members fit around them.
    taken: dict[str, str] = {}
    for path, tool, kind, namespace, _ in own:
        if namespace is not None:
            continue
        name = LOCAL_SHELL if kind == LOCAL_SHELL else _text(tool, "name", path)
        if name in taken and (taken[name] != "function" or kind != "function"):
            raise _bad(f"Duplicate tool name {name!r} at '{path}'.", f"{path}.name", "invalid_value")
        taken[name] = kind
    used = set(taken)  # every chat name given so far
    for path, tool, kind, namespace, note in own:
        if kind == LOCAL_SHELL:
            out.chat.append(_local_shell())
            out.callees[LOCAL_SHELL] = Callee(LOCAL_SHELL, LOCAL_SHELL)
            continue
        name = _text(tool, "name", path)
        chat_name = name
        if namespace is not None:
            if (namespace, name) in out.names:
                raise _bad(
                    f"Duplicate tool name {name!r} in namespace {namespace!r} at '{path}'.",
                    f"{path}.name",
                    "invalid_value",
                )
            chat_name = flat_name(namespace, name, used)
            used.add(chat_name)
            out.names[namespace, name] = chat_name
            out.callees[chat_name] = Callee(kind, name, namespace)
        elif kind == "custom":
            out.callees[name] = Callee("custom", name)
        translate = _custom if kind == "custom" else _function
        out.chat.append(translate(tool, path, chat_name, note))
    return out


def _members(
    tool: dict[str, Any], path: str
) -> list[tuple[str, dict[str, Any], str, str | None, str | None]]:
    namespace = _text(tool, "name", path)
    if not namespace:
        raise _bad(f"Invalid '{path}.name': empty.", f"{path}.name", "invalid_value")
    description = _string(tool, "description", path, required=False)
    note = (
        f"(One of the {namespace} tools: {description})"
        if description
        else f"(One of the {namespace} tools.)"
    )
    members = tool.get("tools")
    if members is None:
        raise _missing(f"{path}.tools")
    if not isinstance(members, list):
        raise _wrong_type(f"{path}.tools", "an array")
    out: list[tuple[str, dict[str, Any], str, str | None, str | None]] = []
    for j, member in enumerate(members):
        where = f"{path}.tools[{j}]"
        if not isinstance(member, dict):
            raise _wrong_type(where, "an object")
        kind = member.get("type")
        if kind not in ("function", "custom"):
            raise _bad(
                f"Invalid value for '{where}.type': {kind!r}; a namespace holds function and custom tools.",
                f"{where}.type",
                "invalid_value",
            )
        out.append((where, member, kind, namespace, note))
    return out


def _unsupported_tool(kind: object, path: str) -> InvalidRequestError:
    why = (
        "its calls are not translated to chat; declare it as a function or custom tool"
        if kind in _CLIENT_UNTRANSLATED
        else "supported: function, custom, namespace, local_shell, and hosted tools (dropped or refused "
        "by the alias's policy)"
    )
    return _bad(
        f"Tool type {kind!r} at '{path}.type' is not supported by this gateway: {why}.",
        f"{path}.type",
        "unsupported_parameter",
    )


def hosted_tools(body: object) -> list[str]:
    """The hosted tool types (`HOSTED_TOOLS`) a Responses request's `tools` has, first seen first, each
    once; empty for a body whose tools are missing or malformed (`to_chat` refuses those)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    kinds: list[str] = []
    for tool in tools if isinstance(tools, list) else []:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind in HOSTED_TOOLS and kind not in kinds:
            kinds.append(kind)
    return kinds


def reject_hosted(kinds: list[str], body: object = None) -> InvalidRequestError:
    """The 400 of an alias whose policy refuses hosted tools (`route.hosted_tools: reject`), for the
    `kinds` `hosted_tools` found; with the request's `body`, the param names the first one's index
    (`tools[8].type`), else `tools`."""
    param = "tools"
    tools = body.get("tools") if isinstance(body, dict) else None
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        if isinstance(tool, dict) and tool.get("type") in kinds:
            param = f"tools[{i}].type"
            break
    named = ", ".join(repr(kind) for kind in kinds)
    tools, are, them = ("tools", "are", "them") if len(kinds) > 1 else ("tool", "is", "it")
    return _bad(
        f"Hosted {tools} {named} {are} not available on this model (its policy is hosted_tools: "
        f"reject): the gateway's pools cannot run OpenAI's hosted tools. Leave {them} out, or declare a "
        "function tool your client runs.",
        param,
        "unsupported_value",
    )


def _tool_choice(choice: object, tools: _Tools) -> str | dict[str, Any]:
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in ("function", "custom"):
            name = _text(choice, "name", "tool_choice")
            return {"type": "function", "function": {"name": name}}
        if kind in HOSTED_TOOLS:
            return "auto"  # the hosted tool is not sent: the model chooses among the client's own
        raise _bad(
            f"tool_choice type {kind!r} is not supported: 'auto', 'none', 'required', a function or a "
            "custom tool.",
            "tool_choice.type",
            "unsupported_parameter",
        )
    raise _bad("Invalid value for 'tool_choice'.", "tool_choice", "invalid_value")


# -- input ----------------------------------------------------------------------------------------


def _part(part: object, path: str, role: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise _wrong_type(path, "an object")
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": _string(part, _TEXT_PARTS[kind], path)}
    if kind == "input_image":
        if role != "user":
            raise _bad(
                f"'{path}': images are accepted in user messages only.", f"{path}.type", "invalid_value"
            )
        url = _string(part, "image_url", path, required=part.get("file_id") is None)
        if url is None:
            raise _bad(
                f"'{path}.file_id': files by id are not supported ({_STATELESS}); send `image_url`.",
                f"{path}.file_id",
                "unsupported_parameter",
            )
        image: dict[str, Any] = {"url": url}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind is None:
        raise _missing(f"{path}.type")
    raise _bad(
        f"Invalid value for '{path}.type': {kind!r}; "
        "supported: input_text, output_text, refusal, input_image.",
        f"{path}.type",
        "invalid_value",
    )


def _content(content: object, path: str, role: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _wrong_type(path, "a string or an array of content parts")
    parts = [_part(part, f"{path}[{j}]", role) for j, part in enumerate(content)]
    if all(part["type"] == "text" for part in parts) and len(parts) <= 1:
        return parts[0]["text"] if parts else ""
    return parts


def _message(item: dict[str, Any], path: str) -> dict[str, Any]:
    role = _string(item, "role", path)
    if role not in _ROLES:
        raise _bad(
            f"Invalid value for '{path}.role': {role!r}; supported: user, assistant, system, developer.",
            f"{path}.role",
            "invalid_value",
        )
    if item.get("content") is None:
        raise _missing(f"{path}.content")
    return {"role": _ROLES[role], "content": _content(item["content"], f"{path}.content", role)}


def _add_call(messages: list[dict[str, Any]], call_id: str, name: str, arguments: str) -> None:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call(messages: list[dict[str, Any]], item: dict[str, Any], path: str, kind: str, tools: _Tools) -> None:
    """A call item coming back, as a tool call of the assistant message it belongs to."""
    call_id = _text(item, "call_id", path)
    if kind == "local_shell_call":
        action = item.get("action")
        if not isinstance(action, dict):
            raise _wrong_type(f"{path}.action", "an object")
        command = action.get("command")
        if not (isinstance(command, list) and all(isinstance(part, str) for part in command)):
            raise _wrong_type(f"{path}.action.command", "an array of strings")
        arguments: dict[str, Any] = {"command": command}
        if isinstance(action.get("working_directory"), str):
            arguments["workdir"] = action["working_directory"]
        if isinstance(action.get("timeout_ms"), int):
            arguments["timeout_ms"] = action["timeout_ms"]
        _add_call(messages, call_id, LOCAL_SHELL, orjson.dumps(arguments).decode())
        return
    name = _text(item, "name", path)
    namespace = _string(item, "namespace", path, required=False)
    if kind == "custom_tool_call":
        arguments_text = orjson.dumps({"input": _text(item, "input", path)}).decode()
    else:
        arguments_text = _text(item, "arguments", path)
    _add_call(messages, call_id, tools.chat_name(namespace, name), arguments_text)


def _call_output(item: dict[str, Any], path: str, kind: str) -> dict[str, Any]:
    # A local shell call's output names its call by `id` in OpenAI's schema; `call_id` is taken too.
    key = "id" if kind == "local_shell_call_output" and item.get("call_id") is None else "call_id"
    call_id = _string(item, key, path)
    output = item.get("output")
    if output is None:
        raise _missing(f"{path}.output")
    if isinstance(output, list):
        parts = [_part(part, f"{path}.output[{j}]", "tool") for j, part in enumerate(output)]
        output = "".join(part["text"] for part in parts)
    elif not isinstance(output, str):
        raise _wrong_type(f"{path}.output", "a string or an array of text parts")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _reasoning_back(item: dict[str, Any], path: str, sealer: Sealer | None) -> None:
    """A reasoning item coming back: dropped, but what it vouches for must be the gateway's own."""
    sealed = item.get("encrypted_content")
    if sealed is None:
        return
    param = f"{path}.encrypted_content"
    if not isinstance(sealed, str):
        raise _wrong_type(param, "a string")
    if sealer is not None and sealer.unseal(sealed) is None:
        raise _bad(
            f"Invalid '{param}': not issued by this gateway (or changed since). Send reasoning items back "
            "as the gateway returned them, or leave them out.",
            param,
            "invalid_encrypted_content",
        )


def _input_messages(value: object, tools: _Tools, sealer: Sealer | None) -> list[dict[str, Any]]:
    if value is None:
        raise _missing("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise _wrong_type("input", "a string or an array of input items")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        path = f"input[{i}]"
        if not isinstance(item, dict):
            raise _wrong_type(path, "an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, path))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            _call(messages, item, path, kind, tools)
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            messages.append(_call_output(item, path, kind))
        elif kind == "reasoning":
            _reasoning_back(item, path, sealer)
        elif kind is None:
            raise _missing(f"{path}.type")
        else:
            raise _bad(
                f"Invalid value for '{path}.type': {kind!r}; supported: {_ITEMS}.",
                f"{path}.type",
                "invalid_value",
            )
    return messages


# -- the other parameters -------------------------------------------------------------------------


def _refuse_stateful(body: dict[str, Any]) -> None:
    for key in ("previous_response_id", "conversation", "prompt"):
        if body.get(key) is not None:
            raise _bad(f"'{key}' is not supported: {_STATELESS}.", key, "unsupported_parameter")
    if body.get("background"):
        raise _bad(f"'background' is not supported: {_STATELESS}.", "background", "unsupported_parameter")


def _number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong_type(key, "a number")
    if not low <= value <= high:
        raise _bad(f"Invalid value for '{key}': {value}; expected {low} to {high}.", key, "invalid_value")
    return value


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    chat: dict[str, Any] = {}
    limit = body.get("max_output_tokens")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise _wrong_type("max_output_tokens", "an integer")
        if limit < 1:
            raise _bad("Invalid 'max_output_tokens': expected >= 1.", "max_output_tokens", "invalid_value")
        chat["max_tokens"] = limit
    for key, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        value = _number(body, key, low, high)
        if value is not None:
            chat[key] = value
    for key, kind, expected in (("user", str, "a string"), ("parallel_tool_calls", bool, "a boolean")):
        if body.get(key) is not None:
            if not isinstance(body[key], kind):
                raise _wrong_type(key, expected)
            chat[key] = body[key]
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise _wrong_type("seed", "an integer")
        chat["seed"] = seed
    return chat


def _accepted(body: dict[str, Any], chat: dict[str, Any]) -> None:
    """The fields read elsewhere or not at all, checked for their type; `prompt_cache_key` copied."""
    for key, kind, expected in (
        ("metadata", dict, "an object"),
        ("client_metadata", dict, "an object"),
        ("store", bool, "a boolean"),
        ("service_tier", str, "a string"),
        ("safety_identifier", str, "a string"),
        ("truncation", str, "a string"),
    ):
        if body.get(key) is not None and not isinstance(body[key], kind):
            raise _wrong_type(key, expected)
    include = body.get("include")
    if include is not None and not (isinstance(include, list) and all(isinstance(x, str) for x in include)):
        raise _wrong_type("include", "an array of strings")
    cache_key = _string(body, "prompt_cache_key", "", required=False)
    if cache_key is not None:
        if len(cache_key) > _CACHE_KEY_MAX:
            raise _bad(
                f"Invalid 'prompt_cache_key': longer than {_CACHE_KEY_MAX} characters.",
                "prompt_cache_key",
                "string_above_max_length",
            )
        chat["prompt_cache_key"] = cache_key


def _reasoning(body: dict[str, Any], chat: dict[str, Any]) -> None:
    reasoning = body.get("reasoning")
    if reasoning is None:
        return
    if not isinstance(reasoning, dict):
        raise _wrong_type("reasoning", "an object")
    for key in ("summary", "generate_summary"):
        value = reasoning.get(key)
        if value is not None and value not in _SUMMARIES:
            raise _bad(
                f"Invalid value for 'reasoning.{key}': {value!r}; supported: {', '.join(_SUMMARIES)}.",
                f"reasoning.{key}",
                "invalid_value",
            )
    effort = reasoning.get("effort")
    if effort is None:
        return  # the model's default: nothing asked of the pool
    if effort not in _EFFORTS:
        raise _bad(
            f"Invalid value for 'reasoning.effort': {effort!r}; supported: {', '.join(_EFFORTS)}.",
            "reasoning.effort",
            "invalid_value",
        )
    chat["reasoning_effort"] = effort
    # Thinking models whose template switches thinking (Qwen3, ...) read this; others ignore it. A
    # client's own template arguments (sent through `extra_body`) are kept beside it, as Messages does.
    own = body.get("chat_template_kwargs")
    chat["chat_template_kwargs"] = {
        **(own if isinstance(own, dict) else {}),
        "enable_thinking": effort != "none",
    }


def _response_format(text: object) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _wrong_type("text", "an object")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _wrong_type("text.format", "an object")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise _bad(f"Invalid value for 'text.format.type': {kind!r}.", "text.format.type", "invalid_value")
    schema: dict[str, Any] = {"name": _string(fmt, "name", "text.format")}
    if fmt.get("schema") is None:
        raise _missing("text.format.schema")
    if not isinstance(fmt["schema"], dict):
        raise _wrong_type("text.format.schema", "an object")
    schema["schema"] = fmt["schema"]
    description = _string(fmt, "description", "text.format", required=False)
    if description is not None:
        schema["description"] = description
    if isinstance(fmt.get("strict"), bool):
        schema["strict"] = fmt["strict"]
    return {"type": "json_schema", "json_schema": schema}


def _translate(body: object, sealer: Sealer | None) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _wrong_type("body", "a JSON object")
    _refuse_stateful(body)
    model = _string(body, "model", "")
    if not model:
        raise _missing("model")
    tools = _tools(body.get("tools"))
    messages: list[dict[str, Any]] = []
    instructions = _string(body, "instructions", "", required=False)
    if instructions:
        messages.append({"role": "system", "content": instructions})
    messages.extend(_input_messages(body.get("input"), tools, sealer))
    if not messages:
        raise _bad("'input' must contain at least one message.", "input", "invalid_value")
    chat: dict[str, Any] = {"model": model, "messages": messages, **_sampling(body)}
    _accepted(body, chat)
    _reasoning(body, chat)
    if tools.chat:
        chat["tools"] = tools.chat
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"], tools)
        if tools.hosted and not tools.chat:
            del chat["tool_choice"]  # every tool was hosted and dropped: there is nothing to choose
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    engine_extras(body, chat)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _wrong_type("stream", "a boolean")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return chat


def input_tokens_request(body: dict[str, Any], sealer: Sealer | None = None) -> dict[str, Any]:
    """A `POST /v1/responses/input_tokens` body validated like a Responses request (`max_output_tokens`
    and `stream` not read), as the chat body whose prompt size answers it: no `max_tokens`, no
    `stream`. Without a `sealer`, returned reasoning items' `encrypted_content` is only type-checked
    (nothing of it reaches the count). The answer the gateway makes of its count is
    `{"object": "response.input_tokens", "input_tokens": N}`."""
    chat = _translate(body, sealer)
    for key in ("max_tokens", "stream", "stream_options"):
        chat.pop(key, None)
    return chat


class ResponsesDialect:
    """The OpenAI Responses API as a gateway.dialects.Dialect. `sealer` issues and checks reasoning
    items' `encrypted_content` (one shared by every replica lets any of them take a turn back)."""

    name = "responses"
    max_tokens_is_ceiling = False  # `max_output_tokens` is optional: absent is open-ended

    def __init__(self, *, sealer: Sealer | None = None) -> None:
        self._sealer = sealer if sealer is not None else Sealer()

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return _translate(body, self._sealer)

    def input_tokens_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """`input_tokens_request` with this dialect's sealer."""
        return input_tokens_request(body, self._sealer)

    def from_chat(self, chat: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        base = response_base(chat.get("id"), request)
        choices = chat.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        status, details = ending(choice.get("finish_reason"))
        output = output_items(base, message, self._outward(request))
        if details is not None and output:
            output[-1]["status"] = "incomplete"
        response = envelope(request, base, chat.get("created"), status)
        response.update(output=output, incomplete_details=details, usage=usage(chat.get("usage")))
        return response

    def stream(self, request: dict[str, Any]) -> ResponsesStream:
        return ResponsesStream(request, self._outward(request))

    def error(self, status: int, error: dict[str, Any]) -> dict[str, Any]:
        body = {key: error.get(key) for key in ("message", "type", "param", "code")}
        return {"error": {**error, **body}}

    def _outward(self, request: dict[str, Any]) -> Outward:
        """How the answer to `request` is rendered (never raising: the request was checked on the way in)."""
        try:
            callees = _tools(request.get("tools")).callees
        except InvalidRequestError:
            callees = {}
        reasoning = request.get("reasoning")
        summary = isinstance(reasoning, dict) and any(
            reasoning.get(key) in _SUMMARIES for key in ("summary", "generate_summary")
        )
        include = request.get("include")
        sealed = isinstance(include, list) and _ENCRYPTED in include
        return Outward(callees, summary, self._sealer.seal if sealed else None)
