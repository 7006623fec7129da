"""The request log: one JSON line per request on the `llmgw.requests` logger (stdout by default).

Off unless `LLMGW_REQUEST_LOG=true`. A line carries ids (request id, org, app, key id: never the
key), the endpoint, alias, answering pool, routing decision of routed aliases (difficulty, cascade,
start tier, escalations), status, tokens, latencies (TTFT, TPOT, end-to-end), cost and the SLO
verdict, and the guardrails that acted (category, action, where in the body; never the matched
text). Prompt and response text are added only with `LLMGW_REQUEST_LOG_TEXT=true`, and then only
after `gateway.observability.redact` has replaced e-mail addresses, phone and card numbers, API keys
and bearer tokens: nothing unredacted is ever handed to the logger.

Text capture costs a copy of each relayed chunk, so the relay keeps chunks only when text logging is
on (`Exchange.capture`); without it the log costs one dict and one `orjson.dumps` per request.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

from gateway.edge.exchange import Exchange
from gateway.observability.redact import redact
from gateway.sse import payloads

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

    def begin(self, req: Exchange, body: dict[str, Any]) -> None:
        req.notes = {"body": body} if self.text else {}
        if self.text:
            req.capture = []

    def write(self, req: Exchange, cost: float | None, slo: bool | None) -> None:
        tenant = req.tenant
        notes = req.notes or {}
        rec: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "request_id": req.rid.decode(),
            "org": tenant.org if tenant else None,
            "app": tenant.app if tenant else None,
            "key_id": tenant.key_id if tenant else None,
            "endpoint": req.endpoint.value,
            "alias": req.model,
            "pool": req.pool,
            "adapter": req.adapter,
            "stream": req.stream,
            "status": req.status,
            "input_tokens": req.usage_in,
            "output_tokens": req.usage_out,
            "ttft_ms": _ms(req.ttft),
            "tpot_ms": _ms(req.tpot),
            "e2e_ms": _ms(req.e2e),
            "cost_usd": cost,
            "slo": None if slo is None else ("met" if slo else "missed"),
            "cache": req.cache.decode() if req.cache is not None else None,
        }
        route = notes.get("route")
        if route is not None:
            rec["route"] = {**route, "tier": req.pool, "escalations": notes.get("escalations", 0)}
        guardrails = notes.get("guardrails")
        if guardrails:  # which guardrail acted, how, where (gateway/guardrails/): never what matched
            rec["guardrails"] = guardrails
        if self.text:
            body = notes.get("body")
            rec["prompt"] = redact(prompt_text(body)) if isinstance(body, dict) else None
            rec["response"] = redact(response_text(b"".join(req.capture or ())))
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
