"""Turn a client's OpenAI request body into the body sent to a pool (pure functions).

Only what the gateway must understand is checked here (`model`, the messages/prompt/input,
`stream`, `stream_options`, the output-token fields, `n`, `best_of`); every other field (tools,
response_format, logprobs, seed, user, ...) passes through untouched. Output tokens: the client's
`max_completion_tokens` wins over the deprecated `max_tokens`; absent both, the alias's default is
sent; values above the alias's cap are lowered to it. Streams always ask the pool for usage so the
gateway can meter tokens; whether the client sees the usage chunk is remembered in
`Prepared.client_usage`.

Validation measures what the reservation needs on the way (docs/design/019): the prompt's size
(`InputSize`: text bytes for the calibrated estimate, exact token ids, template allowances) and the
output multipliers (`Prepared.outputs`: prompts x max(n, best_of)), so admission walks nothing again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from gateway.budget.estimate import InputSize
from gateway.config import ImageUrls, Model
from gateway.edge.exchange import Kind
from gateway.errors import InvalidJSONError, InvalidRequestError
from gateway.relay.image_urls import check_image_part

# Bounds of the output multipliers (OpenAI's own: `n` 1-128, `best_of` up to 20).
MAX_N = 128
MAX_BEST_OF = 20
_PER_MESSAGE = 8  # role markers and separators a chat template adds around each message
_PER_PROMPT = 1 + _PER_MESSAGE  # a text prompt's special tokens (BOS, ...), generously
_NON_TEXT = 1024  # an image or audio part: a flat allowance of tokens


class Prepared(NamedTuple):  # per request: a NamedTuple is made without a setattr call per field
    body: dict[str, Any]
    alias: str
    stream: bool
    client_usage: bool  # the client asked for the usage chunk (stream_options.include_usage)
    max_tokens: int | None  # output tokens the request may use (after default and cap); None for embeddings
    size: InputSize = InputSize(0, 0, 0)
    choices: int = 1  # choices the pool answers with: prompts x n
    outputs: int = 1  # sequences the pool generates, each up to max_tokens: prompts x max(n, best_of)


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


def _str_size(s: str) -> tuple[int, int]:
    """(UTF-8 bytes, bytes beyond one per character); `isascii` is O(1) on CPython's compact strings."""
    if s.isascii():
        return len(s), 0
    b = len(s.encode())
    return b, b - len(s)


def _content_size(
    content: list[Any], images: ImageUrls | None = None, where: str = ""
) -> tuple[int, int, int]:
    """(text bytes, extra bytes, fixed tokens) of a message's content parts; image URLs checked against
    `images` (None: not checked)."""
    tb = tx = fixed = 0
    for j, part in enumerate(content):
        if isinstance(part, dict):
            text = part.get("text")
            if isinstance(text, str):
                b, x = _str_size(text)
                tb, tx = tb + b, tx + x
            else:
                fixed += _NON_TEXT
                if images is not None and "image_url" in part:
                    check_image_part(part, images, f"{where}[{j}]")
        elif isinstance(part, str):
            b, x = _str_size(part)
            tb, tx = tb + b, tx + x
        elif isinstance(part, int):
            fixed += 1
        elif isinstance(part, list):
            fixed += len(part)
    return tb, tx, fixed


def _check_messages(messages: Any, images: ImageUrls | None = None) -> InputSize:
    """Validate `messages` and measure them (one pass): the input estimate's raw material; image URLs
    checked against `images` (None: not checked)."""
    if messages is None:
        raise InvalidRequestError(
            "'messages' is a required property", param="messages", code="missing_required_parameter"
        )
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError(
            "'messages' must be a non-empty array", param="messages", code="invalid_type"
        )
    tb = tx = 0
    fixed = 1 + _PER_MESSAGE * (len(messages) + 1)
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
        if isinstance(content, str):
            b, x = _str_size(content)
            tb, tx = tb + b, tx + x
        elif isinstance(content, list):
            b, x, f = _content_size(content, images, f"messages[{i}].content")
            tb, tx, fixed = tb + b, tx + x, fixed + f
        elif content is not None:
            raise InvalidRequestError(
                f"messages[{i}].content must be a string or an array of content parts",
                param=f"messages[{i}].content",
                code="invalid_type",
            )
        calls = m.get("tool_calls")
        if calls:
            tb += len(orjson.dumps(calls))
    return InputSize(tb, tx, fixed)


def _chat_size(body: dict[str, Any], images: ImageUrls | None = None) -> InputSize:
    """The messages' size plus the serialized tools, which the chat template renders into the prompt."""
    size = _check_messages(body.get("messages"), images)
    tools = body.get("tools")
    if not tools:
        return size
    return InputSize(size.text_bytes + len(orjson.dumps(tools)), size.extra_bytes, size.fixed)


def _bad_prompt(field: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"'{field}' must be a string, an array of strings, or token ids", param=field, code="invalid_type"
    )


def _check_prompt(prompt: Any, field: str) -> tuple[int, InputSize]:
    """Validate a prompt (or embeddings input) and measure it: (how many prompts, their size). A list of
    strings or of token-id lists is that many prompts; one token-id list is one prompt."""
    if prompt is None:
        raise InvalidRequestError(
            f"'{field}' is a required property", param=field, code="missing_required_parameter"
        )
    if isinstance(prompt, str):
        b, x = _str_size(prompt)
        return 1, InputSize(b, x, _PER_PROMPT)
    if not isinstance(prompt, list) or not prompt:
        raise _bad_prompt(field)
    first = prompt[0]
    if isinstance(first, str):
        tb = tx = 0
        for p in prompt:
            if not isinstance(p, str):
                raise _bad_prompt(field)
            b, x = _str_size(p)
            tb, tx = tb + b, tx + x
        return len(prompt), InputSize(tb, tx, _PER_PROMPT * len(prompt))
    if _is_int(first):
        if not all(_is_int(t) for t in prompt):
            raise _bad_prompt(field)
        return 1, InputSize(0, 0, len(prompt))
    ids = 0
    for p in prompt:
        if not (isinstance(p, list) and p and all(_is_int(t) for t in p)):
            raise _bad_prompt(field)
        ids += len(p)
    return len(prompt), InputSize(0, 0, ids)


def _optional_int(body: dict[str, Any], field: str, minimum: int, maximum: int | None = None) -> int | None:
    v = body.get(field)
    if v is None:
        return None
    if not _is_int(v):
        raise InvalidRequestError(f"'{field}' must be an integer", param=field, code="invalid_type")
    if v < minimum:
        raise InvalidRequestError(f"'{field}' must be >= {minimum}", param=field, code="invalid_value")
    if maximum is not None and v > maximum:
        raise InvalidRequestError(f"'{field}' must be <= {maximum}", param=field, code="invalid_value")
    return int(v)


def _generated(body: dict[str, Any]) -> tuple[int, int]:
    """(n, sequences generated per prompt): vLLM generates `best_of` candidates and returns the best `n`
    (usage counts the `n` returned), so the reservation covers `max(n, best_of)`."""
    n = _optional_int(body, "n", 1, MAX_N) or 1
    best_of = _optional_int(body, "best_of", 1, MAX_BEST_OF)
    if best_of is None:
        return n, n
    if best_of < n:
        raise InvalidRequestError("'best_of' must be >= 'n'", param="best_of", code="invalid_value")
    return n, best_of


def _stream_flags(body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None, bool]:
    """(stream, the client's stream_options, whether it asked for the usage chunk)."""
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
    return stream, opts, bool(include)


def prepare(kind: Kind, body: dict[str, Any], model: Model, upstream_model: str) -> Prepared:
    """Validate what the gateway relies on and rewrite the body for the pool (mutates `body`); measures
    the prompt and the output multipliers for the reservation on the way (no second pass)."""
    n, per_prompt = _generated(body)  # validated on every endpoint: a bad `n` is a 400, never a 500
    if kind is Kind.CHAT:
        prompts, size = 1, _chat_size(body, model.images)
    elif kind is Kind.COMPLETIONS:
        prompts, size = _check_prompt(body.get("prompt"), "prompt")
    else:
        _, size = _check_prompt(body.get("input"), "input")
        body["model"] = upstream_model
        return Prepared(body, model.name, False, False, None, size, 0, 0)  # embeddings generate nothing

    stream, opts, include = _stream_flags(body)
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
    return Prepared(body, model.name, stream, include, granted, size, prompts * n, prompts * per_prompt)


def input_size(kind: Kind, body: dict[str, Any]) -> InputSize:
    """The size `prepare` measures, for a body that has not been through it (tests, tools)."""
    if kind is Kind.CHAT:
        return _chat_size(body)
    return _check_prompt(body.get("prompt" if kind is Kind.COMPLETIONS else "input"), "prompt")[1]


def estimate_input_tokens(kind: Kind, body: dict[str, Any], bytes_per_token: float) -> int:
    """The gateway's input estimate before any calibration (gateway.budget.estimate): text at
    `bytes_per_token`, token ids exactly, a per-message or per-prompt allowance for the template and
    special tokens, a flat allowance per image or audio part, the serialized tools (which the template
    renders into the prompt)."""
    size = input_size(kind, body)
    return int(size.text_bytes / bytes_per_token) + size.fixed
