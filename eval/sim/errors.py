"""Errors rendered like vLLM: `{"error": {"message", "type", "param", "code"}}` with an integer code."""

from __future__ import annotations

import orjson

_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    501: "NotImplementedError",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "BadRequestError")

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.status}
        return orjson.dumps({"error": error})


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)
