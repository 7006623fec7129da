"""The text a routed request is judged by: the last user turn. Its own module, free of numpy and the
encoder, so the gateway imports it without loading the model stack (that happens at start-up, and
only when a routed alias uses a difficulty model)."""

from __future__ import annotations

from typing import Any


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # OpenAI content parts: keep text parts, ignore images/audio/files (the encoder reads text).
        parts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def request_text(messages: list[dict[str, Any]]) -> str:
    """The text the router embeds: the last user turn (system prompts and history are shared context,
    the last user turn is what this request asks). No user turn, or no text in it -> ""."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""
