"""The request log: one JSON line per request on the `llmgw.requests` logger (stdout by default).

Off unless `LLMGW_REQUEST_LOG=true`. A line carries ids (request id, org, app, key id: never the
key), the endpoint, alias, answering pool, routing decision of routed aliases (difficulty, cascade,
start tier, escalations; with a `success` policy also the per-tier predicted success, the tiers' pools
and the tolerance used), status, tokens, latencies (TTFT, TPOT, end-to-end), cost and the SLO
verdict, and the guardrails that acted (category, action, where in the body; never the matched
text). Prompt and response text are added only with `LLMGW_REQUEST_LOG_TEXT=true`, and then only
after `gateway.observability.redact` has replaced e-mail addresses, phone and card numbers, API keys
and bearer tokens: nothing unredacted is ever handed to the logger.

Text capture costs a copy of each relayed chunk, so the relay keeps chunks only when text logging is
on (`gateway.record.Answer.capture`); without it the log costs one dict and one `orjson.dumps` per
request.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson

from gateway.observability.redact import redact
from gateway.sse import payloads

if TYPE_CHECKING:
    from gateway.record import RequestRecord

LOGGER = "llmgw.requests"


def request_logger() -> logging.Logger:
    """The request log's logger: plain lines on stdout unless the operator configured handlers."""
    log = logging.getLogger(LOGGER)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False  # one line, not one per handler up the tree
    log.setLevel(logging.INFO)
    return log


class RequestLog:
    def __init__(self, logger: logging.Logger, text: bool) -> None:
        self._log = logger
        self.text = text

    def begin(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request's notes (the stages add its routing decision and guardrails): the body with text
        on. (The relay then keeps the answer's bytes: `gateway.record.Answer.capture`.)"""
        return {"body": body} if self.text else {}

    def write(
        self,
        req: RequestRecord,
        model: str,
        pool: str,
        adapter: str | None,
        cost: float | None,
        slo: bool | None,
    ) -> None:
        """One line for a request that ended, served by `model` on `pool` (and `adapter`)."""
        x, who, answer, obs, cache = req.http, req.who, req.answer, req.obs, req.cache
        tenant = who.tenant if who is not None else None
        notes = (obs.notes if obs is not None else None) or {}
        rec: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "request_id": x.rid.decode(),
            "org": tenant.org if tenant else None,
            "app": tenant.app if tenant else None,
            "key_id": tenant.key_id if tenant else None,
            "endpoint": x.endpoint.value,
            "alias": model,
            "pool": pool,
            "adapter": adapter,
            "stream": x.stream,
            "status": x.status,
            "input_tokens": answer.usage_in if answer is not None else 0,
            "output_tokens": answer.usage_out if answer is not None else 0,
            "ttft_ms": _ms(answer.ttft) if answer is not None else None,
            "tpot_ms": _ms(answer.tpot) if answer is not None else None,
            "e2e_ms": _ms(x.e2e),
            "cost_usd": cost,
            "slo": None if slo is None else ("met" if slo else "missed"),
            "cache": cache.status.decode() if cache is not None else None,
        }
        route = notes.get("route")
        if route is not None:
            rec["route"] = {**route, "tier": pool, "escalations": notes.get("escalations", 0)}
        guardrails = notes.get("guardrails")
        if guardrails:  # which guardrail acted, how, where (gateway/guardrails/): never what matched
            rec["guardrails"] = guardrails
        if self.text:
            body = notes.get("body")
            rec["prompt"] = redact(prompt_text(body)) if isinstance(body, dict) else None
            captured = answer.capture if answer is not None else None
            rec["response"] = redact(response_text(b"".join(captured or ())))
        self._log.info(orjson.dumps(rec).decode())


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000.0, 3) if seconds is not None else None


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # content parts: keep the text ones
        return "\n".join(p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prompt_text(body: dict[str, Any]) -> str:
    """The text a client sent: chat messages (role: content), a completion prompt, embedding input."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return "\n".join(
            f"{m.get('role', '')}: {_content(m.get('content'))}" for m in messages if isinstance(m, dict)
        )
    for key in ("prompt", "input"):
        v = body.get(key)
        if isinstance(v, str):
            return v
        if isinstance(v, list):
            return "\n".join(x for x in v if isinstance(x, str))
    return ""


def response_text(raw: bytes) -> str:
    """The answer's text from a relayed JSON body or SSE stream (message content / deltas / text);
    a stream's events are read by gateway.sse."""
    if not raw:
        return ""
    if not raw.lstrip().startswith(b"{"):  # not a JSON object: a stream (which may open with a comment)
        parts: list[str] = []
        for payload in payloads(raw):
            try:
                event = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue
            for ch in event.get("choices") or () if isinstance(event, dict) else ():
                if isinstance(ch, dict):
                    delta = ch.get("delta")
                    parts.append(_content(delta.get("content")) if isinstance(delta, dict) else "")
                    parts.append(ch.get("text") or "")
        return "".join(parts)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    out: list[str] = []
    for ch in body.get("choices") or () if isinstance(body, dict) else ():
        if isinstance(ch, dict):
            msg = ch.get("message")
            out.append(_content(msg.get("content")) if isinstance(msg, dict) else ch.get("text") or "")
    return "\n".join(out)
