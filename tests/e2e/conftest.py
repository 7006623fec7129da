"""The real stack for e2e tests: two simulators and a gateway, each its own process."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack


@dataclass(frozen=True)
class SharedStack:
    gateway: str
    sims: dict[str, str]  # pool name -> base URL
    api_key: str  # a tenant key declared (hashed) in the policy

    def sim_metric(self, pool: str, name: str, labels: str = "") -> float:
        """Sum of a simulator metric's samples (optionally only those whose labels contain `labels`)."""
        return metric(httpx.get(f"{self.sims[pool]}/metrics", timeout=5).text, name, labels)


MAX_BODY = 65536


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    tmp = tmp_path_factory.mktemp("e2e")
    ports = {"small": free_port(), "large": free_port(), "slow": free_port()}
    gw_port = free_port()
    sims = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    api_key = generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - name: small
    model: sim-small
    endpoints: {{static: ["{sims["small"]}"]}}
    serves: [chat, completions, embeddings]
  - name: large
    model: sim-large
    endpoints: {{static: ["{sims["large"]}"]}}
  - name: slow
    model: sim-slow
    endpoints: {{static: ["{sims["slow"]}"]}}
models:
  - {{name: small, route: {{pool: small}}, max_tokens: {{default: 24, cap: 64}}}}
  - {{name: large, route: {{pool: large}}, max_tokens: {{default: 24, cap: 64}}}}
  - {{name: slow, route: {{pool: slow}}, max_tokens: {{default: 2000, cap: 4000}}}}
tenancy:
  keys:
    - {{id: e2e, sha256: {hash_key(api_key)}, org: acme, app: e2e}}
"""
    )
    sim_extra = {
        "small": ["--profile", "small"],
        "large": ["--profile", "large"],
        # 50 ms per decode step: a stream that lasts long enough to walk away from.
        "slow": [
            "--profile",
            "instant",
            "--step-base-ms",
            "50",
            "--output-len-mean",
            "2000",
            "--output-len-sigma",
            "0",
        ],
    }
    with Stack(tmp) as s:
        for name, port in ports.items():
            s.sim(f"sim-{name}", *sim_extra[name], port=port, ready=False)
        gw = s.gateway(policy, port=gw_port, env={"LLMGW_MAX_BODY_BYTES": str(MAX_BODY)})
        yield SharedStack(gateway=gw.url, sims=sims, api_key=api_key)


@pytest.fixture(scope="session")
def base_url(stack: SharedStack) -> str:
    return f"{stack.gateway}/v1"


@pytest.fixture(scope="session")
def _tmp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp()
