"""A scripted OpenAI-shaped server (stdlib, in a thread): the first path segment picks the canned answer,
so one server stands in for several pools: http://host:port/<script>/v1/chat/completions.

The drift tests use it for what a simulator does not do: answers whose logprobs drift by known amounts,
and answers that are not chat completions or carry no logprobs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def chat(tokens: list[tuple[str, float]]) -> dict[str, Any]:
    """A chat completion whose logprobs are `tokens`, each with one fixed alternative."""
    content = [
        {
            "token": t,
            "logprob": lp,
            "top_logprobs": [{"token": t, "logprob": lp}, {"token": "~", "logprob": -6.0}],
        }
        for t, lp in tokens
    ]
    return {"object": "chat.completion", "choices": [{"index": 0, "logprobs": {"content": content}}]}


SCRIPTS: dict[str, tuple[int, Any]] = {
    "ref": (200, chat([("a", -0.5), ("b", -0.25), ("c", -1.0)])),
    "drift": (200, chat([("a", -0.75), ("x", -0.5), ("c", -1.0)])),
    "text": (200, {"object": "text_completion", "choices": [{"text": "hi"}]}),
    "nolp": (200, {"object": "chat.completion", "choices": [{"message": {"content": "hi"}}]}),
    "html": (502, "<html>bad gateway</html>"),
    "list": (200, [1, 2, 3]),
}


@contextmanager
def scripted_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            status, body = SCRIPTS[self.path.split("/")[1]]
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - /metrics scrapes and health checks: nothing to say
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
