"""No client-controlled string becomes a metric label (issue 25): random model names, header names and
values, paths and methods, with and without a valid key, against a real gateway with the response cache
on. After a warm-up of each kind of request (the bounded series they create: status codes, the unknown
alias), 1,000 more random requests add no series at all."""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.procs import free_port
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp: Path = tmp_path_factory.mktemp("cardinality")
    sim_port, gw_port = free_port(), free_port()
    key = generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - name: p
    model: m
    endpoints: {{static: ["http://127.0.0.1:{sim_port}"]}}
    serves: [chat, completions, embeddings]
models:
  - name: small
    route: {{pool: p}}
    max_tokens: {{default: 4, cap: 8}}
    cache: {{default: deterministic, ttl_s: 30}}
tenancy:
  keys:
    - {{id: k, sha256: {hash_key(key)}, org: acme, app: one}}
"""
    )
    with Stack(tmp) as s:
        s.sim("m", "--profile", "instant", port=sim_port)
        yield s.gateway(policy, port=gw_port, name="gw").url, key


def _series(gw: str) -> tuple[set[str], int]:
    text = httpx.get(f"{gw}/metrics", timeout=10).text
    series = {line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
    # Counters' `_created` samples carry the same labels as their series; histograms' buckets too.
    return series, len(text)


def _word(rnd: random.Random, n: int, alphabet: str = string.ascii_letters + string.digits + "-_./") -> str:
    return "".join(rnd.choices(alphabet, k=n))


def _hostile(client: httpx.Client, gw: str, key: str, rnd: random.Random) -> None:
    auth = {"Authorization": f"Bearer {key}"} if rnd.random() < 0.7 else {}
    extra = {f"X-{_word(rnd, 12, string.ascii_letters + '-')}": _word(rnd, 40)}
    kind = rnd.randrange(6)
    if kind == 0:  # an unknown model, long
        body = {"model": _word(rnd, 2000), "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
        client.post(f"{gw}/v1/chat/completions", json=body, headers={**auth, **extra})
    elif kind == 1:  # a known model, a random other field
        body = {"model": "small", "messages": [{"role": "user", "content": _word(rnd, 20)}], "temperature": 0}
        client.post(f"{gw}/v1/chat/completions", json=body, headers={**auth, **extra, "x-llmgw-cache": "on"})
    elif kind == 2:  # completions and embeddings with an unknown model
        path = rnd.choice(["/v1/completions", "/v1/embeddings"])
        client.post(f"{gw}{path}", json={"model": _word(rnd, 300), "prompt": "x", "input": "x"}, headers=auth)
    elif kind == 3:  # a random path
        client.request(rnd.choice(["GET", "POST", "PUT", "DELETE"]), f"{gw}/{_word(rnd, 60)}", headers=auth)
    elif kind == 4:  # a malformed body
        client.post(f"{gw}/v1/chat/completions", content=_word(rnd, 100), headers=auth)
    else:  # a random feedback target and model retrieval
        client.get(f"{gw}/v1/models/{_word(rnd, 80)}", headers=auth)


def test_random_client_strings_add_no_series(gateway: tuple[str, str]) -> None:
    gw, key = gateway
    rnd = random.Random(25)
    with httpx.Client(timeout=10) as client:
        for _ in range(300):  # warm-up: every kind of request, every status they can get
            _hostile(client, gw, key, rnd)
        before, size_before = _series(gw)
        for _ in range(1000):
            _hostile(client, gw, key, rnd)
        after, size_after = _series(gw)
    grown = sorted(after - before)
    print(
        f"\n/metrics after 300 random requests: {size_before:,} B, {len(before)} series; "
        f"after 1,000 more: {size_after:,} B, {len(after)} series"
    )
    assert not grown, f"{len(grown)} new series, e.g. {grown[:3]}"
    assert max(len(s) for s in after) < 400  # no 2 KB model name in a label
