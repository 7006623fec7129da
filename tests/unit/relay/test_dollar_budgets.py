"""Dollar budgets through a whole gateway over `MockTransport` (issue 43): reserved at the request's
worst-case cost and settled to its cost, at org, tag and end-user level; the budgets changed through the
admin API at once; hostile tags and end users refused with a 400 in the shape of the API they came in on,
never a metric label."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import GatewayApp
from gateway.config import Policy
from gateway.settings import Settings
from gateway.tenancy.keys import generate_key, hash_key
from gateway.upstream.mock import MockReply, MockTransport
from gateway.upstream.transport import Request
from tests.support.fake_upstream import OK_BODY  # usage: 3 prompt + 1 completion tokens
from tests.unit.relay.test_relay_over_mock import (
    STREAM,
    _gc_as_it_was,  # noqa: F401 (autouse fixture)
)

CHEAP = "http://cheap.test:8000"
KEY, TAGGED, ADMIN = generate_key(), generate_key(), "adm-" + generate_key()
# cheap: 1 USD per million input tokens, 2 per million output: 3 x 1 + 1 x 2 = 5 micro-dollars an answer.
ANSWER_MICRO = 5


def policy(org_usd_per_day: float = 0.001) -> Policy:
    return Policy.model_validate(
        {
            "pools": [
                {
                    "name": "cheap",
                    "engine": "vllm",
                    "model": "m",
                    "endpoints": {"static": [CHEAP]},
                    "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                }
            ],
            "models": [
                {"name": "chat", "route": {"pool": "cheap"}, "max_tokens": {"default": 10, "cap": 1000}}
            ],
            "limits": {
                "tags": {"team-a": {"usd_per_day": 0.0001}, "free": {}, "other": {}},
                "max_tags": 3,
            },
            "tenancy": {
                "orgs": [
                    {
                        "name": "acme",
                        "limits": {"usd_per_day": org_usd_per_day},
                        "apps": [{"name": "chat", "end_user_limits": {"usd_per_day": 0.0002}}],
                    }
                ],
                "keys": [
                    {"id": "k", "sha256": hash_key(KEY), "org": "acme", "app": "chat"},
                    {
                        "id": "t",
                        "sha256": hash_key(TAGGED),
                        "org": "beta",
                        "app": "x",
                        "tags": ["team-a", "free"],
                    },
                ],
            },
        }
    )


@asynccontextmanager
async def gateway(p: Policy | None = None) -> AsyncIterator[httpx.AsyncClient]:
    async def pool(req: Request) -> MockReply:
        return MockReply(200, STREAM, sse=True) if req.stream else MockReply(200, json=OK_BODY)

    app = GatewayApp(p or policy(), Settings(admin_key=ADMIN), transport=MockTransport(pool))
    async with app.lifespan(app.api):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=30
        ) as client:
            yield client


def chat(max_tokens: int = 10, **extra: Any) -> dict[str, Any]:
    return {
        "model": "chat",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        **extra,
    }


def auth(key: str, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **headers}


async def metrics(gw: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = (await gw.get("/metrics")).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


async def test_an_org_budget_is_reserved_at_the_worst_case_and_settled_to_the_cost() -> None:
    async with gateway() as gw:
        # 1,000 micro-dollars a day; each answer costs 5, each reserves its input estimate plus 10 x 2.
        too_big = await gw.post("/v1/chat/completions", json=chat(max_tokens=1000), headers=auth(KEY))
        assert too_big.status_code == 429, too_big.text
        err = too_big.json()["error"]
        assert err["code"] == "request_too_large" and err["param"] == "org.usd_day", err
        assert "USD" in err["message"], err["message"]
        admitted, refused = 0, None
        for _ in range(400):
            r = await gw.post("/v1/chat/completions", json=chat(), headers=auth(KEY))
            if r.status_code != 200:
                refused = r
                break
            admitted += 1
            assert r.headers["x-ratelimit-budget-usd"] == "org.usd_per_day"
        assert refused is not None and refused.status_code == 429, refused
        # Settled to the cost: far more answers than the worst case would allow, never past the budget.
        assert 1000 // ANSWER_MICRO - 10 <= admitted <= 1000 // ANSWER_MICRO, admitted
        body = refused.json()["error"]
        assert body["param"] == "org.usd_day", body
        m = await metrics(gw)
        cost = m[("llmgw_cost_usd_total", (("org", "acme"), ("pool", "cheap")))]
        assert round(cost * 1e6) == admitted * ANSWER_MICRO  # the same micro-dollars the budget settled
        used = m[("llmgw_budget_used_ratio", (("budget", "usd_per_day"), ("org", "acme")))]
        assert 0.9 < used <= 1.0


async def test_streams_top_up_dollars_as_they_run() -> None:
    async with gateway(policy(org_usd_per_day=1.0)) as gw:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        async with gw.stream("POST", "/v1/chat/completions", json=body, headers=auth(KEY)) as r:
            assert r.status_code == 200
            assert "x-ratelimit-remaining-usd" in r.headers
            text = "".join([c async for c in r.aiter_text()])
        assert "[DONE]" in text


async def test_tags_are_checked_charged_and_never_a_label() -> None:
    async with gateway() as gw:
        ok = await gw.post(
            "/v1/chat/completions", json=chat(), headers=auth(TAGGED, **{"x-llmgw-tags": "team-a"})
        )
        assert ok.status_code == 200, ok.text
        # team-a: 100 micro-dollars a day; the next answers run into it (5 each), the key's org has none.
        statuses = [
            (
                await gw.post(
                    "/v1/chat/completions", json=chat(metadata={"tags": ["team-a"]}), headers=auth(TAGGED)
                )
            ).status_code
            for _ in range(25)
        ]
        assert 429 in statuses and statuses.index(429) >= 10, statuses
        # A tag without a budget is counted, never refused.
        free = await gw.post(
            "/v1/chat/completions", json=chat(), headers=auth(TAGGED, **{"x-llmgw-tags": "free"})
        )
        assert free.status_code == 200
        cases = {
            "unknown_tag": {"x-llmgw-tags": "nope"},
            "tag_not_allowed": {"x-llmgw-tags": "other"},
            "too_many_tags": {"x-llmgw-tags": "free,team-a,other,x1"},
            "invalid_tag": {"x-llmgw-tags": "a" * 65},
        }
        for code, headers in cases.items():
            r = await gw.post("/v1/chat/completions", json=chat(), headers=auth(TAGGED, **headers))
            assert r.status_code == 400, (code, r.text)
            assert r.json()["error"]["code"] == code, r.text
            assert len(r.text) < 600  # a value is never echoed back at length
        huge = await gw.post(
            "/v1/chat/completions", json=chat(), headers=auth(TAGGED, **{"x-llmgw-tags": "t," * 3000})
        )
        assert huge.status_code == 400 and huge.json()["error"]["code"] == "too_many_tags"
        bad_type = await gw.post(
            "/v1/chat/completions", json=chat(metadata={"tags": [1, 2]}), headers=auth(TAGGED)
        )
        assert bad_type.status_code == 400 and bad_type.json()["error"]["code"] == "invalid_tags"
        # Anthropic's shape on /v1/messages.
        m = await gw.post(
            "/v1/messages",
            json={"model": "chat", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": TAGGED, "anthropic-version": "2023-06-01", "x-llmgw-tags": "nope"},
        )
        assert m.status_code == 400 and m.json()["type"] == "error", m.text
        assert m.json()["error"]["type"] == "invalid_request_error"
        text = (await gw.get("/metrics")).text
        assert "team-a" not in text and "nope" not in text


async def test_end_users_have_their_own_budget_and_hostile_ids_are_refused() -> None:
    async with gateway(policy(org_usd_per_day=1.0)) as gw:
        # 200 micro-dollars a day per end user of acme/chat; 5 an answer, ~35 reserved while it runs.
        first = [
            (await gw.post("/v1/chat/completions", json=chat(user="u1"), headers=auth(KEY))).status_code
            for _ in range(60)
        ]
        assert first.count(200) in range(25, 41) and first[-1] == 429, first
        other = await gw.post("/v1/chat/completions", json=chat(user="u2"), headers=auth(KEY))
        assert other.status_code == 200
        refused = await gw.post("/v1/chat/completions", json=chat(user="u1"), headers=auth(KEY))
        assert refused.json()["error"]["param"] == "user.usd_day"
        assert "u1" not in refused.json()["error"]["message"]
        for user in ("x" * 257, "a\nb", 7):
            r = await gw.post("/v1/chat/completions", json=chat(user=user), headers=auth(KEY))
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_user", r.text
        m = await gw.post(
            "/v1/messages",
            json={
                "model": "chat",
                "max_tokens": 5,
                "metadata": {"user_id": "z" * 300},
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        )
        assert m.status_code == 400 and m.json()["type"] == "error", m.text


async def test_admin_api_changes_budgets_at_once_and_audits_them(caplog: pytest.LogCaptureFixture) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    async with gateway(policy(org_usd_per_day=1.0)) as gw:
        assert (await gw.post("/v1/chat/completions", json=chat(), headers=auth(KEY))).status_code == 200
        with caplog.at_level(logging.INFO, logger="llmgw.audit"):
            put = await gw.put(
                "/admin/budgets/org", params={"org": "acme"}, json={"usd_per_day": 0}, headers=admin
            )
        assert put.status_code == 200, put.text
        assert put.json()["limits"] == {"usd_per_day": 0.0} and put.json()["before"] is None
        audit = [r.getMessage() for r in caplog.records if r.name == "llmgw.audit"]
        assert audit and '"action":"budget.set"' in audit[-1] and "org acme" in audit[-1]
        refused = await gw.post("/v1/chat/completions", json=chat(), headers=auth(KEY))
        assert refused.status_code == 429 and refused.json()["error"]["param"] == "org.usd_day"
        patch = await gw.patch(
            "/admin/budgets/org", params={"org": "acme"}, json={"usd_per_month": 10}, headers=admin
        )
        assert patch.json()["limits"] == {"usd_per_day": 0.0, "usd_per_month": 10.0}, patch.text
        listed = (await gw.get("/admin/budgets", headers=admin)).json()
        assert [(e["level"], e["name"]) for e in listed["data"]] == [("org", "acme")]
        gone = await gw.delete("/admin/budgets/org", params={"org": "acme"}, headers=admin)
        assert gone.status_code == 200
        assert (await gw.post("/v1/chat/completions", json=chat(), headers=auth(KEY))).status_code == 200
        # A tag declared at run time may be used at once.
        tag = await gw.put("/admin/budgets/tag", params={"tag": "new-tag"}, json={}, headers=admin)
        assert tag.status_code == 200
        r = await gw.post(
            "/v1/chat/completions", json=chat(), headers=auth(KEY, **{"x-llmgw-tags": "new-tag"})
        )
        assert r.status_code == 200, r.text
        bad = {
            "unknown level": ("/admin/budgets/planet", {"org": "acme"}, {"usd_per_day": 1}),
            "unknown field": ("/admin/budgets/org", {"org": "acme"}, {"usd_per_week": 1}),
            "negative": ("/admin/budgets/org", {"org": "acme"}, {"usd_per_day": -1}),
            "no target": ("/admin/budgets/app", {"org": "acme"}, {"usd_per_day": 1}),
            "bad name": ("/admin/budgets/tag", {"tag": "x y"}, {}),
        }
        for what, (path, params, body) in bad.items():
            r = await gw.put(path, params=params, json=body, headers=admin)
            assert r.status_code == 400, (what, r.text)
        assert (await gw.put("/admin/budgets/org", params={"org": "acme"}, json={})).status_code == 401
        nodb = await gw.get("/admin/spend", params={"from": "2026-01-01", "to": "2026-02-01"}, headers=admin)
        assert nodb.status_code == 404 and nodb.json()["error"]["code"] == "ledger_not_configured"
