"""The gateway's one error hierarchy.

Every failure a caller can see is a `GatewayError` subclass that knows its HTTP status, its OpenAI
`type` and `code`, and whether a retry may help. One renderer turns it into the OpenAI error body
`{"error": {"message", "type", "param", "code"}}` (all four keys always present), which the official
SDKs unwrap into their exception classes. Which of these a pool's answer becomes (and what of its
text a client may see: none) is gateway.upstream.failures.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson


class GatewayError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "api_error"
    default_code: ClassVar[str | None] = None
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def body(self) -> bytes:
        return orjson.dumps(self.payload())

    def response_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.retryable and "retry-after" not in headers:
            headers["retry-after"] = "1"
        if not self.retryable:
            # The OpenAI SDK retries 409/429/5xx on its own; tell it when a retry cannot help.
            headers.setdefault("x-should-retry", "false")
        return headers


# -- the caller's mistakes (4xx) ------------------------------------------------------------------


class InvalidRequestError(GatewayError):
    status = 400
    type = "invalid_request_error"


class InvalidJSONError(InvalidRequestError):
    default_code = "invalid_json"


class ContentPolicyError(InvalidRequestError):
    """An input guardrail in `block` mode refused the request (gateway/guardrails/). The message names
    the category and where it was found, never what matched: echoing a secret back defeats the rule."""

    default_code = "content_policy_violation"


class AuthenticationError(GatewayError):
    status = 401
    type = "authentication_error"
    default_code = "invalid_api_key"


class PermissionDeniedError(GatewayError):
    status = 403
    type = "permission_error"
    default_code = "permission_denied"


class NotFoundError(GatewayError):
    status = 404
    type = "invalid_request_error"
    default_code = "not_found"


class ModelNotFoundError(NotFoundError):
    default_code = "model_not_found"

    @classmethod
    def of(cls, alias: str) -> ModelNotFoundError:
        """The 404 for a model name the caller may not use, whether or not it exists."""
        return cls(f"The model '{alias}' does not exist or you do not have access to it.", param="model")


class MethodNotAllowedError(GatewayError):
    status = 405
    type = "invalid_request_error"
    default_code = "method_not_allowed"


class RequestTooLargeError(GatewayError):
    status = 413
    type = "invalid_request_error"
    default_code = "request_too_large"


class RequestTimeoutError(GatewayError):
    """The client did not send its request (headers, or body at a minimum rate) in time."""

    status = 408
    type = "invalid_request_error"
    default_code = "request_timeout"


class HeadersTooLargeError(GatewayError):
    status = 431
    type = "invalid_request_error"
    default_code = "request_headers_too_large"


class ConflictError(GatewayError):
    """The request conflicts with existing state (a key id already taken, a config key revoked)."""

    status = 409
    type = "invalid_request_error"
    default_code = "conflict"


class UnprocessableEntityError(GatewayError):
    status = 422
    type = "invalid_request_error"
    default_code = "unprocessable_entity"


class RateLimitError(GatewayError):
    status = 429
    type = "rate_limit_error"
    default_code = "rate_limit_exceeded"
    retryable = True


class RequestOverLimitError(RateLimitError):
    """A request larger than a limit can ever admit, or than a day / month quota has left: a retry
    cannot help, so no Retry-After and `x-should-retry: false` (the OpenAI SDKs raise at once)."""

    default_code = "request_too_large"
    retryable = False


# -- ours and the pools' (5xx) --------------------------------------------------------------------


class InternalError(GatewayError):
    status = 500
    type = "api_error"
    default_code = "internal_error"


class UpstreamError(GatewayError):
    """The pool answered, but not usefully (5xx, malformed body, dropped stream)."""

    status = 502
    type = "api_error"
    default_code = "upstream_error"
    retryable = True


class OutputSchemaError(GatewayError):
    """The pool's answer does not conform to the request's `response_format` JSON schema (after the
    retry its policy allows). Not retryable by the client's SDK: the gateway already retried if asked."""

    status = 502
    type = "api_error"
    default_code = "output_schema_violation"


class UpstreamUnavailableError(GatewayError):
    """No replica could be reached (connection refused, pool empty, overloaded)."""

    status = 503
    type = "api_error"
    default_code = "upstream_unavailable"
    retryable = True


class SloUnattainableError(UpstreamUnavailableError):
    """A saturated pool would hold the request past its SLO's TTFT (`on_unattainable: shed`)."""

    default_code = "slo_unattainable"


class UpstreamTimeoutError(GatewayError):
    status = 504
    type = "api_error"
    default_code = "upstream_timeout"
    retryable = True


# -- a failed exchange with a pool (raised by the transports) -------------------------------------


class TransportError(UpstreamError):
    """The exchange with a pool failed: no usable HTTP answer (a refusal with a status is an answer,
    not this). Every transport (gateway.upstream.transport) raises these in place of its client's own
    exceptions (aiohttp's, OSError, timeouts), so nothing above the transport knows which client ran.

    `kind` is the failure's metric label and what the retry rule reads. `detail` (also `str(exc)`)
    is for the log and may name hosts and ports; `message`, what a client would see, never does.
    gateway.upstream.failures.classify turns it into the caller's error, naming the pool."""

    kind: ClassVar[str] = "client_error"

    def __init__(self, detail: str, reason: str = "no usable answer") -> None:
        super().__init__("the upstream request failed")
        self.detail = detail
        self.reason = reason  # what a client may be told of it, after "pool 'x' sent"

    def __str__(self) -> str:
        return self.detail


class ConnectFailed(TransportError):
    """No connection to the replica (refused, unreachable, or not within the connect timeout)."""

    status = 503
    default_code = "upstream_unavailable"
    kind = "connect"


class Disconnected(TransportError):
    """The connection ended before the response was complete."""

    kind = "disconnect"


class BadResponse(TransportError):
    """The replica's bytes are not an answer the gateway accepts: not HTTP/1.1, a content-encoding it
    did not ask for, a header block or an SSE event over its bound."""

    def __init__(self, detail: str, reason: str = "a malformed HTTP response") -> None:
        super().__init__(detail, reason)


class TransportTimeout(TransportError):
    """The exchange outlasted its total timeout (the connection is dropped)."""

    status = 504
    default_code = "upstream_timeout"
    kind = "timeout"
