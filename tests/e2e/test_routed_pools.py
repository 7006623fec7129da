"""A routed alias stays inside the pools a key may use (issue 24, item 6), through the real gateway.

Two simulated pools (small, large) behind `auto`, whose start tier comes from the shipped difficulty
model: hard prompts start at large. The red-team key was allowed `[auto, small]`, refused `large`
directly, and still got 2 of 12 `auto` prompts answered by large. Here keys are made with
`llmgw keys create --models ... --pools small --limits ...` against the gateway's admin API: every
hard prompt to `auto` is answered by the small pool (`x-llmgw-tier`, and the large simulator counts no
request), while an unrestricted key's same prompts go to large; a direct alias on a pool the key may
not use is a 403 naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from gateway.tenancy.keys import generate_key
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

ADMIN = "adm-" + generate_key()
HARD = [
    "Prove that there are infinitely many primes p such that p+2 is also prime, or explain precisely why "
    "this remains open, citing the Bombieri-Vinogradov theorem and Zhang's bounded gaps result.",
    "Derive the closed form of the Fourier transform of exp(-a x^2) cos(b x) and use it to evaluate the "
    "integral of exp(-x^2) cos(2x) over the real line, showing every step.",
    "A 3 kg block slides down a 30 degree incline with kinetic friction coefficient 0.2 and then "
    "compresses a spring of constant 400 N/m; compute the maximum compression, accounting for friction "
    "along the 2 m path.",
]
# The shipped model scores these prompts 0.30-0.83 and "hi" 0.09 on one CPU, and 0.23-0.82 and 0.07
# on an AVX2-only AMD EPYC (no VNNI, no AVX-512; the int8 encoder's kernels differ by CPU): the cut
# sits clear of both.
CUT = 0.15


@dataclass(frozen=True)
class Routed:
    url: str
    sims: dict[str, str]


def create_key(url: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "keys", "create", "--url", url, "--org", "acme", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "LLMGW_ADMIN_KEY": ADMIN},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[0]


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Routed]:
    tmp = tmp_path_factory.mktemp("routed-pools")
    ports = {"small": free_port(), "large": free_port()}
    sims = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: small, model: sim-small, endpoints: {{static: ["{sims["small"]}"]}}}}
  - {{name: large, model: sim-large, endpoints: {{static: ["{sims["large"]}"]}}}}
models:
  - {{name: small, route: {{pool: small}}, max_tokens: {{default: 8, cap: 16}}}}
  - {{name: large, route: {{pool: large}}, max_tokens: {{default: 8, cap: 16}}}}
  - name: auto
    max_tokens: {{default: 8, cap: 16}}
    route: {{policy: {{tiers: [{{pool: small}}, {{pool: large}}], difficulty: {{thresholds: [{CUT}]}}}}}}
"""
    )
    with Stack(tmp) as s:
        for name, port in ports.items():
            s.sim(f"sim-{name}", "--profile", "instant", port=port, ready=False)
        gw = s.gateway(policy, env={"LLMGW_ADMIN_KEY": ADMIN}, name="gw")
        yield Routed(gw.url, sims)


def ask(url: str, key: str, model: str, prompt: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": prompt}]},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def large_requests(routed: Routed) -> float:
    text = httpx.get(f"{routed.sims['large']}/metrics", timeout=5).text
    return metric(text, "vllm:request_success_total")


def test_hard_prompts_from_a_small_only_key_stay_on_the_small_pool(routed: Routed) -> None:
    url = routed.url
    free = create_key(url, "--app", "free")
    small_only = create_key(
        url,
        "--app",
        "capped",
        "--models",
        "auto,small",
        "--pools",
        "small",
        "--limits",
        "tokens_per_min=100000",
    )
    unrestricted = [ask(url, free, "auto", p).headers.get("x-llmgw-tier") for p in HARD * 2]
    before = large_requests(routed)
    answers = [ask(url, small_only, "auto", p) for p in HARD * 4]
    after = large_requests(routed)
    tiers = [r.headers.get("x-llmgw-tier") for r in answers]
    print(
        f"\n[routed pools] unrestricted key: {unrestricted.count('large')}/{len(unrestricted)} hard prompts "
        f"answered by large; small-only key: {tiers.count('small')}/{len(tiers)} by small, large simulator "
        f"+{after - before:g} requests"
    )
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200][:2]
    assert unrestricted == ["large"] * len(unrestricted)  # the prompts are hard: not a vacuous test
    assert tiers == ["small"] * len(tiers)
    assert before >= len(unrestricted) and after == before  # the counter counts (the control went there)
    direct = ask(url, small_only, "large", "hi")
    assert direct.status_code == 403 and direct.json()["error"]["code"] == "model_not_allowed"


def test_a_direct_alias_on_a_pool_the_key_may_not_use_is_403(routed: Routed) -> None:
    key = create_key(routed.url, "--app", "pools-only", "--pools", "small")
    resp = ask(routed.url, key, "large", "hi")
    assert resp.status_code == 403, resp.text
    error = resp.json()["error"]
    assert error["code"] == "pool_not_allowed" and "'large'" in error["message"] and error["param"] == "model"
    assert ask(routed.url, key, "small", "hi").status_code == 200
    assert ask(routed.url, key, "auto", HARD[0]).headers.get("x-llmgw-tier") == "small"


def test_the_model_list_shows_only_aliases_a_pool_the_key_may_use_serves(routed: Routed) -> None:
    key = create_key(routed.url, "--app", "pools-list", "--pools", "small")
    listed = httpx.get(f"{routed.url}/v1/models", headers={"authorization": f"Bearer {key}"}, timeout=10)
    assert listed.status_code == 200, listed.text
    assert sorted(m["id"] for m in listed.json()["data"]) == ["auto", "small"]  # not `large`
