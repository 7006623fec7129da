"""The APIs a client may speak besides Chat Completions, each translated to and from it.

A dialect is pure data in, data out (table-tested, no I/O): the client's request becomes a Chat
Completions body, which then goes through every stage a chat request goes through (authentication,
budgets, routing, cache, pool picking, metering, observability); the pool's chat answer (or its
chat.completion.chunk stream, or the gateway's OpenAI-shaped error) becomes the dialect's answer on
the way out (gateway.dialects.exchange wraps the ASGI `send` to do that). One translation per API:

- `responses`: OpenAI Responses (`POST /v1/responses`);
- `messages`: Anthropic Messages (`POST /v1/messages`, `POST /v1/messages/count_tokens`).

Why translate rather than relay the engine's own endpoint: one metering path (the chat stream's
usage, topped up and cut by the budget exactly like chat), one cache, one cascade, and every engine
(the simulator, hosted APIs through litellm) serves them. docs/design/022-dialects.md.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ENGINE_EXTRAS", "Dialect", "StreamTranslator", "engine_extras"]

# vLLM's sampling extras (not in either API, sent by clients through `extra_body`): passed to the pool
# untouched, as chat passes every unknown field; the pool validates them.
ENGINE_EXTRAS = (
    "ignore_eos", "min_tokens", "min_p", "top_k", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "stop", "stop_token_ids", "logit_bias", "seed",
)  # fmt: skip


def engine_extras(body: dict[str, Any], chat: dict[str, Any], own: frozenset[str] = frozenset()) -> None:
    """Copy into `chat` the engine extras `body` has, except those the translation set and the API's
    `own` fields of the same name (translated by the dialect's own rules)."""
    for key in ENGINE_EXTRAS:
        if key in body and key not in chat and key not in own:
            chat[key] = body[key]


class StreamTranslator(Protocol):
    """One streamed answer: chat.completion.chunk objects in, the dialect's SSE events out (bytes,
    each event framed `event: <type>\\ndata: <json>\\n\\n`). Stateful, one per request."""

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """One chat.completion.chunk (choice 0 only; a usage-only chunk has `choices: []`): the
        events it makes (possibly none). The first call emits the dialect's opening events."""
        ...

    def close(self) -> bytes:
        """The pool's `[DONE]`: the closing events (with the usage seen, and the stop reason of the
        last finish_reason: `length` is the dialect's max-tokens ending)."""
        ...

    def fail(self, error: dict[str, Any]) -> bytes:
        """The stream broke after it started; `error` is the gateway's OpenAI error object
        (`{"message", "type", "param", "code"}`): the dialect's error event(s), its last."""
        ...


class Dialect(Protocol):
    name: str  # the endpoint label of metrics and logs: "responses" | "messages"
    # The API requires max tokens, so clients send a generous ceiling rather than a size they need:
    # a stream is then metered as it runs (like one without max tokens), not reserved whole.
    max_tokens_is_ceiling: bool

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """The client's request as a Chat Completions request body. Validates what it translates:
        raises gateway.errors.InvalidRequestError (param named in the dialect's own terms) for
        missing fields, wrong types and unknown item/block types. A stream asks for usage on every
        chunk (`stream_options: {include_usage, continuous_usage_stats}`)."""
        ...

    def from_chat(self, chat: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """A chat.completion object as the dialect's response object; `request` is the client's
        original body (echoed fields: model, instructions, tools, ...)."""
        ...

    def stream(self, request: dict[str, Any]) -> StreamTranslator:
        """A translator for one streamed answer to `request` (the client's original body)."""
        ...

    def error(self, status: int, error: dict[str, Any]) -> dict[str, Any]:
        """The gateway's OpenAI error object (`{"message", "type", "param", "code"}`) answered with
        HTTP `status`, as the dialect's error body."""
        ...
