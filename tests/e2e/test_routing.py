"""`model: "auto"` through the real gateway to simulators replaying RouterBench's recorded answers.

Three pools (mixtral, Yi-34B, gpt-4), each a simulator answering the dataset's prompts with its model's
recorded response. The routed alias starts by difficulty (the shipped router model) and runs the
cascade (agreement of the two cheap tiers + the shipped answer scorer). For the same rows,
`llmgw cascade eval --as-configured --decisions-out` must name the same answering tier and the same
escalation, the escalation metric must count them, and `usage` must be the sum of every call made.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

DATA = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "routing"
    / "routerbench_arc_challenge_train.jsonl"
)
ROWS = 36
POOLS = {"mixtral": "mixtral-8x7b-chat", "yi-34b": "Yi-34B-Chat", "gpt-4": "gpt-4-1106-preview"}

pytestmark = pytest.mark.skipif(not DATA.exists(), reason=f"routing data not found at {DATA}")


@dataclass(frozen=True)
class RoutedStack:
    url: str
    key: str
    rows: list[dict]
    decisions: dict[str, dict]  # id -> the offline replay's decision
    sims: dict[str, str]


def llmgw(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def policy_yaml(sims: dict[str, str], cut: float, key: str, *, model_dir: str | None = None) -> str:
    pools = "\n".join(
        f'  - {{name: {name}, model: {model}, endpoints: {{static: ["{sims.get(name, "http://127.0.0.1:9")}"]}},'
        f" timeouts: {{connect_s: 2, first_token_s: 20, total_s: 60}}}}"
        for name, model in POOLS.items()
    )
    model_line = f"model: {model_dir}, " if model_dir else ""
    return f"""\
pools:
{pools}
models:
  - name: auto
    max_tokens: {{default: 1024, cap: 2048}}
    route:
      policy:
        tiers: [{{pool: mixtral}}, {{pool: yi-34b}}, {{pool: gpt-4}}]
        difficulty: {{{model_line}thresholds: [{cut}, {cut}]}}
        cascade:
          scorers:
            - {{kind: agreement, mode: tiers, accept_threshold: 0.5}}
            - {{kind: trained, accept_threshold: 0.75}}
          max_escalations: 1
          stream_mode: buffer
tenancy:
  keys:
    - {{id: routed, sha256: {hash_key(key)}, org: acme, app: routing}}
"""


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoutedStack]:
    tmp = tmp_path_factory.mktemp("routed")
    rows = [json.loads(line) for line in DATA.open(encoding="utf-8")][:ROWS]
    data = tmp / "slice.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Difficulty from the shipped router model, as the gateway will compute it; a cut point midway
    # between two scores so that about a tenth of the rows start at the strong tier. The shipped head
    # trained on these ARC rows (doc 008), so it ranks the rows the cheap pair disagrees on high: with
    # a third starting strong, every cheap start was agreed on and the slice had no escalation left.
    scores_path = tmp / "scores.jsonl"
    llmgw("router", "score", "--in", str(data), "--out", str(scores_path))
    scores = sorted(json.loads(line)["difficulty"] for line in scores_path.open())
    i = int(len(scores) * 0.9)
    cut = round((scores[i - 1] + scores[i]) / 2, 6)
    key = generate_key()
    ports = {name: free_port() for name in POOLS}
    sims = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    policy = tmp / "policy.yaml"
    policy.write_text(policy_yaml(sims, cut, key))
    out = tmp / "decisions.jsonl"
    llmgw(
        "cascade", "eval", "--config", str(policy), "--alias", "auto", "--data", str(data),
        "--difficulty", str(scores_path), "--as-configured", "--decisions-out", str(out),
    )  # fmt: skip
    decisions = {d["id"]: d for d in map(json.loads, out.open())}
    with Stack(tmp) as s:
        for name, model in POOLS.items():
            extra = ("--profile", "instant", "--replay", str(data), "--replay-model", model)
            s.sim(model, *extra, port=ports[name], name=f"sim-{name}")
        gw = s.gateway(policy)
        yield RoutedStack(gw.url, key, rows, decisions, sims)


def test_auto_makes_the_offline_replays_choices(routed: RoutedStack) -> None:
    client = openai.OpenAI(base_url=f"{routed.url}/v1", api_key=routed.key, max_retries=0)
    before = httpx.get(f"{routed.url}/metrics").text
    sim_prompt_before = sum(
        metric(httpx.get(f"{u}/metrics").text, "vllm:prompt_tokens_total") for u in routed.sims.values()
    )
    mismatches, escalated, prompt_tokens = [], 0, 0
    tiers: list[str] = []
    for row in routed.rows:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": row["prompt"]}]
        )
        completion = raw.parse()
        tier = raw.headers["x-llmgw-tier"]
        esc = int(raw.headers["x-llmgw-escalations"]) > 0
        want = routed.decisions[row["id"]]
        if (tier, esc) != (want["tier"], want["escalated"]):
            mismatches.append((row["id"], tier, esc, want))
        # The answer is the answering tier's recorded response.
        assert completion.choices[0].message.content == row["outcomes"][POOLS[tier]]["response"]
        assert completion.usage is not None
        prompt_tokens += completion.usage.prompt_tokens
        escalated += esc
        tiers.append(tier)
    shares = {t: tiers.count(t) for t in set(tiers)}
    print(f"\n[routing e2e] {len(tiers)} rows: answered by {shares}, {escalated} escalated")
    assert not mismatches, mismatches[:5]
    # Not a vacuous agreement: several tiers answered and some requests escalated.
    assert len(set(tiers)) >= 2 and escalated >= 1, (statistics.multimode(tiers), escalated)
    after = httpx.get(f"{routed.url}/metrics").text
    counted = metric(after, "llmgw_router_escalations_total") - metric(
        before, "llmgw_router_escalations_total"
    )
    assert counted == escalated
    for pool in POOLS:
        label = f'model="auto",pool="{pool}"'
        n = metric(after, "llmgw_router_decisions_total", label) - metric(
            before, "llmgw_router_decisions_total", label
        )
        assert n == tiers.count(pool), (pool, n, tiers.count(pool))
    # usage is the sum over every call made (cheap tiers included): what the pools processed.
    sim_prompt = sum(
        metric(httpx.get(f"{u}/metrics").text, "vllm:prompt_tokens_total") for u in routed.sims.values()
    )
    assert prompt_tokens == sim_prompt - sim_prompt_before


def test_streamed_request_is_buffered_then_streamed(routed: RoutedStack) -> None:
    client = openai.OpenAI(base_url=f"{routed.url}/v1", api_key=routed.key, max_retries=0)
    row = routed.rows[0]
    want = routed.decisions[row["id"]]
    with client.chat.completions.with_streaming_response.create(
        model="auto",
        messages=[{"role": "user", "content": row["prompt"]}],
        stream=True,
        stream_options={"include_usage": True},
    ) as resp:
        assert resp.headers["x-llmgw-tier"] == want["tier"]
        chunks = list(resp.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == row["outcomes"][POOLS[want["tier"]]]["response"]
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


@pytest.mark.parametrize(
    "content",
    [
        "",
        [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
        "lorem ipsum " * 50_000,
    ],
    ids=["empty", "image-only", "100k-tokens"],
)
def test_odd_prompts_are_routed_not_failed(routed: RoutedStack, content: object) -> None:
    """No 500 and no hang: the router scores what text there is (none, or a truncated tail)."""
    resp = httpx.post(
        f"{routed.url}/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": content}], "max_tokens": 8},
        headers={"authorization": f"Bearer {routed.key}"},
        timeout=60,
    )
    assert resp.status_code == 200 or 400 <= resp.status_code < 500, resp.text
    if resp.status_code == 200:
        assert resp.headers["x-llmgw-tier"] in POOLS
        assert "x-llmgw-difficulty" in resp.headers


def test_bad_latency_budget_is_a_400(routed: RoutedStack) -> None:
    resp = httpx.post(
        f"{routed.url}/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {routed.key}", "x-llmgw-latency-budget-ms": "soon"},
    )
    assert resp.status_code == 400, resp.text
    assert "latency" in resp.json()["error"]["message"]


def test_missing_router_model_refuses_to_start_or_falls_back_loudly(tmp_path: Path) -> None:
    key = generate_key()
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_yaml({}, 0.5, key, model_dir=str(tmp_path / "no-such-artifact")))
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(port)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "router model cannot be loaded" in proc.stderr and "no-such-artifact" in proc.stderr, proc.stderr
    fallback = policy.read_text().replace("difficulty: {", "difficulty: {on_unavailable: fallback, ")
    policy.write_text(fallback)
    with Stack(tmp_path) as s:
        gw = s.gateway(policy, port=port)
        assert metric(gw.metrics(), "llmgw_router_fallback", 'model="auto"') == 1
    assert "router model unavailable" in gw.log_text()


def test_route_only_plan_fails_over_to_the_next_tier(tmp_path: Path) -> None:
    """A routed alias without a cascade: when the first tier's whole pool is down, a unary request is
    answered by the next tier of the plan (before any byte reached the client)."""
    key = generate_key()
    dead, live, gw_port = free_port(), free_port(), free_port()
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: down, model: m-down, endpoints: {{static: ["http://127.0.0.1:{dead}"]}},
     timeouts: {{connect_s: 1, first_token_s: 5, total_s: 10}}}}
  - {{name: up, model: m-up, endpoints: {{static: ["http://127.0.0.1:{live}"]}}}}
models:
  - name: auto
    max_tokens: {{default: 8, cap: 16}}
    route: {{policy: {{tiers: [{{pool: down}}, {{pool: up}}]}}}}
tenancy:
  keys:
    - {{id: k, sha256: {hash_key(key)}, org: acme, app: failover}}
"""
    )
    with Stack(tmp_path) as s:
        s.sim("m-up", "--profile", "instant", port=live)
        url = s.gateway(policy, port=gw_port).url
        resp = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-llmgw-tier"] == "up"
        assert resp.headers["x-llmgw-escalations"] == "1"
        text = httpx.get(f"{url}/metrics").text
        assert metric(text, "llmgw_router_escalations_total", 'reason="tier_error"') == 1
        assert metric(text, "llmgw_router_decisions_total", 'pool="up"') == 1
