"""The router learns the deployment's own traffic, end to end: real gateway replicas, one real
redis-server, two simulators replaying a small dataset (a cheap and a strong model's recorded answers).

- Exploration: every cheap-routed request of `auto` (rate 1.0) is also sent to the strong pool in the
  background. The client gets the cheap answer only; the strong simulator is called once per
  exploration; the calls are charged to the gateway-owned org `llmgw-explore` (its tier's request
  rate refuses the sixth), never to the client's key (its rate-limit header counts its own requests).
  The agreement judge's verdicts teach the outcome memory: a near-identical prompt of one the cheap
  model got wrong then scores a higher `x-llmgw-difficulty` and is routed to the strong pool.
- Feedback: an answer served by replica 0 is rated on replica 1 (shared through Redis), and replica
  1's memory learns from it (`auto-fb`, no exploration): there too the near-identical prompt moves up,
  for the rating org only: another org's routing of it stays on the prior (`memory.feedback: org`).
- Sharing: what one replica learns reaches the other through the alias's outcome stream, a new
  replica starts with the deployment's outcomes, and a replica that routed nothing has the live cut of
  the other's traffic (calibration sketches merged through Redis).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.prom import metric
from tests.support.stack import Stack

CHEAP, STRONG = "cheap-7b", "strong-70b"


def _mcq(question: str, *options: str) -> str:
    letters = "ABCD"
    return "\n".join(
        [question, *(f"{letters[i]}) {o}" for i, o in enumerate(options)), "Answer with one letter."]
    )


# (id, prompt, cheap answer, strong answer): diverse topics, so their embeddings are far apart.
ROWS = [
    ("wrong", _mcq("Which gas do plants absorb from the air for photosynthesis?", "Oxygen", "Nitrogen", "Carbon dioxide", "Helium"), "A", "C"),  # noqa: E501
    ("capital", _mcq("What is the capital of Australia?", "Sydney", "Canberra", "Melbourne", "Perth"), "B", "B"),  # noqa: E501
    ("prime", _mcq("Which of these numbers is prime?", "21", "27", "29", "33"), "C", "C"),
    ("author", _mcq("Who wrote the play Romeo and Juliet?", "Charles Dickens", "William Shakespeare", "Jane Austen", "Mark Twain"), "B", "B"),  # noqa: E501
    ("ocean", _mcq("Which is the largest ocean on Earth?", "Atlantic", "Indian", "Arctic", "Pacific"), "D", "D"),  # noqa: E501
    ("bone", _mcq("Which is the longest bone in the human body?", "Femur", "Tibia", "Humerus", "Radius"), "A", "A"),  # noqa: E501
    ("chess", _mcq("How many squares does a chessboard have?", "36", "49", "64", "81"), "C", "C"),
]  # fmt: skip
PROMPT = {r[0]: r[1] for r in ROWS}
NEAR = PROMPT["wrong"] + "\n\n"  # near-identical: same recorded answers (the replay strips), same topic
EXPLORE_RPM = 5  # the gateway-owned budget: the sixth exploration in a minute is refused
CLIENT_RPM = 100


@dataclass(frozen=True)
class Learning:
    urls: tuple[str, str]
    key: str
    other_key: str  # another org's (feedback teaches each org's own memory by default)
    strong_sim: str
    prior: dict[str, float]  # the router model's difficulty of each prompt (no memory)
    policy: Path
    redis: str


def _llmgw(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def _policy(sims: dict[str, str], cut: float, key: str, other: str) -> str:
    pools = "\n".join(
        f'  - {{name: {name}, model: {name}, endpoints: {{static: ["{url}"]}}, '
        f"price: {{input_per_mtok: {price}, output_per_mtok: {price}}}}}"
        for (name, url), price in zip(sims.items(), (0.2, 2.0), strict=True)
    )
    memory = "memory: {k: 8, blend_c: 1.0}"
    return f"""\
pools:
{pools}
models:
  - name: auto
    route:
      policy:
        tiers: [{{pool: {CHEAP}}}, {{pool: {STRONG}}}]
        difficulty: {{thresholds: [{cut}], {memory}}}
        explore: {{rate: 1.0, tier: explore, judge: agreement}}
  - name: auto-fb
    route:
      policy:
        tiers: [{{pool: {CHEAP}}}, {{pool: {STRONG}}}]
        difficulty: {{thresholds: [{cut}], {memory}}}
  - name: auto-cal
    route:
      policy:
        tiers: [{{pool: {CHEAP}}}, {{pool: {STRONG}}}]
        difficulty: {{target_strong_share: 0.3, calibration: {{window: 200, min_samples: 40}}}}
limits:
  tiers:
    standard: {{key: {{requests_per_min: {CLIENT_RPM}}}}}
    explore: {{org: {{requests_per_min: {EXPLORE_RPM}}}}}
tenancy:
  keys:
    - {{id: learner, sha256: {hash_key(key)}, org: acme, app: learning, tier: standard}}
    - {{id: bystander, sha256: {hash_key(other)}, org: globex, app: learning, tier: standard}}
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Learning]:
    tmp = tmp_path_factory.mktemp("router-learning")
    data = tmp / "dataset.jsonl"
    with data.open("w") as f:
        for rid, prompt, cheap, strong in ROWS:
            outcomes = {CHEAP: {"response": cheap}, STRONG: {"response": strong}}
            f.write(json.dumps({"id": rid, "prompt": prompt, "outcomes": outcomes}) + "\n")
        f.write(json.dumps({"id": "near", "prompt": NEAR, "outcomes": {}}) + "\n")
    scores = tmp / "scores.jsonl"
    _llmgw("router", "score", "--in", str(data), "--out", str(scores))
    prior = {r["id"]: float(r["difficulty"]) for r in map(json.loads, scores.open())}
    # The cut sits just above the wrong-answered prompt's prior: the prior alone routes it (and its
    # near twin) cheap, and only what the memory learnt can move it over.
    cut = round(max(prior["wrong"], prior["near"]) + 0.03, 6)
    assert all(p < cut for p in prior.values()), prior  # every prompt starts cheap on the prior alone
    key, other = generate_key(), generate_key()
    with Stack(tmp) as s:
        redis = s.redis(any_kind=True)
        sims = {}
        for name in (CHEAP, STRONG):
            extra = ("--profile", "instant", "--replay", str(data), "--replay-model", name)
            sims[name] = s.sim(name, *extra).url
        policy = tmp / "policy.yaml"
        policy.write_text(_policy(sims, cut, key, other))
        env = {"LLMGW_REDIS_URL": redis.url}
        gws = [s.gateway(policy, env=env, name=f"gw-{i}", ready=False) for i in range(2)]
        s.ready()  # the two replicas boot side by side
        yield Learning((gws[0].url, gws[1].url), key, other, sims[STRONG], prior, policy, redis.url)


def _ask(s: Learning, replica: int, model: str, prompt: str) -> tuple[str, dict[str, str], str]:
    return _client_ask(s, s.urls[replica], model, prompt)


def _client_ask(
    s: Learning, url: str, model: str, prompt: str, key: str | None = None
) -> tuple[str, dict[str, str], str]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key or s.key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=8, temperature=0
    )
    answer = raw.parse()
    return answer.choices[0].message.content or "", dict(raw.headers), answer.id


def _metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=10).text


def _wait(url: str, name: str, labels: str, value: float) -> float:
    """The metric once it reached `value` (the callers check it did not overshoot)."""
    got = [0.0]

    def reached() -> bool:
        got[0] = metric(_metrics(url), name, labels)
        return got[0] >= value

    wait_until(reached, lambda: f"{name}{{{labels}}} >= {value} (last {got[0]})", timeout=15, interval=0.05)
    return got[0]


def test_exploration_learns_in_the_background_under_the_gateway_budget(stack: Learning) -> None:
    gw = stack.urls[0]
    strong_before = metric(_metrics(stack.strong_sim), "vllm:request_success_total")
    judged = "llmgw_router_explore_total"
    # First prompts the cheap model answers right (their outcomes only lower difficulties) ...
    for i, rid in enumerate(("capital", "prime", "author", "ocean")):
        content, headers, _ = _ask(stack, 0, "auto", PROMPT[rid])
        assert (content, headers["x-llmgw-tier"]) == (ROWS[i + 1][2], CHEAP)
        if i == 0:  # an empty memory: the prior
            assert float(headers["x-llmgw-difficulty"]) == pytest.approx(stack.prior[rid], abs=1e-3)
        assert int(headers["x-ratelimit-remaining-requests"]) == CLIENT_RPM - 1 - i  # its own requests only
        assert _wait(gw, judged, 'outcome="judged"', 1 + i) == 1 + i
    # ... then one it gets wrong: the client gets the cheap (wrong) answer, never the strong one.
    content, headers, _ = _ask(stack, 0, "auto", PROMPT["wrong"])
    assert (content, headers["x-llmgw-tier"]) == ("A", CHEAP)
    assert _wait(gw, judged, 'outcome="judged"', 5) == 5
    text = _metrics(gw)
    assert metric(text, "llmgw_router_memory_learnt_total", 'source="explore"') == 5
    assert metric(text, "llmgw_router_explore_tokens_total", 'kind="answer"') > 0
    assert metric(text, "llmgw_router_explore_cost_usd_total") > 0
    # One background strong call per exploration, and nothing else reached the strong pool.
    assert metric(_metrics(stack.strong_sim), "vllm:request_success_total") - strong_before == 5
    # The live estimate: 1 of 5 explored cheap answers was not good enough, every request was cheap.
    assert metric(text, "llmgw_router_quality_share", 'bound="estimate"') == pytest.approx(0.8)
    assert metric(text, "llmgw_router_explore_samples") == 5

    # The learnt memory moves the near-identical prompt above the cut: the strong pool answers it.
    content, headers, _ = _ask(stack, 0, "auto", NEAR)
    assert float(headers["x-llmgw-difficulty"]) >= stack.prior["near"] + 0.03
    assert (content, headers["x-llmgw-tier"]) == ("C", STRONG)

    # The sixth exploration of the minute is refused by the gateway-owned budget; the client is not.
    _, headers, _ = _ask(stack, 0, "auto", PROMPT["bone"])
    assert headers["x-llmgw-tier"] == CHEAP
    assert _wait(gw, judged, 'outcome="budget"', 1) == 1
    assert metric(_metrics(gw), judged, 'outcome="judged"') == 5


def _rate_when_shared(s: Learning, replica: int, request_id: str, accepted: bool) -> httpx.Response:
    body = {"request_id": request_id, "accepted": accepted}
    headers = {"authorization": f"Bearer {s.key}"}
    resp: list[httpx.Response] = []

    def shared() -> bool:  # the serving replica flushes its delivery records every 50 ms
        resp[:] = [httpx.post(f"{s.urls[replica]}/v1/feedback", json=body, headers=headers, timeout=10)]
        return resp[0].status_code != 404

    wait_until(shared, lambda: f"the rating not to be 404: {resp[0].text}", timeout=5, interval=0.05)
    return resp[0]


def test_feedback_posted_to_another_replica_teaches_that_replica(stack: Learning) -> None:
    verdicts = {"wrong": False, "chess": True, "capital": True, "prime": True}
    for rid, accepted in verdicts.items():
        _, headers, _ = _ask(stack, 0, "auto-fb", PROMPT[rid])
        assert headers["x-llmgw-tier"] == CHEAP
        resp = _rate_when_shared(stack, 1, headers["x-request-id"], accepted)
        assert resp.status_code == 200, resp.text
    learnt = "llmgw_router_memory_learnt_total"
    assert metric(_metrics(stack.urls[1]), learnt, 'model="auto-fb",source="feedback"') == 4
    _, headers, _ = _ask(stack, 1, "auto-fb", NEAR)
    assert float(headers["x-llmgw-difficulty"]) >= stack.prior["near"] + 0.03
    assert headers["x-llmgw-tier"] == STRONG
    # Replica 0 got no feedback, but learns what replica 1 learnt through the outcome stream.
    assert metric(_metrics(stack.urls[0]), learnt, 'model="auto-fb",source="feedback"') == 0
    assert _wait(stack.urls[0], learnt, 'model="auto-fb",source="shared"', 4) == 4
    _, headers, _ = _ask(stack, 0, "auto-fb", NEAR)
    assert headers["x-llmgw-tier"] == STRONG
    # The ratings were acme's: another org's routing of the same prompt is untouched, on both replicas
    # (issue 39: one org's ratings moved another org's prompt from the cheap to the strong pool).
    for url in stack.urls:
        _, headers, _ = _client_ask(stack, url, "auto-fb", NEAR, key=stack.other_key)
        assert headers["x-llmgw-tier"] == CHEAP
        assert float(headers["x-llmgw-difficulty"]) == pytest.approx(stack.prior["near"], abs=1e-3)


def test_a_new_replica_starts_with_what_the_deployment_learnt(stack: Learning, tmp_path: Path) -> None:
    # Replica 1 explored nothing itself: every "auto" outcome it holds came from replica 0's stream.
    assert _wait(stack.urls[1], "llmgw_router_memory_learnt_total", 'model="auto",source="shared"', 5) == 5
    with Stack(tmp_path) as procs:
        url = procs.gateway(stack.policy, env={"LLMGW_REDIS_URL": stack.redis}, name="gw-new").url
        text = _metrics(url)
        assert metric(text, "llmgw_router_memory_outcomes", 'model="auto"') == 5  # read at start-up
        # acme's ratings are acme's memory's, not the alias's shared one; read at start-up all the same.
        assert metric(text, "llmgw_router_memory_outcomes", 'model="auto-fb"') == 0
        _, headers, _ = _client_ask(stack, url, "auto", NEAR)
        assert headers["x-llmgw-tier"] == STRONG
        _, headers, _ = _client_ask(stack, url, "auto-fb", NEAR)
        assert headers["x-llmgw-tier"] == STRONG
        _, headers, _ = _client_ask(stack, url, "auto-fb", NEAR, key=stack.other_key)
        assert headers["x-llmgw-tier"] == CHEAP


def test_an_idle_replica_routes_by_the_deployments_live_cut(stack: Learning) -> None:
    cut = "llmgw_router_live_cut"
    assert math.isnan(metric(_metrics(stack.urls[1]), cut, 'model="auto-cal"'))
    topics = ("rivers", "volcanoes", "tax law", "poetry", "compilers", "enzymes", "opera", "orbits")
    for i in range(60):  # replica 0 only
        _ask(stack, 0, "auto-cal", f"In two sentences, what is notable about {topics[i % 8]} (case {i})?")
    wait_until(
        lambda: not math.isnan(metric(_metrics(stack.urls[1]), cut, 'model="auto-cal"')),
        "replica 1's live cut of auto-cal",
        timeout=10,
        interval=0.1,
    )
    idle = metric(_metrics(stack.urls[1]), cut, 'model="auto-cal"')
    assert 0.0 <= idle <= 1.0  # the sketch of replica 0's traffic, merged through Redis
