"""Redaction of a seeded PII/secrets corpus, and the request log's line (in-process)."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from gateway.edge.exchange import Exchange, Kind, RequestHeaders
from gateway.observability.redact import redact
from gateway.observability.request_log import RequestLog, prompt_text, response_text
from gateway.record import Answer, Observed, RequestRecord
from gateway.tenancy.auth import Principal
from ratelimit.model import Tenant
from tests.support.pii import corpus, leaked


def test_no_seeded_secret_survives_redaction() -> None:
    prompts, secrets = corpus()
    assert len(secrets) > 80
    out = "\n".join(redact(p) for p in prompts)
    assert leaked(out, secrets) == []
    # The check itself finds what is there (or it would prove nothing).
    assert set(leaked("\n".join(prompts), secrets)) == set(secrets)


def test_ordinary_text_is_kept() -> None:
    text = "Python 3.11.7 was released on 2023-12-04; it costs 12.50 USD and has 4096 tokens."
    assert redact(text) == text
    assert redact("order 12345678, room 42") == "order 12345678, room 42"
    # Long digit runs go even when they are not a valid card number: recall over precision.
    assert redact("ref 4111 1111 1111 1112") == "ref [PHONE]"


async def _record() -> RequestRecord:
    return RequestRecord(Exchange(b"req-1", Kind.CHAT, RequestHeaders({"headers": []}), 0.0))


def test_log_line_has_ids_and_redacted_text(caplog: pytest.LogCaptureFixture) -> None:
    log = RequestLog(logging.getLogger("test.requests"), text=True)
    req = asyncio.run(_record())
    body = {"model": "m", "messages": [{"role": "user", "content": "mail ada@example.com"}]}
    req.obs = Observed(None, log.begin(body))
    answer = req.answer = Answer(None, [])  # the relay keeps the answer's bytes when the log has text
    assert answer.capture is not None
    answer.capture.append(b'data: {"choices":[{"index":0,"delta":{"content":"call +1 415 555 0132"}}]}\n\n')
    answer.capture.append(b"data: [DONE]\n\n")
    answer.usage_in, answer.usage_out, answer.ttft = 5, 7, 0.0123
    req.who = Principal(Tenant(key_id="k1", app="web", org="acme", tier="standard"), "k1")
    req.http.status, req.http.stream, req.http.e2e = 200, True, 0.5
    with caplog.at_level(logging.INFO, logger="test.requests"):
        log.write(req, "m", "small", None, 0.001, True)
    [line] = [r.getMessage() for r in caplog.records]
    rec = orjson.loads(line)
    assert rec["request_id"] == "req-1" and rec["org"] == "acme" and rec["key_id"] == "k1"
    assert (rec["input_tokens"], rec["output_tokens"], rec["ttft_ms"], rec["slo"]) == (5, 7, 12.3, "met")
    assert rec["prompt"] == "user: mail [EMAIL]" and rec["response"] == "call [PHONE]"


def test_text_is_off_unless_asked() -> None:
    log = RequestLog(logging.getLogger("test.requests.notext"), text=False)
    assert log.begin({"messages": []}) == {}  # no body in the notes (and the relay keeps no answer bytes)


def test_prompt_and_response_text_shapes() -> None:
    assert prompt_text({"prompt": ["a", "b"]}) == "a\nb"
    parts = [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "u"}}]
    assert prompt_text({"messages": [{"role": "user", "content": parts}]}) == "user: x"
    body = {"choices": [{"message": {"content": "hello"}}]}
    assert response_text(orjson.dumps(body)) == "hello"
    assert response_text(b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\n') == "ab"
