"""The fine-tuned encoder's committed delta (eval/routing/encoder_delta.py) and its provenance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from eval.routing import encoder_delta
from eval.routing.encoder_delta import DeltaError, EncoderDelta
from eval.routing.train import cv_caveat
from router.artifact import sha256_file
from router.encoder import ENCODER_MANIFEST, ROUTER_LAYERS, Encoder

META = {"base_weights_sha256": "b" * 64, "layers": 3}


def _weights(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    base = {
        "embeddings.word_embeddings.weight": rng.normal(size=(50, 16)),
        "encoder.layer.0.attention.self.query.weight": rng.normal(size=(16, 16)),
        "encoder.layer.0.intermediate.dense.weight": rng.normal(size=(64, 16)),
        "encoder.layer.0.output.LayerNorm.bias": rng.normal(size=16),
    }
    # A change of rank 4 with decreasing singular values, on one matrix; a full-rank one on the other.
    u, _ = np.linalg.qr(rng.normal(size=(16, 4)))
    v, _ = np.linalg.qr(rng.normal(size=(16, 4)))
    svals = np.array([0.4, 0.2, 0.1, 0.05])
    tuned = dict(base)
    tuned["encoder.layer.0.attention.self.query.weight"] = (
        base["encoder.layer.0.attention.self.query.weight"] + (u * svals) @ v.T
    )
    tuned["encoder.layer.0.intermediate.dense.weight"] = base["encoder.layer.0.intermediate.dense.weight"] + (
        0.01 * rng.normal(size=(64, 16))
    )
    tuned["encoder.layer.0.output.LayerNorm.bias"] = base["encoder.layer.0.output.LayerNorm.bias"] + 0.003
    return base, tuned, svals


def test_a_delta_of_full_rank_reproduces_the_tuned_weights_and_skips_frozen_ones() -> None:
    base, tuned, _ = _weights()
    delta = encoder_delta.compress(base, tuned, rank=64, meta=META)
    assert not any(k.startswith("embeddings.") for k in delta.arrays)  # unchanged: not stored
    merged = encoder_delta.apply_to(base, delta)
    for name in tuned:
        assert np.allclose(merged[name], tuned[name], atol=2e-4), name  # float16 factors
    assert delta.meta["rank"] == 64 and delta.layers == 3


def test_a_truncated_delta_keeps_the_largest_directions() -> None:
    base, tuned, svals = _weights()
    name = "encoder.layer.0.attention.self.query.weight"
    for rank in (1, 2, 3, 4):
        merged = encoder_delta.apply_to(base, encoder_delta.compress(base, tuned, rank=rank, meta=META))
        error = np.linalg.norm(merged[name] - tuned[name])
        # Eckart-Young: the best rank-r approximation misses exactly the smaller singular values.
        assert error == pytest.approx(np.sqrt((svals[rank:] ** 2).sum()), abs=1e-3)
    # Vectors are stored whole whatever the rank.
    bias = "encoder.layer.0.output.LayerNorm.bias"
    one = encoder_delta.apply_to(base, encoder_delta.compress(base, tuned, rank=1, meta=META))
    assert np.allclose(one[bias], tuned[bias], atol=1e-6)
    with pytest.raises(DeltaError, match="rank"):
        encoder_delta.compress(base, tuned, rank=0, meta=META)


def test_save_and_load_round_trip_and_refusals(tmp_path: Path) -> None:
    base, tuned, _ = _weights()
    delta = encoder_delta.compress(base, tuned, rank=2, meta=META)
    path = tmp_path / "d.npz"
    encoder_delta.save(delta, path)
    back = encoder_delta.load(path, base_sha256="b" * 64, layers=3)
    assert dict(back.meta) == dict(delta.meta)
    assert set(back.arrays) == set(delta.arrays)
    assert all(np.array_equal(back.arrays[k], delta.arrays[k]) for k in delta.arrays)

    with pytest.raises(DeltaError, match="base weights"):
        encoder_delta.load(path, base_sha256="c" * 64)
    with pytest.raises(DeltaError, match="3 layers"):
        encoder_delta.load(path, layers=6)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(DeltaError, match="garbage.npz"):
        encoder_delta.load(garbage)
    with pytest.raises(DeltaError, match="No such file"):
        encoder_delta.load(tmp_path / "missing.npz")
    # A factor without its partner (a truncated or hand-edited file) is refused when read.
    lonely = tmp_path / "lonely.npz"
    encoder_delta.save(EncoderDelta(arrays={"x.weight:a": np.zeros((2, 1))}, meta=META), lonely)
    with pytest.raises(DeltaError, match="x.weight:a"):
        encoder_delta.load(lonely)


def test_applying_a_delta_for_another_model_is_refused() -> None:
    base, tuned, _ = _weights()
    delta = encoder_delta.compress(base, tuned, rank=2, meta=META)
    other = {k: v for k, v in base.items() if "query" not in k}
    with pytest.raises(DeltaError, match="query"):
        encoder_delta.apply_to(other, delta)
    wrong = {**base, "encoder.layer.0.output.LayerNorm.bias": np.zeros(8)}
    with pytest.raises(DeltaError, match="shape"):
        encoder_delta.apply_to(wrong, delta)


@pytest.mark.needs_encoder
def test_the_committed_delta_is_the_one_the_built_encoder_carries() -> None:
    # `make router-encoder` merges eval/routing/deltas/ into the router variant: a stale build (delta
    # changed, encoder not re-exported) would serve other weights than the artifact's head expects.
    path = encoder_delta.DEFAULT_DELTA
    delta = encoder_delta.load(path, layers=ROUTER_LAYERS)
    assert path.stat().st_size < 2_000_000
    assert delta.meta["rank"] >= 1 and delta.meta["rows"] > 10_000
    assert not any(k.startswith("embeddings.") for k in delta.arrays)
    enc = Encoder.load(layers=ROUTER_LAYERS)
    recorded = json.loads((enc.path / ENCODER_MANIFEST).read_text())["variants"][str(ROUTER_LAYERS)]["delta"]
    assert recorded["sha256"] == sha256_file(path)
    assert recorded["rank"] == delta.meta["rank"]


def test_cv_caveat_names_the_files_the_encoder_was_tuned_on(tmp_path: Path) -> None:
    seen, unseen = tmp_path / "seen.jsonl", tmp_path / "unseen.jsonl"
    seen.write_text("a\n")
    unseen.write_text("b\n")
    delta = {"file": "d.npz", "data": [{"file": "seen.jsonl", "sha256": sha256_file(seen)}]}
    note = cv_caveat(delta, [seen, unseen])
    assert note is not None and "seen.jsonl" in note and "unseen.jsonl" not in note and "optimistic" in note
    assert "measured there" not in note  # no honest figures recorded: none are invented
    honest = {**delta, "cv": {"id": 0.61234, "task": 0.55}}
    assert "id-CV 0.6123, task-CV 0.5500" in (cv_caveat(honest, [seen]) or "")
    assert "for this recipe" in (cv_caveat(honest, [seen]) or "")
    # The delta's honest figures were measured without extra pair rows: a head trained with them says so.
    with_pairs = cv_caveat(honest, [seen], [unseen]) or ""
    assert "without the --pair-data rows" in with_pairs and "id-CV 0.6123" in with_pairs
    # ... and when they were measured with the same pair files, they are this recipe's.
    paired = {
        **delta,
        "cv": {**honest["cv"], "pair_data": [{"file": "unseen.jsonl", "sha256": sha256_file(unseen)}]},
    }
    assert "for this recipe" in (cv_caveat(paired, [seen], [unseen]) or "")
    assert "with other --pair-data rows" in (cv_caveat(paired, [seen]) or "")
    assert cv_caveat(delta, [unseen]) is None
    assert cv_caveat(None, [seen]) is None
