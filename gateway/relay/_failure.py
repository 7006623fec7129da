"""A bug's answer: an exception outside the error hierarchy (gateway.errors) still reaches the client in
the shape of the API it called, never as uvicorn's plain-text 500."""

from __future__ import annotations

import contextlib

from gateway.edge.exchange import Exchange, Send, send_error
from gateway.errors import InternalError
from gateway.sse import error_event

__all__ = ["answer_bug"]


async def answer_bug(send: Send, x: Exchange) -> None:
    """A JSON 500 (a dialect's `send` translates it); a stream that already started ends with it as an
    error event instead; a response already complete gets nothing more."""
    err = InternalError("the gateway failed to serve this request")
    try:
        await send_error(send, err, x.rid)
    except RuntimeError:  # the response head was already sent (uvicorn, or a dialect's stream)
        if x.stream:
            tail = error_event(err.body())
            with contextlib.suppress(RuntimeError):  # the stream had already ended
                await send({"type": "http.response.body", "body": tail, "more_body": False})
