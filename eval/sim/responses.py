"""Render a `Job` as vLLM/OpenAI response bodies and SSE chunks (compact JSON via orjson).

Streaming follows vLLM: chat streams start with one `delta: {"role": "assistant", "content": ""}` chunk
per choice, then one chunk per token; the chunk of a choice's last token carries its `finish_reason`;
with `include_usage` a final `"choices": []` chunk carries the usage, then `data: [DONE]`. Like vLLM
(which serializes with `exclude_unset`), ordinary chunks have no `usage` key unless
`continuous_usage_stats` asks for cumulative usage on every chunk.

With a reasoning parser (vLLM's `--reasoning-parser`) the reasoning tokens stream first as
`delta: {"reasoning": ...}`, the unary message carries `reasoning` (null without any), and every usage
has `completion_tokens_details: {"reasoning_tokens": N}`. An auto tool call streams like vLLM's tool
parsers: a first delta with the call's id, type and name, then one per arguments token.
"""

from __future__ import annotations

from typing import Any

import orjson

from eval.sim.requests import Job
from eval.sim.textgen import ToolCall

DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _counts(job: Job, completion_tokens: int) -> dict[str, Any]:
    prompt_tokens = sum(p.pieces_len for p in job.prompts)
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def _reasoning_tokens(job: Job) -> int:
    return sum(g.reasoning_len for g in job.choices)


def usage(job: Job, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """A unary body's usage: vLLM 0.32 sends both details keys, null unless --enable-prompt-tokens-details
    (prompt) and --reasoning-parser (completion)."""
    out = _counts(job, completion_tokens)
    out["prompt_tokens_details"] = {"cached_tokens": cached_tokens} if job.prompt_tokens_details else None
    out["completion_tokens_details"] = (
        {"reasoning_tokens": _reasoning_tokens(job)} if job.reasoning_details else None
    )
    return out


def stream_usage(
    job: Job, completion_tokens: int, cached_tokens: int | None, reasoning_tokens: int = 0
) -> dict[str, Any]:
    """A stream's usage: only the three counts; the final chunk (`cached_tokens` given) adds
    `prompt_tokens_details` when the flag is on, and the key is absent otherwise (exclude_unset);
    with a reasoning parser every usage has `completion_tokens_details`."""
    out = _counts(job, completion_tokens)
    if cached_tokens is not None and job.prompt_tokens_details:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if job.reasoning_details:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out


def _chat_logprob(token: str, lp: float, alts: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": lp,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in alts],
    }


def _chat_logprobs(job: Job, i: int, start: int, end: int) -> dict[str, Any] | None:
    if job.top_logprobs is None:
        return None
    pieces, lps = job.choices[i].pieces, job.logprobs[i]
    return {"content": [_chat_logprob(pieces[k], *lps[k]) for k in range(start, end)]}


def _completion_logprobs(job: Job, i: int, start: int, end: int, offset: int) -> dict[str, Any] | None:
    if job.top_logprobs is None:
        return None
    pieces, lps = job.choices[i].pieces, job.logprobs[i]
    tokens = pieces[start:end]
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t)
    return {
        "text_offset": offsets,
        "token_logprobs": [lps[k][0] for k in range(start, end)],
        "tokens": tokens,
        "top_logprobs": [dict(lps[k][1]) or {pieces[k]: lps[k][0]} for k in range(start, end)],
    }


def full_response(job: Job, cached_tokens: int) -> bytes:
    choices: list[dict[str, Any]] = []
    completion_tokens = 0
    for i, gen in enumerate(job.choices):
        completion_tokens += len(gen.pieces)
        if job.kind == "chat":
            message: dict[str, Any] = {
                "role": "assistant",
                "content": gen.text,
                "refusal": None,
                "tool_calls": [],
            }
            if job.reasoning_details:
                message["reasoning"] = gen.reasoning
            if gen.tool_call is not None:
                call = gen.tool_call
                # vLLM answers a forced tool call with empty content, an auto one (tool parser) with null
                message["content"] = None if call.auto else ""
                message["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ]
            choices.append(
                {
                    "index": i,
                    "message": message,
                    "logprobs": _chat_logprobs(job, i, 0, len(gen.pieces)),
                    "finish_reason": gen.finish_reason,
                    "stop_reason": None,
                }
            )
        else:
            choices.append(
                {
                    "index": i,
                    "text": gen.text,
                    "logprobs": _completion_logprobs(job, i, 0, len(gen.pieces), 0),
                    "finish_reason": gen.finish_reason,
                    "stop_reason": None,
                    "prompt_logprobs": job.prompts[i // job.n].logprobs,
                }
            )
    body: dict[str, Any] = {
        "id": job.request_id,
        "object": "chat.completion" if job.kind == "chat" else "text_completion",
        "created": job.created,
        "model": job.model,
        "choices": choices,
        "usage": usage(job, completion_tokens, cached_tokens),
    }
    if job.kind == "chat":  # vLLM puts a chat's prompt_logprobs at the top level, a completion's per choice
        body["prompt_logprobs"] = job.prompts[0].logprobs
    return orjson.dumps(body)


class StreamRenderer:
    """Chunks for one streamed job; tracks tokens sent per choice for cumulative usage."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.object = "chat.completion.chunk" if job.kind == "chat" else "text_completion"
        self.sent = [0] * len(job.choices)
        self._offsets = [0] * len(job.choices)
        self._total_sent = 0
        self._reasoning_sent = 0

    def _chunk(self, choice: dict[str, Any], cached_tokens: int) -> bytes:
        job = self.job
        obj: dict[str, Any] = {
            "id": job.request_id,
            "object": self.object,
            "created": job.created,
            "model": job.model,
            "choices": [choice],
        }
        if job.continuous_usage:
            obj["usage"] = stream_usage(job, self._total_sent, None, self._reasoning_sent)
        return sse(obj)

    def head(self) -> list[bytes]:
        if self.job.kind != "chat":
            return []
        return [
            self._chunk(
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                },
                0,
            )
            for i in range(len(self.job.choices))
        ]

    def tokens(self, i: int, upto: int, cached_tokens: int) -> list[bytes]:
        """Chunks for choice `i`'s tokens not yet sent, up to `upto` emitted tokens."""
        job, gen = self.job, self.job.choices[i]
        out: list[bytes] = []
        last = len(gen.pieces)
        for k in range(self.sent[i], min(upto, last)):
            piece = gen.pieces[k]
            self._total_sent += 1
            finish = gen.finish_reason if k == last - 1 else None
            choice: dict[str, Any]
            if job.kind == "chat":
                delta: dict[str, Any]
                if k < gen.reasoning_len:
                    self._reasoning_sent += 1
                    delta = {"reasoning": piece}
                elif gen.tool_call is not None:
                    delta = {"tool_calls": [_call_delta(gen.tool_call, piece, k == gen.reasoning_len)]}
                else:
                    delta = {"content": piece}
                choice = {
                    "index": i,
                    "delta": delta,
                    "logprobs": _chat_logprobs(job, i, k, k + 1),
                    "finish_reason": finish,
                }
            else:
                lp = _completion_logprobs(job, i, k, k + 1, self._offsets[i])
                choice = {"index": i, "text": piece, "logprobs": lp, "finish_reason": finish}
                self._offsets[i] += len(piece)
            if finish is not None:
                choice["stop_reason"] = None
            out.append(self._chunk(choice, cached_tokens))
        self.sent[i] = max(self.sent[i], min(upto, last))
        return out

    def tail(self, cached_tokens: int) -> list[bytes]:
        job = self.job
        out: list[bytes] = []
        if job.include_usage:
            completion_tokens = sum(len(g.pieces) for g in job.choices)
            out.append(
                sse(
                    {
                        "id": job.request_id,
                        "object": self.object,
                        "created": job.created,
                        "model": job.model,
                        "choices": [],
                        "usage": stream_usage(job, completion_tokens, cached_tokens, _reasoning_tokens(job)),
                    }
                )
            )
        out.append(DONE)
        return out


def _call_delta(call: ToolCall, piece: str, first: bool) -> dict[str, Any]:
    """One token of a tool call as a `delta.tool_calls` entry: the first names the call (an auto call's
    first token is its name alone), the others append to its arguments."""
    if not first:
        return {"index": 0, "function": {"arguments": piece}}
    function = {"name": call.name} if call.auto else {"name": call.name, "arguments": piece}
    return {"index": 0, "id": call.id, "type": "function", "function": function}
