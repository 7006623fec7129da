"""Goodput verdicts, cost accounting and the feedback store (in-process, no server)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.budget.pricing import Pricing
from gateway.config import parse_policy
from gateway.edge.exchange import Exchange, Kind, RequestHeaders
from gateway.errors import ConflictError, NotFoundError
from gateway.observability.feedback import FeedbackRequest, FeedbackStore
from gateway.observability.goodput import SloTargets, judge
from gateway.observability.metrics import Metrics
from gateway.observability.observer import Observer
from gateway.record import Answer, Budget, RequestRecord
from gateway.tenancy.auth import Principal
from ratelimit.model import Tenant
from tests.support.prom import metric

POLICY = """\
pools:
  - {name: cheap, model: c, endpoints: {static: ["http://127.0.0.1:1"]},
     price: {input_per_mtok: 1.0, output_per_mtok: 2.0}}
  - {name: dear, model: d, endpoints: {static: ["http://127.0.0.1:2"]},
     price: {input_per_mtok: 10.0, output_per_mtok: 20.0}}
  - {name: free, model: f, endpoints: {static: ["http://127.0.0.1:3"]}}
models:
  - {name: chat, route: {pool: cheap}, slo_class: interactive}
  - {name: big, route: {pool: dear}, slo_class: batch}
  - {name: unpriced, route: {pool: free}}
slo_classes:
  interactive: {ttft_ms: 500, tpot_ms: 50}
  batch: {e2e_ms: 10000}
"""

I = SloTargets(0.5, 0.05, None)  # noqa: E741 - the interactive class


def test_stream_verdicts() -> None:
    assert judge(I, True, 0.4, 0.04, 3.0, 60) is True
    assert judge(I, True, 0.6, 0.04, 3.0, 60) is False  # first token late
    assert judge(I, True, 0.4, 0.06, 3.0, 60) is False  # decoding slow
    assert judge(I, True, 0.4, None, 0.45, 1) is True  # one token: no TPOT to judge
    assert judge(I, True, None, None, 0.7, 40) is False  # answered in one piece: TTFT = e2e


def test_unary_verdicts_use_the_stream_equivalent_bound() -> None:
    # 0.5 s + 0.05 s x 19 tokens = 1.45 s
    assert judge(I, False, None, None, 1.4, 20) is True
    assert judge(I, False, None, None, 1.5, 20) is False
    e2e_only = SloTargets(None, None, 2.0)
    assert judge(e2e_only, False, None, None, 1.9, 500) is True
    assert judge(e2e_only, True, 0.1, 0.001, 2.1, 500) is False
    assert judge(SloTargets(None, 0.05, None), False, None, None, 1.0, 5) is None


async def _new_record() -> RequestRecord:
    # The exchange remembers the running task, so it is made inside a loop.
    return RequestRecord(Exchange(b"", Kind.CHAT, RequestHeaders({"headers": []}), 0.0))


def _finish(
    obs: Observer,
    rid: bytes,
    endpoint: str,
    model: str,
    pool: str,
    tenant: Tenant | None,
    status: int,
    streamed: bool,
    e2e: float,
    req: RequestRecord,
    pricing: Pricing | None = None,
) -> None:
    """End `req` as the relay does: its outcome on the exchange, its cost as settlement computes it
    (`Budget.spend`, at the policy's prices), then `Observer.finish` with the labels it was served under."""
    answer = req.answer
    if answer is not None:
        budget = req.budget = Budget(0, 0, False)
        p = pricing or Pricing(parse_policy(POLICY, "t"))
        budget.spend = p.spent(model, pool, None, answer.usage_in, answer.usage_out, answer.costs)
    x = req.http
    x.rid, x.endpoint = rid, Kind(endpoint)
    x.status, x.stream, x.e2e = status, streamed, e2e
    req.who = Principal(tenant, tenant.key_id) if tenant is not None else None
    obs.finish(req, model, pool, None)


def _ex(usage_in: int = 0, usage_out: int = 0, ttft: float | None = None) -> RequestRecord:
    req = asyncio.run(_new_record())
    answer = req.answer = Answer(None, None)
    answer.usage_in, answer.usage_out, answer.ttft = usage_in, usage_out, ttft
    return req


def _t(org: str) -> Tenant:
    return Tenant(key_id="k", app="a", org=org, tier="standard")


def _observer() -> tuple[Observer, CollectorRegistry]:
    policy = parse_policy(POLICY, "t")
    metrics = Metrics(policy)
    return Observer(policy, metrics), metrics.registry


def test_goodput_counts_met_missed_and_skips_client_errors() -> None:
    obs, reg = _observer()
    _finish(obs, b"r1", "chat", "chat", "cheap", _t("acme"), 200, True, 1.0, _ex(10, 10, ttft=0.1))
    _finish(obs, b"r2", "chat", "chat", "cheap", _t("acme"), 200, True, 1.0, _ex(10, 10, ttft=0.9))
    _finish(obs, b"r3", "chat", "chat", "cheap", _t("acme"), 503, True, 0.1, _ex())
    _finish(obs, b"r4", "chat", "chat", "cheap", _t("acme"), 429, True, 0.01, _ex())
    _finish(obs, b"r5", "chat", "chat", "cheap", None, 401, False, 0.01, _ex())
    broken = _ex(10, 10, ttft=0.1)
    assert broken.answer is not None
    broken.answer.broken = True
    _finish(obs, b"r6", "chat", "chat", "cheap", _t("acme"), 200, True, 1.0, broken)
    text = generate_latest(reg).decode()
    base = 'model="chat",outcome="{}",pool="cheap",slo_class="interactive"'
    assert metric(text, "llmgw_slo_requests_total", "{" + base.format("met") + "}") == 1
    assert metric(text, "llmgw_slo_requests_total", "{" + base.format("missed") + "}") == 3
    # An alias without a class is never judged.
    _finish(obs, b"r7", "chat", "unpriced", "free", _t("acme"), 200, False, 100.0, _ex(1, 1))
    assert metric(generate_latest(reg).decode(), "llmgw_slo_requests_total") == 4


def test_cost_per_org_and_pool_and_per_accepted_output() -> None:
    obs, reg = _observer()
    _finish(
        obs, b"a", "chat", "chat", "cheap", _t("acme"), 200, False, 0.1, _ex(1_000_000, 500_000)
    )  # 1 + 1 USD
    _finish(
        obs, b"b", "chat", "chat", "cheap", _t("acme"), 502, False, 0.1, _ex(1_000_000, 0)
    )  # 1 USD, not accepted
    cascade = _ex(30, 30)
    assert cascade.answer is not None
    cascade.answer.costs = [("cheap", 0.5), ("dear", 1.5)]  # every call of a cascade, each on its pool
    _finish(obs, b"c", "chat", "big", "dear", _t("acme"), 200, False, 0.1, cascade)
    _finish(
        obs, b"d", "chat", "unpriced", "free", _t("other"), 200, False, 0.1, _ex(99, 99)
    )  # no price: no cost
    text = generate_latest(reg).decode()
    assert metric(text, "llmgw_cost_usd_total", 'org="acme",pool="cheap"') == pytest.approx(3.5)
    assert metric(text, "llmgw_cost_usd_total", 'org="acme",pool="dear"') == pytest.approx(1.5)
    assert metric(text, "llmgw_cost_usd_total", 'org="other"') == 0
    assert metric(text, "llmgw_accepted_outputs_total", 'org="acme"') == 2
    assert metric(text, "llmgw_org_requests_total", 'code="502",org="acme"') == 1
    assert metric(text, "llmgw_org_tokens_total", 'direction="input",org="acme",pool="cheap"') == 2_000_000
    # 5 USD over 2 accepted outputs; feedback rejecting one doubles it.
    assert metric(text, "llmgw_cost_per_accepted_output_usd", 'org="acme"') == pytest.approx(2.5)
    asyncio.run(obs.feedback.rate("acme", FeedbackRequest(request_id="a", accepted=False, score=0.2)))
    text = generate_latest(reg).decode()
    assert metric(text, "llmgw_rejected_outputs_total", 'org="acme",pool="cheap"') == 1
    assert metric(text, "llmgw_cost_per_accepted_output_usd", 'org="acme"') == pytest.approx(5.0)
    assert metric(text, "llmgw_feedback_total", 'accepted="false",pool="cheap"') == 1
    assert metric(text, "llmgw_feedback_score_count", 'pool="cheap"') == 1


def test_feedback_only_from_the_requests_org_and_once() -> None:
    obs, _ = _observer()
    _finish(obs, b"req-1", "chat", "chat", "cheap", _t("acme"), 200, False, 0.1, _ex(1, 1))
    _finish(obs, b"req-2", "chat", "chat", "cheap", _t("acme"), 500, False, 0.1, _ex())
    with pytest.raises(NotFoundError):
        asyncio.run(obs.feedback.rate("globex", FeedbackRequest(request_id="req-1", accepted=False)))
    with pytest.raises(NotFoundError):  # failed answers are not rated
        asyncio.run(obs.feedback.rate("acme", FeedbackRequest(request_id="req-2", accepted=True)))
    asyncio.run(obs.feedback.rate("acme", FeedbackRequest(request_id="req-1", accepted=True)))
    with pytest.raises(ConflictError):
        asyncio.run(obs.feedback.rate("acme", FeedbackRequest(request_id="req-1", accepted=False)))


def test_feedback_store_is_bounded_and_expires() -> None:
    now = [0.0]
    store = FeedbackStore(ttl_s=10.0, max_entries=3, clock=lambda: now[0])
    for i in range(5):
        store.remember("acme", f"r{i}", "cheap")
    assert len(store) == 3
    assert store.find("acme", "r0") is None and store.find("acme", "r4") is not None
    # Same id in another org is another entry.
    store.remember("globex", "r4", "dear")
    found = store.find("acme", "r4")
    assert found is not None and found.pool == "cheap"
    now[0] = 11.0
    assert store.find("acme", "r4") is None
    store.remember("acme", "late", "cheap")  # expired entries are dropped on the next insert
    assert len(store) == 1


def test_gpu_hour_price_becomes_a_token_price() -> None:
    policy = parse_policy(
        """\
pools:
  - {name: gpu, model: m, endpoints: {static: ["http://127.0.0.1:1"]},
     gpu_hour: {usd_per_gpu_hour: 3.6, gpus_per_replica: 2, output_tokens_per_s: 1000}}
models:
  - {name: chat, route: {pool: gpu}}
""",
        "t",
    )
    # 3.6 USD x 2 GPUs per hour at 1,000 tokens/s = 2 USD per million output tokens; input at 0.1 of that.
    price = policy.pools[0].price
    assert price is not None
    assert (price.input_per_mtok, price.output_per_mtok) == pytest.approx((0.2, 2.0))
    metrics = Metrics(policy)
    obs = Observer(policy, metrics)
    _finish(
        obs,
        b"g",
        "chat",
        "chat",
        "gpu",
        _t("acme"),
        200,
        False,
        0.1,
        _ex(1_000_000, 1_000_000),
        Pricing(policy),
    )
    text = generate_latest(metrics.registry).decode()
    assert metric(text, "llmgw_cost_usd_total", 'org="acme",pool="gpu"') == pytest.approx(2.2)


def test_feedback_store_reused_ids_and_overwritten_verdicts() -> None:
    now = [0.0]
    store = FeedbackStore(ttl_s=100.0, max_entries=4, clock=lambda: now[0])
    store.remember("acme", "same", "cheap")
    store.mark_rated("acme", "same")
    found = store.find("acme", "same")
    assert found is not None and found.rated
    now[0] = 1.0
    store.remember("acme", "same", "strong")  # a client reusing its x-request-id
    found = store.find("acme", "same")
    assert found is not None and found.pool == "strong" and not found.rated and found.at == 1.0
    for i in range(4):  # the ring wraps: both "same" entries are overwritten
        store.remember("acme", f"n{i}", "cheap")
    assert store.find("acme", "same") is None
    assert len(store) == 4
