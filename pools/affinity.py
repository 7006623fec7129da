"""The prefix-affinity key of a request: a hash of its leading prompt characters.

vLLM's prefix cache matches whole leading blocks, so requests that share a long system prompt (or
a conversation's history) share their first blocks. Hashing the first `prefix_chars` characters of
the rendered messages approximates "the leading prompt blocks" without a tokenizer on the hot path.
blake2b (not Python's salted `hash`) so every gateway replica maps a prefix to the same replicas.

A request naming its own cache key (`prompt_cache_key`: OpenAI's field, sent by Codex; the Messages
dialect derives one from a conversation's `cache_control` breakpoints) is placed by that key instead:
an agent's turns share their conversation's prefix, which the client knows better than the first
characters do (its system prompt is the same for every conversation).
"""

from __future__ import annotations

import hashlib
from typing import Any


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only the text ones shape the prefix
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prefix_text(body: dict[str, Any], limit: int) -> str:
    messages = body.get("messages")
    if isinstance(messages, list):
        parts: list[str] = []
        size = 0
        for m in messages:
            if not isinstance(m, dict):
                continue
            piece = f"\x1e{m.get('role')}\x1f" + _text(m.get("content"))
            parts.append(piece[: limit - size])
            size += len(parts[-1])
            if size >= limit:
                break
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt[:limit]
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0][:limit]
    return ""


CACHE_KEY_CHARS = 1024  # of a client's prompt_cache_key hashed (a longer one is no more specific)


def prefix_key(body: dict[str, Any], limit: int) -> int | None:
    named = body.get("prompt_cache_key")
    text = ("\x1dkey\x1f" + named[:CACHE_KEY_CHARS]) if isinstance(named, str) and named else None
    text = text or prefix_text(body, limit)
    if not text:
        return None
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")
