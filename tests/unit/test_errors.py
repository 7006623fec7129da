from __future__ import annotations

import orjson
import pytest

from gateway import errors as E


@pytest.mark.parametrize(
    ("cls", "status", "type_", "code", "retryable"),
    [
        (E.InvalidRequestError, 400, "invalid_request_error", None, False),
        (E.InvalidJSONError, 400, "invalid_request_error", "invalid_json", False),
        (E.AuthenticationError, 401, "authentication_error", "invalid_api_key", False),
        (E.PermissionDeniedError, 403, "permission_error", "permission_denied", False),
        (E.NotFoundError, 404, "invalid_request_error", "not_found", False),
        (E.ModelNotFoundError, 404, "invalid_request_error", "model_not_found", False),
        (E.RequestTooLargeError, 413, "invalid_request_error", "request_too_large", False),
        (E.UnprocessableEntityError, 422, "invalid_request_error", "unprocessable_entity", False),
        (E.RateLimitError, 429, "rate_limit_error", "rate_limit_exceeded", True),
        (E.InternalError, 500, "api_error", "internal_error", False),
        (E.UpstreamError, 502, "api_error", "upstream_error", True),
        (E.UpstreamUnavailableError, 503, "api_error", "upstream_unavailable", True),
        (E.UpstreamTimeoutError, 504, "api_error", "upstream_timeout", True),
    ],
)
def test_each_error_class_renders_the_openai_shape(
    cls: type[E.GatewayError], status: int, type_: str, code: str | None, retryable: bool
) -> None:
    err = cls("something happened", param="p")
    assert err.status == status
    assert orjson.loads(err.body()) == {
        "error": {"message": "something happened", "type": type_, "param": "p", "code": code}
    }
    headers = err.response_headers()
    assert ("retry-after" in headers) is retryable
    assert (headers.get("x-should-retry") == "false") is (not retryable)
