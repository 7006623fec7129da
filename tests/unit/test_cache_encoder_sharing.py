"""Which encoder the semantic cache gets when a routed alias already loaded the difficulty model.

The router serves the 3-layer variant of MiniLM (docs/design/008, "Encoder depth"); the cache's
threshold was fitted on the full model's cosine, so it must get the full model, on the router's one
inference thread (one core for both, as before). Needs the encoder `make install` builds.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.config import parse_policy
from gateway.observability.metrics import Metrics
from gateway.relay.response_cache import build_cache
from gateway.routing.aliases import build_routed
from gateway.settings import Settings
from router.encoder import FULL_LAYERS

pytestmark = pytest.mark.needs_encoder  # the router's built encoder (tests/unit/conftest.py)

POLICY = """\
pools:
  - {name: small, model: small, endpoints: {static: ["http://127.0.0.1:9"]}}
  - {name: large, model: large, endpoints: {static: ["http://127.0.0.1:9"]}}
models:
  - name: small
    route: {pool: small}
    cache: {default: deterministic, ttl_s: 60, semantic: {enabled: true, ttl_s: 60}}
  - name: auto
    route:
      policy:
        tiers: [{pool: small}, {pool: large}]
        difficulty: {target_strong_share: 0.3}
cache: {backend: memory}
"""


def test_the_cache_embeds_with_the_full_model_on_the_routers_thread() -> None:
    policy = parse_policy(POLICY, "test.yaml")
    routed = build_routed(policy, logging.getLogger("test"))
    router = routed["auto"].difficulty
    assert router is not None and router.encoder.identity.layers == 3
    cache = build_cache(policy, Settings(), Metrics(policy), routed)
    try:
        assert cache is not None
        question = cache._embedder  # the QuestionEmbedder build_cache made
        assert question is not None
        encoder = question.encoder  # type: ignore[attr-defined]
        assert encoder.identity.layers == FULL_LAYERS and encoder is not router.encoder
        assert question._executor is router.executor  # type: ignore[attr-defined]
    finally:
        if cache is not None:
            asyncio.run(cache.close())
        router.close()
