"""The gateway's one error hierarchy.

Every failure a caller can see is a `GatewayError` subclass that knows its HTTP status, its OpenAI
`type` and `code`, and whether a retry may help. One renderer turns it into the OpenAI error body
`{"error": {"message", "type", "param", "code"}}` (all four keys always present), which the official
SDKs unwrap into their exception classes. Upstream failures are normalized here too: vLLM puts an
integer `code` and a class name in `type`, and its 401 body is not OpenAI-shaped at all.
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


class UpstreamUnavailableError(GatewayError):
    """No replica could be reached (connection refused, pool empty, overloaded)."""

    status = 503
    type = "api_error"
    default_code = "upstream_unavailable"
    retryable = True


class UpstreamTimeoutError(GatewayError):
    status = 504
    type = "api_error"
    default_code = "upstream_timeout"
    retryable = True


# -- upstream normalization -----------------------------------------------------------------------

_PASS_THROUGH_4XX: dict[int, type[GatewayError]] = {
    400: InvalidRequestError,
    413: RequestTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def _upstream_message(body: bytes) -> tuple[str | None, str | None, str | None]:
    """(message, param, code) from an upstream body in any of the shapes pools use."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    err = data.get("error", data)
    if isinstance(err, str):  # vLLM's 401: {"error": "Unauthorized"}
        return err, None, None
    if not isinstance(err, dict):
        return None, None, None
    message = err.get("message")
    if not isinstance(message, str):
        message = data.get("detail") if isinstance(data.get("detail"), str) else None
    param = err.get("param") if isinstance(err.get("param"), str) else None
    code = err.get("code")
    # vLLM sends the HTTP status as an integer code; OpenAI clients expect a string or null.
    code_str = code if isinstance(code, str) else None
    return message, param, code_str


def from_upstream(status: int, body: bytes, pool: str, retry_after: str | None = None) -> GatewayError:
    """Map a non-2xx pool response to the error the caller should see."""
    message, param, code = _upstream_message(body)
    cls = _PASS_THROUGH_4XX.get(status)
    if cls is not None:
        # The caller's request was at fault (context too long, bad parameter): say so in their terms.
        err = cls(message or f"pool '{pool}' rejected the request (HTTP {status})", param=param, code=code)
        if status == 429 and retry_after:
            err.headers["retry-after"] = retry_after
        return err
    if status in (401, 403):
        # Our credentials for the pool are wrong: an operator problem, never the caller's key.
        return UpstreamError(f"pool '{pool}' rejected the gateway's credentials (HTTP {status})")
    if status == 404:
        return UpstreamError(f"pool '{pool}' does not serve the configured model (HTTP 404)")
    if status == 503:
        return UpstreamUnavailableError(f"pool '{pool}' is unavailable: {message or 'HTTP 503'}")
    if status == 504:
        return UpstreamTimeoutError(f"pool '{pool}' timed out: {message or 'HTTP 504'}")
    if 400 <= status < 500:
        return InvalidRequestError(message or f"pool '{pool}' rejected the request (HTTP {status})")
    detail = f": {message}" if message else ""
    return UpstreamError(f"pool '{pool}' failed with HTTP {status}{detail}")
