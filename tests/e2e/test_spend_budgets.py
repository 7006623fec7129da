"""Issue 43's acceptance with real processes: dollar budgets, the spend ledger and their admin API.

One stack for the module: a real PostgreSQL (the ledger's and the audit log's database), a real
redis-server (limiter, key store, run-time budgets, the ledger's spool), two simulator pools with
different prices (`small` 0.5 / 1.5 and `large` 5 / 15 USD per million input / output tokens), aliases
`small`, `large` and `auto` (a cascade over both that always escalates: two calls per request), and two
gateway replicas with the same environment. Each test uses an org of its own, so that one test's spend
never moves another's figures:

- acme: a dollar budget per day that 200 concurrent requests over both replicas overrun several times;
  the org's settled micro-dollars in Redis, the ledger's sum and the cost counters agree, and the budget
  holds to within one reservation per replica;
- globex (no dollar budget): a trickle of requests while PostgreSQL is stopped for 60 s; every request
  is in the ledger afterwards, nothing dropped;
- initech: a budget set to zero through the admin API on one replica refuses on the other within 5 s,
  is audited, and is deleted again;
- umbrella: tagged requests, the spend report against an independent SQL sum, and hostile tags and end
  users (400s in the shape of each API, never a metric label).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import math
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as redis_py
from prometheus_client.parser import text_string_to_metric_families

from gateway.budget.estimate import PoolEstimate
from gateway.config import Model, OutputTokens, Route
from gateway.edge.exchange import Kind
from gateway.relay.normalize import prepare
from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.postgres import PostgresServer, start_or_skip
from tests.support.prom import metric
from tests.support.redis_server import REDIS_SERVER
from tests.support.stack import Service, Stack

pytestmark = pytest.mark.e2e

# USD per million tokens (= micro-dollars per token): (input, output).
PRICES = {"small": (0.5, 1.5), "large": (5.0, 15.0)}
# The highest input and output price each alias may be charged at (gateway.budget.pricing's `worst`).
WORST = {"small": PRICES["small"], "large": PRICES["large"], "auto": PRICES["large"]}
CALLS = {"small": 1, "large": 1, "auto": 2}  # the cascade always escalates: two calls
DEFAULT_MAX, CAP = 64, 1024
ACME_USD_PER_DAY = 0.05
ADMIN = "adm-" + generate_key()
PASSAGE = (
    "Every request reserves the most it can cost before the pool sees it, at the highest price of any "
    "pool its alias may reach, and settles to what it cost once the pool reported its usage; the same "
    "micro-dollars go to the budget, the cost counter and the spend ledger. Name the planets in order, "
    "then the moons of Jupiter that Galileo saw, then say which of them has an ocean under its ice."
)


@dataclass(frozen=True)
class TenantKey:
    id: str
    org: str
    app: str
    key: str = field(default_factory=generate_key)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}


KEYS = {
    "acme": TenantKey("acme-web", "acme", "web"),
    "globex": TenantKey("globex-batch", "globex", "batch"),
    "initech": TenantKey("initech-ops", "initech", "ops"),
    "umbrella": TenantKey("umbrella-chat", "umbrella", "chat"),
}


@dataclass
class SpendStack:
    gws: list[Service]
    pg: PostgresServer
    db: str
    redis_url: str

    @property
    def admin(self) -> dict[str, str]:
        return {"authorization": f"Bearer {ADMIN}"}

    def sql(self, query: str) -> list[list[str]]:
        """Rows of `query` (psql, unaligned): each a list of its fields as text."""
        out = self.pg.psql(query, self.db)
        return [line.split("|") for line in out.splitlines() if line]

    def metric(self, name: str, labels: str = "") -> list[float]:
        """The metric on each replica."""
        return [gw.metric(name, labels) for gw in self.gws]


def _policy(path: Path, sims: dict[str, str]) -> Path:
    timeouts = "timeouts: {connect_s: 2, first_token_s: 30, total_s: 60}"
    out = f"max_tokens: {{default: {DEFAULT_MAX}, cap: {CAP}}}"
    lines = ["pools:"]
    for name, url in sims.items():
        p_in, p_out = PRICES[name]
        lines.append(
            f'  - {{name: {name}, model: sim-{name}, endpoints: {{static: ["{url}"]}}, '
            f"price: {{input_per_mtok: {p_in}, output_per_mtok: {p_out}}}, {timeouts}}}"
        )
    lines += [
        "models:",
        f"  - {{name: small, route: {{pool: small}}, {out}}}",
        f"  - {{name: large, route: {{pool: large}}, {out}}}",
        "  - name: auto",
        f"    {out}",
        "    route:",
        "      policy:",
        "        tiers: [{pool: small}, {pool: large}]",
        "        # exp(mean logprob) never reaches 1: every request makes both calls.",
        "        cascade: {scorers: [{kind: logprob, accept_threshold: 1.0}], max_escalations: 1}",
        "limits:",
        "  backend: redis",
        "  on_backend_error: fail_closed",
        "  max_tags: 4",
        "  tags: {team-a: {usd_per_day: 5}, prod: {}, eu: {}}",
        "tenancy:",
        "  store: redis",
        "  orgs:",
        f"    - {{name: acme, limits: {{usd_per_day: {ACME_USD_PER_DAY}}}}}",
        "    - {name: umbrella, apps: [{name: chat, end_user_limits: {usd_per_day: 1}}]}",
        "  keys:",
    ]
    for name, t in KEYS.items():
        tags = ", tags: [team-a, prod]" if name == "umbrella" else ""
        lines.append(f"    - {{id: {t.id}, sha256: {hash_key(t.key)}, org: {t.org}, app: {t.app}{tags}}}")
    lines.append("ledger: {enabled: true}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def spend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpendStack]:
    if REDIS_SERVER is None:
        pytest.fail("redis-server binary not found on PATH (apt install redis-server)")
    tmp = tmp_path_factory.mktemp("spend-budgets")
    pg = start_or_skip(tmp / "pg")
    try:
        db = "ledger"
        pg.create_database(db)
        with Stack(tmp) as s:
            redis = s.redis()
            # 2 ms per engine step: a 512-token answer runs for about a second, so many requests hold
            # reservations at once (what makes the budget hard to keep across replicas).
            fast = ("--profile", "instant", "--step-base-ms", "2")
            sims = {name: s.sim(f"sim-{name}", *fast, ready=False).url for name in ("small", "large")}
            policy = _policy(tmp / "policy.yaml", sims)
            env = {
                "LLMGW_REDIS_URL": redis.url,
                "LLMGW_DATABASE_URL": pg.url_of(db),
                "LLMGW_ADMIN_KEY": ADMIN,
            }
            gws = [s.gateway(policy, env=env, name=f"gateway-{i}", ready=False) for i in range(2)]
            s.ready()  # the two replicas boot side by side
            st = SpendStack(gws, pg, db, redis.url)
            # The drainers migrate before their first write: wait for the tables.
            wait_until(
                lambda: (
                    st.sql("SELECT to_regclass('llmgw_spend'), to_regclass('llmgw_audit')")
                    == [["llmgw_spend", "llmgw_audit"]]
                ),
                "the ledger's migrations",
                timeout=30,
            )
            yield st
    finally:
        pg.close()


# -- requests ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: int
    rid: str
    alias: str
    stream: bool
    usage: tuple[int, int] | None = None  # (prompt, completion) as the client was told
    error: dict[str, Any] | None = None
    problem: str | None = None  # a 200 whose body is wrong (no [DONE], an error event, no usage)
    headers: dict[str, str] = field(default_factory=dict)


def _body(alias: str, text: str, max_tokens: int | None, stream: bool, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": alias, "messages": [{"role": "user", "content": text}], **extra}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


async def _send(
    client: httpx.AsyncClient, gw: Service, body: dict[str, Any], headers: dict[str, str]
) -> Outcome:
    url = f"{gw.v1}/chat/completions"
    stream = bool(body.get("stream"))
    async with client.stream("POST", url, json=body, headers=headers) as r:
        raw = await r.aread()
    out = Outcome(
        r.status_code, r.headers.get("x-request-id", ""), body["model"], stream, headers=dict(r.headers)
    )
    text = raw.decode(errors="replace")
    if r.status_code != 200:
        try:
            out.error = orjson.loads(raw).get("error")
        except orjson.JSONDecodeError:
            out.problem = text[:300]
        return out
    if not stream:
        usage = orjson.loads(raw).get("usage")
        if usage is None:
            out.problem = "no usage"
        else:
            out.usage = (usage["prompt_tokens"], usage["completion_tokens"])
        return out
    done = False
    for line in text.splitlines():
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        event = orjson.loads(data)
        if "error" in event:
            out.problem = f"error event: {data[:300]}"
        if event.get("usage"):
            out.usage = (event["usage"]["prompt_tokens"], event["usage"]["completion_tokens"])
    if not done:
        out.problem = out.problem or f"stream without [DONE]: {text[-300:]}"
    elif out.usage is None:
        out.problem = out.problem or "stream without a usage chunk"
    return out


def _client(timeout: float = 60) -> httpx.AsyncClient:
    # A fresh connection per request: a kept-alive one the server closes as idle would be a client-side
    # error that has nothing to do with the gateway.
    return httpx.AsyncClient(
        timeout=timeout, limits=httpx.Limits(max_connections=400, max_keepalive_connections=0)
    )


def _micro(alias: str, pool_in: int, pool_out: int) -> int:
    p_in, p_out = PRICES[alias]
    return round(pool_in * p_in + pool_out * p_out)


def _usd(micro: int) -> str:
    return f"{micro // 1_000_000}.{micro % 1_000_000:06d}"


# -- the ledger's drain -----------------------------------------------------------------------------


def _ledger_counts(st: SpendStack) -> dict[str, list[float]]:
    pages = [gw.metrics() for gw in st.gws]
    return {
        "spooled": [metric(p, "llmgw_ledger_rows_total", 'outcome="spooled"') for p in pages],
        "written": [metric(p, "llmgw_ledger_rows_total", 'outcome="written"') for p in pages],
        "dropped": [metric(p, "llmgw_ledger_rows_total", 'outcome="dropped"') for p in pages],
        "backlog": [metric(p, "llmgw_ledger_backlog_rows") for p in pages],
        "write_errors": [metric(p, "llmgw_ledger_write_errors_total") for p in pages],
    }


def _wait_drained(st: SpendStack, org: str, ids: set[str], timeout: float = 30) -> float:
    """Wait until every id of `ids` is a row of `org` in llmgw_spend and both replicas' spool backlog is 0
    with everything spooled written; the seconds it took."""
    seen: dict[str, Any] = {}

    def drained() -> bool:
        rows = {r[0] for r in st.sql(f"SELECT request_id FROM llmgw_spend WHERE org = '{org}'")}
        counts = _ledger_counts(st)
        seen.update(missing=len(ids - rows), counts=counts)
        return (
            ids <= rows
            and all(b == 0 for b in counts["backlog"])
            and sum(counts["written"]) >= sum(counts["spooled"])
        )

    t = time.monotonic()
    wait_until(drained, lambda: f"the ledger to drain for {org}: {seen}", timeout=timeout, interval=0.25)
    return time.monotonic() - t


# -- 1. a dollar budget across two replicas ---------------------------------------------------------


def _org_usd_day(st: SpendStack, org: str) -> tuple[list[Any], int]:
    """The org's usd_day quota keys in Redis (one per UTC day; the run may cross midnight) and the
    micro-dollars settled in them."""
    r = redis_py.Redis.from_url(st.redis_url)
    try:
        keys: list[Any] = sorted(r.keys(f"llmgw:{{llmgw}}:org:{org}:usd_day:q:d*"))
        values: list[Any] = r.mget(keys) if keys else []
    finally:
        r.close()
    return keys, sum(int(v) for v in values)


SIZES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
LOAD = 200


@dataclass(frozen=True)
class Planned:
    i: int
    alias: str
    max_tokens: int
    stream: bool
    ignore_eos: bool
    text: str

    def body(self) -> dict[str, Any]:
        # ignore_eos: the answer runs to max_tokens (the costliest); else the simulator samples a length.
        extra = {"ignore_eos": True} if self.ignore_eos else {}
        return _body(self.alias, self.text, self.max_tokens, self.stream, **extra)

    def reservation(self) -> int:
        """The most this request reserves, in micro-dollars (gateway.relay._admit + budget.pricing): its
        input estimate at one token per byte (the configured `input_bytes_per_token`, what a replica uses
        before it has calibrated, and above any calibrated rate for the simulator's ~4-byte tokens) and its
        granted output, each times the cascade's calls, at the alias's highest prices."""
        model = Model(
            name=self.alias, route=Route(pool="small"), max_tokens=OutputTokens(default=DEFAULT_MAX, cap=CAP)
        )
        prep = prepare(Kind.CHAT, copy.deepcopy(self.body()), model, "m")
        assert prep.max_tokens is not None
        calls = CALLS[self.alias]
        estimate = PoolEstimate(1.0).tokens(prep.size) * calls
        granted = prep.max_tokens * prep.outputs * calls
        w_in, w_out = WORST[self.alias]
        return math.ceil(estimate * w_in) + math.ceil(granted * w_out)


def _plan() -> list[Planned]:
    rng = random.Random(43)
    aliases = ("small", "large", "auto", "large", "small")  # 40 % small, 40 % large, 20 % the cascade
    out = []
    for i in range(LOAD):
        text = f"request {i}: " + PASSAGE[: 80 + rng.randrange(300)]
        out.append(Planned(i, aliases[i % 5], rng.choice(SIZES), i % 2 == 1, i % 3 != 0, text))
    return out


async def _burst(st: SpendStack, plan: list[Planned]) -> list[Outcome]:
    key = KEYS["acme"]
    async with _client() as client:
        tasks = []
        for p in plan:
            gw = st.gws[(p.i // 2) % 2]  # streams and unary requests on both replicas
            tasks.append(asyncio.ensure_future(_send(client, gw, p.body(), key.headers)))
            # All 200 overlap; spread over ~2 s so that settled requests free room for later ones.
            await asyncio.sleep(0.01)
        return list(await asyncio.gather(*tasks))


def test_a_dollar_budget_holds_across_two_replicas(spend: SpendStack) -> None:
    st = spend
    plan = _plan()
    t0 = time.monotonic()
    outcomes = asyncio.run(_burst(st, plan))
    load_s = time.monotonic() - t0
    statuses = Counter(o.status for o in outcomes)
    others = [(o.status, o.alias, o.error, o.problem) for o in outcomes if o.status not in (200, 429)]
    broken = [(o.rid, o.alias, o.stream, o.problem) for o in outcomes if o.status == 200 and o.problem]
    assert not others, f"statuses {dict(statuses)}; not 200/429: {others[:5]}"
    assert not broken, f"200s with a broken body: {broken[:5]}"
    refusals = Counter((o.error or {}).get("param") for o in outcomes if o.status == 429)
    codes = Counter((o.error or {}).get("code") for o in outcomes if o.status == 429)
    assert set(refusals) == {"org.usd_day"}, f"429s by param: {dict(refusals)}"
    assert set(codes) <= {"rate_limit_exceeded", "request_too_large"}, dict(codes)
    admitted = [o for o in outcomes if o.status == 200]
    assert admitted and statuses[429] > 0, (
        f"no refusal or no answer: {dict(statuses)} (not a test of the budget)"
    )
    budget_headers = {
        (o.headers.get("x-ratelimit-budget-usd"), o.headers.get("x-ratelimit-limit-usd")) for o in admitted
    }
    assert budget_headers == {("org.usd_per_day", str(ACME_USD_PER_DAY))}, budget_headers

    ids = {o.rid for o in outcomes}
    assert len(ids) == LOAD, "every answer carries its own x-request-id"
    drain_s = _wait_drained(st, "acme", ids)

    budget = round(ACME_USD_PER_DAY * 1_000_000)
    quota_keys, settled = _org_usd_day(st, "acme")
    rows = st.sql(
        "SELECT request_id, alias, pool, status, tokens_in, tokens_out, cost_micro_usd FROM llmgw_spend "
        "WHERE org = 'acme'"
    )
    ledger = sum(int(row[6]) for row in rows)
    counted = sum(st.metric("llmgw_cost_usd_total", 'org="acme"'))
    largest = max(p.reservation() for p in plan)
    offered = sum(p.max_tokens * CALLS[p.alias] * WORST[p.alias][1] for p in plan)  # output alone
    ratio = settled / budget
    bound = 1 + 2 * largest / budget
    # Refusals while running requests' reservations fill the budget (they settle lower): how many refused
    # requests would fit in what the budget has left afterwards. Each of those must have been told to
    # retry (a 429 with Retry-After), never that it can not fit before the quota resets.
    fit = sum(
        1
        for p, o in zip(plan, outcomes, strict=True)
        if o.status == 429 and p.reservation() <= budget - settled
    )
    figures = (
        f"[spend budgets] {LOAD} requests over 2 replicas in {load_s:.1f} s: {statuses[200]} x 200, "
        f"{statuses[429]} x 429 ({dict(codes)}); budget {budget} micro-USD, offered >= "
        f"{offered / budget:.1f}x (output alone); settled in Redis {settled} "
        f"({b', '.join(quota_keys).decode()}), ledger {ledger} ({len(rows)} rows), "
        f"llmgw_cost_usd_total {counted:.9f} USD; settled/budget = {ratio:.4f} "
        f"(bound {bound:.4f}: largest reservation {largest} micro-USD); ledger drained {drain_s:.1f} s "
        f"after the load; {fit} of the refused requests would fit in what is left now"
    )
    print("\n" + figures)
    assert len(quota_keys) >= 1, f"no quota key for acme's usd_day in Redis. {figures}"
    assert len(rows) == LOAD, f"{len(rows)} ledger rows for acme, {LOAD} requests sent. {figures}"
    assert settled == ledger, f"Redis's settled micro-dollars and the ledger's sum differ. {figures}"
    assert abs(counted * 1_000_000 - ledger) <= 0.5 * LOAD, f"the cost counters disagree. {figures}"
    assert ratio <= bound, f"the budget did not hold. {figures}"
    assert offered >= 3 * budget, f"the load does not overrun the budget several times. {figures}"
    final = [
        (p.i, (o.error or {}).get("code"))
        for p, o in zip(plan, outcomes, strict=True)
        if o.status == 429
        and p.reservation() <= budget - settled
        and (o.error or {}).get("code") != "rate_limit_exceeded"
    ]
    assert not final, f"refused as never fitting, yet they fit now: {final[:5]}. {figures}"

    # Each direct answer was charged its usage at its pool's price, in the ledger as the client saw it.
    by_id = {row[0]: row for row in rows}
    wrong: list[tuple[Any, ...]] = []
    for o in outcomes:
        row = by_id[o.rid]
        if int(row[3]) != o.status:
            wrong.append((o.rid, "status", row[3], o.status))
        if o.status != 200:
            if int(row[6]) != 0:
                wrong.append((o.rid, "a refusal cost", row[6]))
            continue
        assert o.usage is not None
        if (int(row[4]), int(row[5])) != o.usage:
            wrong.append((o.rid, "tokens", row[4:6], o.usage))
        if o.alias != "auto" and int(row[6]) != _micro(o.alias, *o.usage):
            wrong.append((o.rid, o.alias, "cost", row[6], _micro(o.alias, *o.usage)))
        if (
            o.alias == "auto"
            and not _micro("small", *o.usage) - 1 <= int(row[6]) <= _micro("large", *o.usage) + 1
        ):
            # Each of the calls' tokens at the small or the large pool's price (each call rounded).
            wrong.append((o.rid, "a cascade's cost outside its usage at either price", row[6], o.usage))
    assert not wrong, f"ledger rows that disagree with the answers: {wrong[:5]}"

    # One of them, sent again now: admitted.
    again = next(
        (
            p
            for p, o in zip(plan, outcomes, strict=True)
            if o.status == 429 and p.reservation() <= budget - settled
        ),
        None,
    )
    if again is not None:
        with httpx.Client(timeout=30) as c:
            retried = c.post(
                f"{st.gws[0].v1}/chat/completions", json=again.body(), headers=KEYS["acme"].headers
            )
        first = outcomes[again.i]
        print(
            f"[spend budgets] request {again.i} ({again.alias}, max_tokens {again.max_tokens}, reserves "
            f"{again.reservation()} micro-USD) was refused in the burst, x-should-retry: "
            f"{first.headers.get('x-should-retry')}, {first.error}; sent again now: {retried.status_code}"
        )
        assert retried.status_code == 200, retried.text
        settled = _org_usd_day(st, "acme")[1]  # with the retried request's cost

    # What the budget has left refuses, on both replicas, a request whose worst case is more than that;
    # another org is not touched by it.
    last = Planned(LOAD, "auto", CAP, False, True, "one more")
    assert last.reservation() > budget - settled, f"the load left more than any request reserves. {figures}"
    with httpx.Client(timeout=30) as c:
        for gw in st.gws:
            refused = c.post(f"{gw.v1}/chat/completions", json=last.body(), headers=KEYS["acme"].headers)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["param"] == "org.usd_day", refused.text
            other = c.post(f"{gw.v1}/chat/completions", json=last.body(), headers=KEYS["globex"].headers)
            assert other.status_code == 200, other.text


# -- 2. PostgreSQL stopped for 60 s under load ------------------------------------------------------

OUTAGE_S = 60.0
RATE = 10.0  # requests a second over both replicas


def test_postgres_stopped_for_60_s_loses_no_ledger_row(spend: SpendStack) -> None:
    st = spend
    key = KEYS["globex"]
    before_dropped = st.metric("llmgw_ledger_rows_total", 'outcome="dropped"')
    before_errors = sum(st.metric("llmgw_ledger_write_errors_total"))

    async def run() -> tuple[list[tuple[str, Outcome]], dict[str, Any]]:
        phase = ["before"]
        seen: dict[str, Any] = {}
        tasks: list[asyncio.Future[tuple[str, Outcome]]] = []
        done = asyncio.Event()

        async def one(i: int, label: str) -> tuple[str, Outcome]:
            body = _body("small", f"trickle {i}: {PASSAGE[:60]}", 8, i % 4 == 1)
            return label, await _send(client, st.gws[i % 2], body, key.headers)

        async def ticker() -> None:
            loop = asyncio.get_running_loop()
            start, i = loop.time(), 0
            while not done.is_set():
                tasks.append(asyncio.ensure_future(one(i, phase[0])))
                i += 1
                await asyncio.sleep(max(0.0, start + i / RATE - loop.time()))

        async with _client(timeout=30) as client:
            sender = asyncio.ensure_future(ticker())
            await asyncio.sleep(5)
            phase[0] = "outage"
            await asyncio.to_thread(st.pg.stop)
            t = time.monotonic()
            await asyncio.sleep(OUTAGE_S / 2)
            seen["mid"] = await asyncio.to_thread(_ledger_counts, st)
            await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - t)))
            seen["end"] = await asyncio.to_thread(_ledger_counts, st)
            await asyncio.to_thread(st.pg.start)
            seen["outage_s"] = time.monotonic() - t
            phase[0] = "after"
            await asyncio.sleep(5)
            done.set()
            await sender
            return list(await asyncio.gather(*tasks)), seen

    results, seen = asyncio.run(run())
    by_phase = Counter(label for label, _ in results)
    failed = [(label, o.status, o.error, o.problem) for label, o in results if o.status != 200 or o.problem]
    ids = {o.rid for _, o in results}
    outage_ids = {o.rid for label, o in results if label == "outage"}
    drain_s = _wait_drained(st, "globex", ids, timeout=60)
    found = {r[0] for r in st.sql("SELECT request_id FROM llmgw_spend WHERE org = 'globex'")}
    counts = _ledger_counts(st)
    dropped = [d - b for d, b in zip(counts["dropped"], before_dropped, strict=True)]
    errors = sum(counts["write_errors"]) - before_errors
    figures = (
        f"[ledger outage] sent {len(results)} ({dict(by_phase)}), PostgreSQL down {seen['outage_s']:.1f} s; "
        f"spool backlog mid-outage {seen['mid']['backlog']}, at its end {seen['end']['backlog']}; "
        f"{len(outage_ids & found)}/{len(outage_ids)} outage requests and {len(ids & found)}/{len(ids)} "
        f"in all in llmgw_spend {drain_s:.1f} s after the load ended; "
        f"failed writes {errors:g}; dropped per replica {dropped}"
    )
    print("\n" + figures)
    assert not failed, f"requests failed: {failed[:5]}. {figures}"
    assert by_phase["outage"] >= RATE * OUTAGE_S * 0.9, figures
    assert outage_ids <= found and ids <= found, figures
    assert dropped == [0.0, 0.0], figures
    assert max(seen["end"]["backlog"]) > 0 and errors > 0, f"the outage was not seen by the ledger. {figures}"


# -- 3. a budget lowered through the admin API --------------------------------------------------------


def _ask(c: httpx.Client, gw: Service, key: TenantKey) -> httpx.Response:
    return c.post(f"{gw.v1}/chat/completions", json=_body("small", "hello", 16, False), headers=key.headers)


def test_a_budget_lowered_through_the_admin_api_takes_effect_on_both_replicas(spend: SpendStack) -> None:
    st = spend
    key = KEYS["initech"]
    gw0, gw1 = st.gws
    with httpx.Client(timeout=30) as c:
        for gw in st.gws:  # each replica has the org's rules cached before the change
            assert _ask(c, gw, key).status_code == 200
        put = c.put(
            f"{gw0.url}/admin/budgets/org",
            params={"org": "initech"},
            json={"usd_per_day": 0},
            headers=st.admin,
        )
        t = time.monotonic()
        assert put.status_code == 200, put.text
        assert put.json()["limits"] == {"usd_per_day": 0.0} and put.json()["before"] is None, put.text
        seen: list[httpx.Response] = []

        def refused() -> bool:
            seen[:] = [_ask(c, gw1, key)]
            return seen[0].status_code == 429

        wait_until(
            refused,
            lambda: f"replica 1 to refuse initech: {seen[0].status_code} {seen[0].text[:300]}",
            timeout=10,
            interval=0.05,
        )
        took = time.monotonic() - t
        err = seen[0].json()["error"]
        there = _ask(c, gw0, key)
        listed = c.get(f"{gw1.url}/admin/budgets", headers=st.admin).json()
        audit = c.get(f"{gw1.url}/admin/audit", params={"limit": 50}, headers=st.admin)
        assert audit.status_code == 200, audit.text
        gone = c.delete(f"{gw1.url}/admin/budgets/org", params={"org": "initech"}, headers=st.admin)
        t_del = time.monotonic()
        assert gone.status_code == 200, gone.text

        def served() -> bool:
            seen[:] = [_ask(c, gw0, key)]
            return seen[0].status_code == 200

        wait_until(
            served,
            lambda: f"replica 0 to serve initech again: {seen[0].text[:300]}",
            timeout=10,
            interval=0.05,
        )
        took_del = time.monotonic() - t_del
        after = [_ask(c, gw, key).status_code for gw in st.gws]
        audit_after = c.get(f"{gw0.url}/admin/audit", params={"limit": 50}, headers=st.admin).json()["data"]
    print(
        f"\n[admin budgets] usd_per_day 0 set on replica 0 refused on replica 1 after {took:.2f} s; "
        f"deleted on replica 1, served on replica 0 again after {took_del:.2f} s"
    )
    assert took <= 5.0, f"the budget took {took:.2f} s to reach replica 1"
    assert err["param"] == "org.usd_day" and err["code"] in ("request_too_large", "rate_limit_exceeded"), err
    assert there.status_code == 429 and there.json()["error"]["param"] == "org.usd_day", there.text
    assert {"level": "org", "name": "initech", "limits": {"usd_per_day": 0.0}} in listed["data"], listed
    entries = [e for e in audit.json()["data"] if e["target"] == "org initech"]
    assert entries, audit.text
    e = entries[0]  # newest first
    assert e["action"] == "budget.set" and e["actor"].startswith("admin@"), e
    assert e["before"] is None and e["after"] == {"usd_per_day": 0.0}, e
    assert took_del <= 5.0, f"the deletion took {took_del:.2f} s to reach replica 0"
    assert after == [200, 200], after
    deleted = [e for e in audit_after if e["target"] == "org initech"][0]
    assert deleted["action"] == "budget.delete", deleted
    assert deleted["before"] == {"usd_per_day": 0.0} and deleted["after"] is None, deleted


# -- 4. the spend report -----------------------------------------------------------------------------

TAGGED: list[tuple[dict[str, str], dict[str, Any]]] = [
    ({"x-llmgw-tags": "team-a"}, {}),
    ({"x-llmgw-tags": "team-a"}, {}),
    ({"x-llmgw-tags": "team-a"}, {"stream": True}),
    ({}, {"metadata": {"tags": ["team-a", "prod"]}}),
    ({}, {"metadata": {"tags": ["prod", "team-a"]}, "stream": True}),
    ({"x-llmgw-tags": "prod"}, {"metadata": {"tags": "team-a"}}),
    ({"x-llmgw-tags": "prod, team-a"}, {"metadata": {"tags": ["team-a"]}}),  # a tag named twice counts once
    ({}, {"user": "alice"}),
    ({}, {"user": "alice", "model": "large"}),
]


def test_the_spend_report_equals_an_independent_sql_sum(spend: SpendStack) -> None:
    st = spend
    key = KEYS["umbrella"]

    async def run() -> list[Outcome]:
        async with _client() as client:
            sends = []
            for i, (headers, extra) in enumerate(TAGGED):
                extra = dict(extra)
                alias = extra.pop("model", "small")
                body = _body(
                    alias, f"tagged {i}: {PASSAGE[:100]}", 32, bool(extra.pop("stream", False)), **extra
                )
                sends.append(_send(client, st.gws[i % 2], body, {**key.headers, **headers}))
            return list(await asyncio.gather(*sends))

    outcomes = asyncio.run(run())
    assert all(o.status == 200 and not o.problem for o in outcomes), [
        (o.status, o.error, o.problem) for o in outcomes
    ]
    # One more through the Messages API: the end user from metadata.user_id, a tag from the header.
    with httpx.Client(timeout=30) as c:
        m = c.post(
            f"{st.gws[1].url}/v1/messages",
            json={"model": "small", "max_tokens": 16, "metadata": {"user_id": "bob"},
                  "messages": [{"role": "user", "content": "tagged message"}]},
            headers={"x-api-key": key.key, "anthropic-version": "2023-06-01", "x-llmgw-tags": "prod"},
        )  # fmt: skip
    assert m.status_code == 200, m.text
    ids = {o.rid for o in outcomes} | {m.headers["x-request-id"]}
    _wait_drained(st, "umbrella", ids)

    today = dt.datetime.now(dt.UTC).date()
    start, end = today - dt.timedelta(days=1), today + dt.timedelta(days=2)
    with httpx.Client(timeout=30) as c:
        params = {"group_by": "org,tag", "from": start.isoformat(), "to": end.isoformat(), "interval": "day"}
        report = c.get(f"{st.gws[0].url}/admin/spend", params={**params, "format": "json"}, headers=st.admin)
        csv = c.get(f"{st.gws[1].url}/admin/spend", params={**params, "format": "csv"}, headers=st.admin)
    assert report.status_code == 200, report.text
    assert csv.status_code == 200, csv.text
    got = sorted(
        (r["period"], r["org"], r["tag"], r["requests"], r["tokens_in"], r["tokens_out"], r["cost_usd"])
        for r in report.json()["data"]
    )
    # Independently: every row once per tag it carries (the gateway never writes a tag twice), an
    # untagged row under "", summed per UTC day, org and tag.
    sql = f"""
        SELECT to_char((at AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD'), org, tag, count(*),
               sum(tokens_in), sum(tokens_out), sum(cost_micro_usd)
        FROM (SELECT at, org, tokens_in, tokens_out, cost_micro_usd, unnest(tags) AS tag
                FROM llmgw_spend WHERE cardinality(tags) > 0
              UNION ALL
              SELECT at, org, tokens_in, tokens_out, cost_micro_usd, '' AS tag
                FROM llmgw_spend WHERE cardinality(tags) = 0) AS x
        WHERE at >= '{start.isoformat()}T00:00:00Z' AND at < '{end.isoformat()}T00:00:00Z'
        GROUP BY 1, 2, 3
    """
    want = sorted(
        (p, org, tag, int(n), int(i), int(o), _usd(int(cost))) for p, org, tag, n, i, o, cost in st.sql(sql)
    )
    total = st.sql("SELECT count(*), sum(cost_micro_usd) FROM llmgw_spend")[0]
    print(
        f"\n[spend report] {len(got)} rows (org, tag, day); ledger {total[0]} rows, "
        f"{_usd(int(total[1]))} USD; umbrella: {[r for r in got if r[1] == 'umbrella']}"
    )
    assert got == want, f"the report:\n{got}\nSQL:\n{want}"
    umbrella = {r[2]: r[3] for r in got if r[1] == "umbrella"}
    assert umbrella == {"team-a": 7, "prod": 5, "": 2}, umbrella
    assert len(csv.text.strip().splitlines()) == len(got) + 1, csv.text[:500]
    users = st.sql(
        "SELECT coalesce(end_user, '-'), count(*) FROM llmgw_spend WHERE org = 'umbrella' GROUP BY 1"
    )
    assert sorted(users) == [["-", "7"], ["alice", "2"], ["bob", "1"]], users


# -- 5. hostile tags and end users ---------------------------------------------------------------------

UNKNOWN_TAG = "zz-unknown-tag-4711"
LONG_TAG = "zzlongtag" + "x" * 91  # 100 characters
HUGE_USER = "zzhugeuser-" + "u" * (10 * 1024 - 11)  # 10 KB
MANY_TAGS = "team-a,prod,eu,zz-many-one,zz-many-two"  # 5 tags, 4 allowed per request

# (what, how the tag or user is sent: header / body, the value, the error code)
HOSTILE: list[tuple[str, str, str, str]] = [
    ("unknown tag", "tags", UNKNOWN_TAG, "unknown_tag"),
    ("too many tags", "tags", MANY_TAGS, "too_many_tags"),
    ("100-character tag", "tags", LONG_TAG, "invalid_tag"),
    ("a tag the key may not use", "tags", "eu", "tag_not_allowed"),
    ("10 KB end user", "user", HUGE_USER, "invalid_user"),
]


def _label_values(text: str) -> set[str]:
    return {v for f in text_string_to_metric_families(text) for s in f.samples for v in s.labels.values()}


def test_hostile_tags_and_end_users_are_400s_in_the_apis_shape(spend: SpendStack) -> None:
    st = spend
    key = KEYS["umbrella"]
    seen = []
    with httpx.Client(timeout=30) as c:
        for n, (what, kind, value, code) in enumerate(HOSTILE):
            gw = st.gws[n % 2]
            # Chat: the tags in the header and in metadata.tags; the end user as `user`.
            chats: list[tuple[dict[str, str], dict[str, Any]]] = (
                [({"x-llmgw-tags": value}, {}), ({}, {"metadata": {"tags": value.split(",")}})]
                if kind == "tags"
                else [({}, {"user": value})]
            )
            for headers, extra in chats:
                r = c.post(
                    f"{gw.v1}/chat/completions",
                    json=_body("small", "hi", 8, False, **extra),
                    headers={**key.headers, **headers},
                )
                seen.append((what, "chat", r.status_code, r.headers.get("x-request-id", "")))
                assert r.status_code == 400, (what, r.text[:500])
                err = r.json()["error"]
                assert set(err) >= {"message", "type", "param", "code"}, (what, err)
                assert err["type"] == "invalid_request_error" and err["code"] == code, (what, err)
                assert len(r.text) < 1000, (what, "the value echoed back", len(r.text))
            # Messages: the tags in the header, the end user as metadata.user_id; Anthropic's error shape.
            body: dict[str, Any] = {
                "model": "small",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}],
            }
            headers = {"x-api-key": key.key, "anthropic-version": "2023-06-01"}
            if kind == "tags":
                headers["x-llmgw-tags"] = value
            else:
                body["metadata"] = {"user_id": value}
            r = c.post(f"{gw.url}/v1/messages", json=body, headers=headers)
            seen.append((what, "messages", r.status_code, r.headers.get("x-request-id", "")))
            assert r.status_code == 400, (what, r.text[:500])
            data = r.json()
            assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error", (what, data)
            assert isinstance(data["error"]["message"], str) and "param" not in data, (what, data)
            assert len(r.text) < 1000, (what, "the value echoed back", len(r.text))
        # The key's own tags still work: the refusals were about the values, not the key.
        ok = c.post(
            f"{st.gws[0].v1}/chat/completions",
            json=_body("small", "hi", 8, False, user="carol"),
            headers={**key.headers, "x-llmgw-tags": "team-a,prod"},
        )
        assert ok.status_code == 200, ok.text
    print(f"\n[hostile input] {len(seen)} requests, statuses {Counter(s[2] for s in seen)}")
    values = [UNKNOWN_TAG, LONG_TAG, HUGE_USER[:40], "zz-many-one", "zz-many-two"]
    for gw in st.gws:
        text = gw.metrics()
        assert not [v for v in values if v in text], [v for v in values if v in text]
        labels = _label_values(text)
        leaked = labels & {"team-a", "prod", "eu", "alice", "bob", "carol", UNKNOWN_TAG, LONG_TAG, HUGE_USER}
        assert not leaked, f"tags or end users as label values on {gw.name}: {leaked}"
    # The ledger has a row for each refusal (a tenant's finished request), without the refused values.
    ids = {s[3] for s in seen}
    assert "" not in ids, seen
    _wait_drained(st, "umbrella", ids | {ok.headers["x-request-id"]})
    rows = st.sql(
        "SELECT request_id, status, cardinality(tags), coalesce(end_user, '-') FROM llmgw_spend "
        "WHERE org = 'umbrella'"
    )
    refused = {r[0]: tuple(r[1:]) for r in rows if r[0] in ids}
    assert set(refused.values()) == {("400", "0", "-")}, refused
    hostile = st.sql(
        "SELECT count(*) FROM llmgw_spend WHERE length(coalesce(end_user, '')) > 256 "
        "OR array_to_string(tags, ',') LIKE '%zz%' OR 'eu' = ANY(tags)"
    )
    assert hostile == [["0"]], hostile
