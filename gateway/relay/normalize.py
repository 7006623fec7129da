"""Turn a client's OpenAI request body into the body sent to a pool (pure functions).

Only what the gateway must understand is checked here (`model`, the messages/prompt/input,
`stream`, `stream_options`, the output-token fields, `n`); every other field (tools,
response_format, logprobs, seed, user, ...) passes through untouched. Output tokens: the client's
`max_completion_tokens` wins over the deprecated `max_tokens`; absent both, the alias's default is
sent; values above the alias's cap are lowered to it. Streams always ask the pool for usage so the
gateway can meter tokens; whether the client sees the usage chunk is remembered in
`Prepared.client_usage`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config import Model
from gateway.edge.exchange import Kind
from gateway.errors import InvalidJSONError, InvalidRequestError


@dataclass(frozen=True, slots=True)
class Prepared:
    body: dict[str, Any]
    alias: str
    stream: bool
    client_usage: bool  # the client asked for the usage chunk (stream_options.include_usage)
    max_tokens: int | None  # output tokens the request may use (after default and cap); None for embeddings


def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise InvalidRequestError("the request body is empty; expected a JSON object")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSONError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    return data


def alias_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise InvalidRequestError(
            "you must provide a model parameter", param="model", code="missing_required_parameter"
        )
    if not isinstance(model, str) or not model:
        raise InvalidRequestError("'model' must be a non-empty string", param="model", code="invalid_type")
    return model


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_messages(messages: Any) -> None:
    if messages is None:
        raise InvalidRequestError(
            "'messages' is a required property", param="messages", code="missing_required_parameter"
        )
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError(
            "'messages' must be a non-empty array", param="messages", code="invalid_type"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequestError(
                f"messages[{i}] must be an object", param=f"messages[{i}]", code="invalid_type"
            )
        role = m.get("role")
        if not isinstance(role, str):
            raise InvalidRequestError(
                f"messages[{i}].role must be a string", param=f"messages[{i}].role", code="invalid_type"
            )
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidRequestError(
                f"messages[{i}].content must be a string or an array of content parts",
                param=f"messages[{i}].content",
                code="invalid_type",
            )


def _check_prompt(prompt: Any, field: str) -> None:
    if prompt is None:
        raise InvalidRequestError(
            f"'{field}' is a required property", param=field, code="missing_required_parameter"
        )
    ok = isinstance(prompt, str) or (
        isinstance(prompt, list)
        and len(prompt) > 0
        and (
            all(isinstance(p, str) for p in prompt)
            or all(_is_int(p) for p in prompt)
            or all(isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt)
        )
    )
    if not ok:
        raise InvalidRequestError(
            f"'{field}' must be a string, an array of strings, or token ids", param=field, code="invalid_type"
        )


def _optional_int(body: dict[str, Any], field: str, minimum: int) -> int | None:
    v = body.get(field)
    if v is None:
        return None
    if not _is_int(v):
        raise InvalidRequestError(f"'{field}' must be an integer", param=field, code="invalid_type")
    if v < minimum:
        raise InvalidRequestError(f"'{field}' must be >= {minimum}", param=field, code="invalid_value")
    return int(v)


def prepare(kind: Kind, body: dict[str, Any], model: Model, upstream_model: str) -> Prepared:
    """Validate what the gateway relies on and rewrite the body for the pool (mutates `body`)."""
    if kind is Kind.CHAT:
        _check_messages(body.get("messages"))
    elif kind is Kind.COMPLETIONS:
        _check_prompt(body.get("prompt"), "prompt")
    else:
        _check_prompt(body.get("input"), "input")
        body["model"] = upstream_model
        return Prepared(body=body, alias=model.name, stream=False, client_usage=False, max_tokens=None)

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequestError("'stream' must be a boolean", param="stream", code="invalid_type")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise InvalidRequestError(
            "'stream_options' must be an object", param="stream_options", code="invalid_type"
        )
    include = opts.get("include_usage") if opts else None
    if include is not None and not isinstance(include, bool):
        raise InvalidRequestError(
            "'stream_options.include_usage' must be a boolean",
            param="stream_options.include_usage",
            code="invalid_type",
        )
    _optional_int(body, "n", 1)

    mct = _optional_int(body, "max_completion_tokens", 1) if kind is Kind.CHAT else None
    mt = _optional_int(body, "max_tokens", 1)
    limits = model.max_tokens
    if mct is not None:
        field, requested = "max_completion_tokens", mct
        body.pop("max_tokens", None)  # one field upstream, the one that won
    elif mt is not None:
        field, requested = "max_tokens", mt
    else:
        field, requested = ("max_completion_tokens" if kind is Kind.CHAT else "max_tokens"), limits.default
    granted = min(requested, limits.cap)
    body[field] = granted

    body["model"] = upstream_model
    if stream:
        # Always meter: vLLM emits the usage chunk only when asked (shared/reference/vllm.md §5).
        new_opts = dict(opts) if opts else {}
        new_opts["include_usage"] = True
        body["stream_options"] = new_opts
    elif opts is not None:
        # OpenAI rejects stream_options without stream; vLLM too. Drop it rather than fail.
        body.pop("stream_options")
    return Prepared(
        body=body, alias=model.name, stream=stream, client_usage=bool(include), max_tokens=granted
    )


_PER_MESSAGE = 8  # role markers and separators a chat template adds around each message


def _text_bytes(content: Any) -> int:
    if isinstance(content, str):
        return len(content.encode())
    if isinstance(content, list):
        n = 0
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                n += len(text.encode()) if isinstance(text, str) else 1024  # images, audio: a flat allowance
            elif isinstance(part, str):
                n += len(part.encode())
            elif isinstance(part, int):
                n += 1
            elif isinstance(part, list):
                n += len(part)
        return n
    return 0


def estimate_input_tokens(kind: Kind, body: dict[str, Any], bytes_per_token: float) -> int:
    """An upper bound of the prompt's tokens, cheap to compute (no tokenizer on the hot path).

    Token-id prompts are counted exactly; text is `bytes / bytes_per_token`; chat adds a per-message
    allowance for the template plus the serialized tools, which the template renders into the prompt.
    """
    if kind is Kind.CHAT:
        n_bytes = 0
        messages = body.get("messages") or []
        for m in messages:
            if isinstance(m, dict):
                n_bytes += _text_bytes(m.get("content"))
                calls = m.get("tool_calls")
                if calls:
                    n_bytes += len(orjson.dumps(calls))
        tools = body.get("tools")
        if tools:
            n_bytes += len(orjson.dumps(tools))
        return int(n_bytes / bytes_per_token) + 1 + _PER_MESSAGE * (len(messages) + 1)
    prompt = body.get("prompt" if kind is Kind.COMPLETIONS else "input")
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        return sum(len(p) for p in prompt)
    return int(_text_bytes(prompt) / bytes_per_token) + 1 + _PER_MESSAGE
