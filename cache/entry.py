"""The cached answer and its two wire forms.

An entry is the answer as a non-streamed client would receive it: the completion JSON bytes. A
non-streamed miss stores the pool's bytes as they are, so the next identical request gets a
byte-identical body. A streamed miss stores the answer assembled from its events' data, which the
gateway hands over already split (its one SSE reader is gateway.sse; `cache/` never imports the
gateway, so it is given payloads, never SSE bytes). A streamed hit is replayed from the entry as
SSE: per choice a chunk with the whole content (and tool calls and log-probs), a chunk with the
finish reason, the usage chunk when the client asked for it, `[DONE]`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
_META = ("id", "created", "model", "system_fingerprint")


def _merge_tool_calls(into: list[dict[str, Any]], deltas: list[Any]) -> None:
    for d in deltas:
        if not isinstance(d, dict):
            continue
        idx = d.get("index", 0)
        while len(into) <= idx:
            into.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call = into[idx]
        if d.get("id"):
            call["id"] = d["id"]
        if d.get("type"):
            call["type"] = d["type"]
        fn = d.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str):
                call["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] += fn["arguments"]


def assemble(chat: bool, payloads: Iterable[bytes], usage: Mapping[str, int]) -> bytes | None:
    """The completion JSON of a finished stream from the data of its events in order (`[DONE]`
    left out), or None when the stream carried an error event or is not what we can faithfully
    store."""
    meta: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    try:
        for payload in payloads:
            if not payload.strip():
                continue  # an event without data (a keep-alive written as `data:`)
            ev = orjson.loads(payload)
            if not isinstance(ev, dict) or "error" in ev:
                return None
            if not meta:
                meta = {k: ev[k] for k in _META if k in ev}
            for c in ev.get("choices") or ():
                idx = c.get("index", 0)
                acc = choices.setdefault(
                    idx, {"content": [], "role": "assistant", "tools": [], "lp": None, "finish": None}
                )
                if chat:
                    delta = c.get("delta") or {}
                    if isinstance(delta.get("role"), str):
                        acc["role"] = delta["role"]
                    if isinstance(delta.get("content"), str):
                        acc["content"].append(delta["content"])
                    if isinstance(delta.get("tool_calls"), list):
                        _merge_tool_calls(acc["tools"], delta["tool_calls"])
                    lp = c.get("logprobs")
                    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                        acc["lp"] = (acc["lp"] or []) + lp["content"]
                else:
                    if isinstance(c.get("text"), str):
                        acc["content"].append(c["text"])
                    if c.get("logprobs") is not None:
                        return None  # completions log-probs come as parallel arrays: not worth merging
                if c.get("finish_reason") is not None:
                    acc["finish"] = c["finish_reason"]
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        return None
    if not choices or any(acc["finish"] is None for acc in choices.values()):
        return None  # an unfinished choice: the stream was cut, nothing to cache
    out_choices = []
    for idx in sorted(choices):
        acc = choices[idx]
        text = "".join(acc["content"])
        if chat:
            message: dict[str, Any] = {
                "role": acc["role"],
                "content": text if text or not acc["tools"] else None,
            }
            if acc["tools"]:
                message["tool_calls"] = acc["tools"]
            lp = {"content": acc["lp"]} if acc["lp"] is not None else None
            out_choices.append(
                {"index": idx, "message": message, "logprobs": lp, "finish_reason": acc["finish"]}
            )
        else:
            out_choices.append({"index": idx, "text": text, "logprobs": None, "finish_reason": acc["finish"]})
    body = {
        "id": meta.get("id"),
        "object": "chat.completion" if chat else "text_completion",
        "created": meta.get("created"),
        "model": meta.get("model"),
        **({"system_fingerprint": meta["system_fingerprint"]} if "system_fingerprint" in meta else {}),
        "choices": out_choices,
        "usage": dict(usage),
    }
    return orjson.dumps(body)


def replay(chat: bool, entry: bytes, include_usage: bool) -> bytes | None:
    """The entry as one SSE byte string (sent in one piece: it is all in hand). None if the entry is
    not a completion we understand (then the caller treats the lookup as a miss)."""
    try:
        body = orjson.loads(entry)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        return None
    head: dict[str, Any] = {k: body[k] for k in _META if k in body}
    head["object"] = "chat.completion.chunk" if chat else "text_completion"
    out: list[bytes] = []

    def chunk(choice: dict[str, Any]) -> None:
        out.append(b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n")

    for c in body["choices"]:
        if not isinstance(c, dict):
            return None
        idx = c.get("index", 0)
        if chat:
            msg = c.get("message")
            if not isinstance(msg, dict):
                return None
            delta: dict[str, Any] = {
                "role": msg.get("role", "assistant"),
                "content": msg.get("content") or "",
            }
            if msg.get("tool_calls"):
                delta["tool_calls"] = [
                    {"index": i, **call} for i, call in enumerate(msg["tool_calls"]) if isinstance(call, dict)
                ]
            chunk({"index": idx, "delta": delta, "logprobs": c.get("logprobs"), "finish_reason": None})
            chunk({"index": idx, "delta": {}, "logprobs": None, "finish_reason": c.get("finish_reason")})
        else:
            text = c.get("text")
            if not isinstance(text, str):
                return None
            chunk({"index": idx, "text": text, "logprobs": c.get("logprobs"), "finish_reason": None})
            chunk({"index": idx, "text": "", "logprobs": None, "finish_reason": c.get("finish_reason")})
    if include_usage and isinstance(body.get("usage"), dict):
        out.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": body["usage"]}) + b"\n\n")
    out.append(DONE)
    return b"".join(out)


def usage_of(entry: bytes) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) recorded in an entry, for the saved-tokens metric."""
    try:
        usage = orjson.loads(entry).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(usage, dict):
        return None
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (pt if isinstance(pt, int) else 0, ct if isinstance(ct, int) else 0)


_QUESTION_TAG = b"Q1"


def with_question(question: str, entry: bytes) -> bytes:
    """A semantic entry: the question it answered (to verify a vector hit against), then the entry."""
    q = question.encode("utf-8", "surrogatepass")
    return _QUESTION_TAG + len(q).to_bytes(4, "big") + q + entry


def split_question(value: bytes) -> tuple[str, bytes] | None:
    """(question, entry) of a semantic entry; None when it is not one (another version's format)."""
    if not value.startswith(_QUESTION_TAG) or len(value) < 6:
        return None
    n = int.from_bytes(value[2:6], "big")
    if len(value) < 6 + n:
        return None
    return value[6 : 6 + n].decode("utf-8", "surrogatepass"), value[6 + n :]
