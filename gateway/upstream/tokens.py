"""Exact input token counts from the pool's own tokenizer, for the token-counting endpoints
(`/v1/messages/count_tokens`, `/v1/responses/input_tokens`).

Agents size their context with these counts: the budget's cheap estimate (an upper bound, 1.4-1.9x
the real count) makes them trim too early. vLLM serves `POST /tokenize` (the chat template applied,
tools included, as it counts a chat request's prompt); a hosted pool's replica answers the same
path through LiteLLM's counter (gateway.upstream.hosted). One call through the pool's picker like any
request (so it spends a replica lease, retries and the breaker like one), cached per prompt:
an agent counts the same growing conversation again and again. The hot path never calls this.

A pool that cannot count (an engine without `/tokenize`, a failure) gives None: the caller answers
with the calibrated estimate and says so (`x-llmgw-token-count: estimate`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import Any, Final

import orjson

from gateway.edge.exchange import Kind
from gateway.errors import GatewayError
from gateway.upstream.calls import CallSpec, PoolCalls
from gateway.upstream.pool_client import PoolClient

__all__ = ["TOKENIZE_PATH", "TokenCounter", "tokenize_request"]

TOKENIZE_PATH: Final = "/tokenize"
MAX_COUNT: Final = 1 << 26  # a count above this is not a count
log = logging.getLogger("llmgw.upstream")


def tokenize_request(model: str, chat: dict[str, Any]) -> dict[str, Any]:
    """vLLM's `/tokenize` body for a chat request's prompt: its messages, tools and template switches,
    rendered with the generation prompt as the chat endpoint renders them."""
    body: dict[str, Any] = {"model": model, "messages": chat["messages"], "add_generation_prompt": True}
    for key in ("tools", "chat_template_kwargs"):
        if chat.get(key):
            body[key] = chat[key]
    return body


class TokenCounter:
    """Counts with the pool's tokenizer; remembers the last `capacity` prompts' counts (per pool)."""

    def __init__(self, calls: PoolCalls, capacity: int = 4096) -> None:
        self._calls = calls
        self._capacity = capacity
        self._counts: OrderedDict[bytes, int] = OrderedDict()

    async def count(self, pool: PoolClient, chat: dict[str, Any], rid: str | None = None) -> int | None:
        cfg = pool.config
        payload = orjson.dumps(tokenize_request(cfg.model, chat))
        key = hashlib.blake2b(payload, digest_size=16, person=cfg.name.encode()[:16]).digest()
        known = self._counts.get(key)
        if known is not None:
            self._counts.move_to_end(key)
            return known
        headers = dict(pool.headers)
        if rid is not None:
            headers["x-request-id"] = rid
        try:
            data = await self._calls.unary(pool, CallSpec(Kind.CHAT, payload, headers, path=TOKENIZE_PATH))
            count = orjson.loads(data).get("count")
        except (GatewayError, orjson.JSONDecodeError, AttributeError) as exc:
            log.info("pool %r could not count tokens (request %s): %s", cfg.name, rid, exc)
            return None
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_COUNT:
            log.info("pool %r answered /tokenize without a count (request %s)", cfg.name, rid)
            return None
        self._counts[key] = count
        if len(self._counts) > self._capacity:
            self._counts.popitem(last=False)
        return count
