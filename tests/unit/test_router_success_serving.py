"""The success predictor served on the difficulty model's thread, and a `success` alias's start-up checks
(artifact written here, with the live encoder's identity)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.config import ConfigError, Policy
from gateway.routing.aliases import build_routed
from router.artifact_error import RouterArtifactError
from router.difficulty import DifficultyModel, SuccessScorer
from router.encoder import EncoderIdentity
from router.success import SuccessModel, write_success_model

pytestmark = pytest.mark.needs_encoder

MODELS = ("small-model", "mid-model", "big-model")


@pytest.fixture(scope="module")
def model() -> Iterator[DifficultyModel]:
    m = DifficultyModel.load(max_batch=4)
    yield m
    m.close()


def _artifact(root: Path, identity: EncoderIdentity) -> Path:
    rng = np.random.default_rng(5)
    d, k = identity.dim, 4
    predictor = SuccessModel.from_arrays(
        MODELS,
        mean=np.zeros(d),
        basis=rng.normal(size=(d, k)),
        loadings=rng.normal(size=(len(MODELS), k)),
        ability=np.asarray([-0.5, 0.5, 1.5]),
        encoder=identity,
        max_tokens=32,
    )
    return write_success_model(root, predictor, identity, {"training": {"files": []}})


async def test_success_and_difficulty_requests_share_the_thread_and_keep_their_own_results(
    model: DifficultyModel, tmp_path: Path
) -> None:
    scorer = SuccessScorer.load(model, _artifact(tmp_path / "s", model.encoder.identity))
    texts = [f"question number {i}: what is {i} + {i}?" for i in range(6)]
    expected = scorer.assess_many(texts)
    # Interleaved on one batcher (batches of up to 4): each batch runs one kind's function only.
    jobs: list[Any] = []
    for t in texts:
        jobs += [scorer.assess(t), model.assess(t)]
    got = await asyncio.gather(*jobs)
    for i, t in enumerate(texts):
        probs, emb = got[2 * i]
        difficulty, _ = got[2 * i + 1]
        assert probs.shape == (len(MODELS),) and np.all((probs > 0) & (probs < 1))
        np.testing.assert_allclose(probs, expected[i][0], atol=1e-6)
        assert isinstance(difficulty, float) and difficulty == model.score_sync(t)
        assert emb.shape == (model.encoder.identity.dim,)


def test_a_predictor_trained_on_another_encoder_is_refused(model: DifficultyModel, tmp_path: Path) -> None:
    other = dataclasses.replace(model.encoder.identity, model_sha256="0" * 64)
    with pytest.raises(RouterArtifactError, match="trained on encoder"):
        SuccessScorer.load(model, _artifact(tmp_path / "s", other))


def _policy(artifact: Path, likes: list[str], prices: list[float] | None = None, **success: Any) -> Policy:
    pools = []
    for i in range(len(likes)):
        pool: dict[str, Any] = {
            "name": f"p{i}",
            "engine": "openai",
            "model": f"m{i}",
            "endpoints": {"static": [f"http://p{i}.test:8000"]},
        }
        if prices is not None:
            pool["price"] = {"input_per_mtok": prices[i], "output_per_mtok": prices[i]}
        pools.append(pool)
    return Policy.model_validate(
        {
            "pools": pools,
            "models": [
                {
                    "name": "auto",
                    "route": {
                        "policy": {
                            "tiers": [{"pool": f"p{i}", "like": like} for i, like in enumerate(likes)],
                            "success": {"model": str(artifact), **success},
                        }
                    },
                }
            ],
            "tenancy": {"auth": "disabled"},
        }
    )


def test_start_up_maps_each_tier_to_its_models_column(model: DifficultyModel, tmp_path: Path) -> None:
    root = _artifact(tmp_path / "s", model.encoder.identity)
    routed = build_routed(_policy(root, ["big-model", "small-model"]), logging.getLogger("t"))
    ra = routed["auto"]
    assert ra.success is not None and ra.columns == (2, 0) and ra.fallback is None
    planned = asyncio.run(ra.plan([{"role": "user", "content": "hello"}], None, (), False))
    assert planned.success is not None and len(planned.success) == 2
    assert ra.difficulty is not None
    ra.difficulty.close()


def test_a_tier_like_a_model_the_predictor_does_not_know_stops_start_up(
    model: DifficultyModel, tmp_path: Path
) -> None:
    root = _artifact(tmp_path / "s", model.encoder.identity)
    # Even with a fallback allowed: the file names a model that does not exist, which is not an outage.
    policy = _policy(root, ["small-model", "gpt-9"], on_unavailable="fallback")
    with pytest.raises(ConfigError, match=r"tiers: .*\['gpt-9'\].*it knows \['small-model'"):
        build_routed(policy, logging.getLogger("t"))


def test_pool_prices_out_of_order_stop_start_up(model: DifficultyModel, tmp_path: Path) -> None:
    root = _artifact(tmp_path / "s", model.encoder.identity)
    with pytest.raises(ConfigError, match="ordered cheap -> strong"):
        build_routed(_policy(root, ["small-model", "big-model"], prices=[5.0, 1.0]), logging.getLogger("t"))


def test_a_missing_predictor_refuses_or_falls_back_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "nothing"
    with pytest.raises(ConfigError, match=r"success: the success predictor cannot be loaded"):
        build_routed(_policy(missing, ["a", "b"]), logging.getLogger("t"))
    with caplog.at_level(logging.WARNING, logger="t"):
        routed = build_routed(_policy(missing, ["a", "b"], on_unavailable="fallback"), logging.getLogger("t"))
    assert routed["auto"].fallback is not None and "success predictor unavailable" in caplog.text
    planned = asyncio.run(routed["auto"].plan([{"role": "user", "content": "x"}], None, (), False))
    assert planned.plan.start_tier == 0 and "no_success" in planned.plan.notes
