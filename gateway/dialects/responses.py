"""OpenAI Responses (`POST /v1/responses`) <-> Chat Completions (gateway.dialects).

The request becomes a chat body:

- `input` (a string: one user message; or a list of items): `message` items (`type` may be absent;
  roles user / assistant / system / developer, developer -> system; content a string or
  `input_text` / `output_text` / `refusal` / `input_image` parts), `function_call` items (consecutive
  ones, and a preceding assistant message, make one assistant message with `tool_calls`),
  `function_call_output` items (-> `tool` messages), `reasoning` items (dropped);
- `instructions` -> a leading system message; `max_output_tokens` -> `max_tokens`; `temperature`,
  `top_p`, `user`, `parallel_tool_calls`, `seed` copied; function `tools` and `tool_choice` in chat's
  shape; `text.format` -> `response_format`; `stream: true` asks for usage on every chunk
  (`stream_options: {include_usage, continuous_usage_stats}`).

Refused (400): `previous_response_id`, `conversation`, `prompt` and `background: true` (the gateway
stores no responses: send the whole conversation as `input`); tools other than functions (web search,
file search, computer, MCP, ...); `input_image` by `file_id`; unknown item and part types. Accepted and
not forwarded: `store` (the response says `store: false`), `metadata` (echoed in the response),
`reasoning`, `truncation`, `include`, `service_tier`, `prompt_cache_key`, `safety_identifier`,
`stream_options`, `text.verbosity`. Any other top-level key is dropped silently (vLLM's sampling
extras excepted: `gateway.dialects.ENGINE_EXTRAS` pass to the pool), as
OpenAI-compatible servers do. Params in errors are named in the Responses API's terms
(`input[3].content[0].type`).

The answer (a chat.completion, or its chunk stream: gateway.dialects._responses_stream) becomes a
Response object: a `message` item for the text, one `function_call` item per tool call; finish_reason
`length` makes it `incomplete` (`incomplete_details.reason: max_output_tokens`).
"""

from __future__ import annotations

from typing import Any

from gateway.dialects import engine_extras
from gateway.dialects._responses_stream import (
    ResponsesStream,
    ending,
    envelope,
    output_items,
    response_base,
    usage,
)
from gateway.errors import InvalidRequestError

__all__ = ["ResponsesDialect"]

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_STATELESS = "the gateway stores no responses: send the whole conversation as `input`"
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


def _bad(message: str, param: str | None, code: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def _missing(param: str) -> InvalidRequestError:
    return _bad(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def _wrong_type(param: str, expected: str) -> InvalidRequestError:
    return _bad(f"Invalid type for '{param}': expected {expected}.", param, "invalid_type")


def _string(item: dict[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    value = item.get(key)
    if value is None:
        if required:
            raise _missing(f"{path}.{key}" if path else key)
        return None
    if not isinstance(value, str):
        raise _wrong_type(f"{path}.{key}" if path else key, "a string")
    return value


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


def _function_call(messages: list[dict[str, Any]], item: dict[str, Any], path: str) -> None:
    call = {
        "id": _string(item, "call_id", path),
        "type": "function",
        "function": {"name": _string(item, "name", path), "arguments": _string(item, "arguments", path)},
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: dict[str, Any], path: str) -> dict[str, Any]:
    call_id = _string(item, "call_id", path)
    output = item.get("output")
    if output is None:
        raise _missing(f"{path}.output")
    if isinstance(output, list):
        parts = [_part(part, f"{path}.output[{j}]", "tool") for j, part in enumerate(output)]
        output = "".join(part["text"] for part in parts)
    elif not isinstance(output, str):
        raise _wrong_type(f"{path}.output", "a string or an array of text parts")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _input_messages(value: object) -> list[dict[str, Any]]:
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
        elif kind == "function_call":
            _function_call(messages, item, path)
        elif kind == "function_call_output":
            messages.append(_call_output(item, path))
        elif kind is None:
            raise _missing(f"{path}.type")
        elif kind != "reasoning":
            raise _bad(
                f"Invalid value for '{path}.type': {kind!r}; supported: message, function_call, "
                "function_call_output, reasoning.",
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
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise _wrong_type("metadata", "an object")
    return chat


def _tool(tool: object, path: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise _wrong_type(path, "an object")
    kind = tool.get("type")
    if kind != "function":
        raise _bad(
            f"Tool type {kind!r} at '{path}.type' is not supported by this gateway: function tools only.",
            f"{path}.type",
            "unsupported_parameter",
        )
    function: dict[str, Any] = {"name": _string(tool, "name", path)}
    description = _string(tool, "description", path, required=False)
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


def _tool_choice(choice: object) -> str | dict[str, Any]:
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}
    if isinstance(choice, dict):
        raise _bad(
            f"tool_choice type {choice.get('type')!r} is not supported: 'auto', 'none', 'required' or a "
            "function.",
            "tool_choice.type",
            "unsupported_parameter",
        )
    raise _bad("Invalid value for 'tool_choice'.", "tool_choice", "invalid_value")


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


def _tools_and_format(body: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _wrong_type("tools", "an array")
        if tools:
            chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format


class ResponsesDialect:
    """The OpenAI Responses API as a gateway.dialects.Dialect."""

    name = "responses"
    max_tokens_is_ceiling = False  # `max_output_tokens` is optional: absent is open-ended

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _wrong_type("body", "a JSON object")
        _refuse_stateful(body)
        model = _string(body, "model", "")
        if not model:
            raise _missing("model")
        messages: list[dict[str, Any]] = []
        instructions = _string(body, "instructions", "", required=False)
        if instructions:
            messages.append({"role": "system", "content": instructions})
        messages.extend(_input_messages(body.get("input")))
        if not messages:
            raise _bad("'input' must contain at least one message.", "input", "invalid_value")
        chat: dict[str, Any] = {"model": model, "messages": messages, **_sampling(body)}
        _tools_and_format(body, chat)
        engine_extras(body, chat)
        stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise _wrong_type("stream", "a boolean")
        if stream:
            chat["stream"] = True
            chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        return chat

    def from_chat(self, chat: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        base = response_base(chat.get("id"), request)
        choices = chat.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        status, details = ending(choice.get("finish_reason"))
        output = output_items(base, message)
        if details is not None and output:
            output[-1]["status"] = "incomplete"
        response = envelope(request, base, chat.get("created"), status)
        response.update(output=output, incomplete_details=details, usage=usage(chat.get("usage")))
        return response

    def stream(self, request: dict[str, Any]) -> ResponsesStream:
        return ResponsesStream(request)

    def error(self, status: int, error: dict[str, Any]) -> dict[str, Any]:
        body = {key: error.get(key) for key in ("message", "type", "param", "code")}
        return {"error": {**error, **body}}
