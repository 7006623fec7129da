"""The tracing hooks the hot path calls, and their no-op stand-in (no OpenTelemetry import here).

`gateway.observability.otel.Tracing` implements `TraceHooks` with the OpenTelemetry SDK; it is imported
only when `LLMGW_TRACING=true`, so a gateway without traces neither loads the SDK (~80 modules) nor pays for
it. With `NoTracing` every `with hooks.span(...)` site costs a method call returning one shared
`nullcontext`, and the per-attempt and per-request hooks are skipped behind `enabled`.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any, Protocol

from gateway.edge.exchange import Kind

# GenAI operation names (shared/reference: OpenTelemetry GenAI); a dialect's request is a chat.
OPERATION = {
    Kind.CHAT: "chat",
    Kind.COMPLETIONS: "text_completion",
    Kind.EMBEDDINGS: "embeddings",
    Kind.RESPONSES: "chat",
    Kind.MESSAGES: "chat",
    Kind.COUNT_TOKENS: "count_tokens",
    Kind.INPUT_TOKENS: "count_tokens",
}
_NULL: AbstractContextManager[None] = contextlib.nullcontext()


class TraceHooks(Protocol):
    @property
    def enabled(self) -> bool: ...

    def span(self, name: str) -> AbstractContextManager[Any]:
        """A child span of the current one (auth, rate_limit, routing, cascade.judge)."""

    def attempt(
        self, kind: Kind, engine: str, model: str, pool: str, url: str, headers: dict[str, str]
    ) -> AbstractContextManager[Any]:
        """One upstream attempt's CLIENT span; puts its `traceparent` into `headers`."""

    def start_request(self, kind: Kind, headers: list[tuple[bytes, bytes]]) -> Any:
        """A request's root span, made current; the handle goes back to `end_request`."""

    def request_body(self, root: Any, kind: Kind, body: dict[str, Any]) -> None:
        """The parsed body's `gen_ai.request.*` attributes on the root span."""

    def end_request(self, root: Any, attributes: dict[str, Any], status: int) -> None:
        """Close the root span (and restore the context it replaced)."""

    def event(self, root: Any, name: str, attributes: dict[str, Any]) -> None:
        """An event on the root span (a guardrail acted)."""


class NoTracing:
    enabled = False

    def span(self, name: str) -> AbstractContextManager[Any]:
        return _NULL

    def attempt(
        self, kind: Kind, engine: str, model: str, pool: str, url: str, headers: dict[str, str]
    ) -> AbstractContextManager[Any]:
        return _NULL

    def start_request(self, kind: Kind, headers: list[tuple[bytes, bytes]]) -> Any:
        return None

    def request_body(self, root: Any, kind: Kind, body: dict[str, Any]) -> None:
        return None

    def end_request(self, root: Any, attributes: dict[str, Any], status: int) -> None:
        return None

    def event(self, root: Any, name: str, attributes: dict[str, Any]) -> None:
        return None
