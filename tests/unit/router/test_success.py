"""The success predictor's serving side: the math of `predict`, its interface, and artifact faults."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from router.artifact_error import RouterArtifactError
from router.encoder import EncoderIdentity
from router.success import ARRAYS_FILE, MANIFEST, SuccessModel, load_success_model, write_success_model

DIM = 6


def _identity(probe: tuple[float, ...] | None = None) -> EncoderIdentity:
    return EncoderIdentity(
        name="test-encoder",
        source_package="pkg",
        source_version="1",
        recipe_version=1,
        model_sha256="ab" * 32,
        dim=DIM,
        probe_embedding=probe or tuple(float(i + 1) for i in range(DIM)),
        layers=3,
    )


def _model() -> SuccessModel:
    rng = np.random.default_rng(1)
    return SuccessModel.from_arrays(
        ["weak", "strong", "mid"],
        mean=rng.normal(size=DIM) * 0.1,
        basis=rng.normal(size=(DIM, 2)),
        loadings=[[1.0, 0.0], [0.0, -2.0], [0.5, 0.5]],
        ability=[-0.5, 1.5, 0.2],
    )


def _unit_rows(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def test_predict_is_the_sigmoid_of_ability_plus_loadings_dot_latent() -> None:
    model = _model()
    emb = _unit_rows(4)
    z = (emb.astype(np.float64) - model.mean) @ model.basis.astype(np.float64)
    expected = 1.0 / (1.0 + np.exp(-(z @ model.loadings.T.astype(np.float64) + model.ability)))
    got = model.predict(emb, ["a"] * 4)
    assert got.shape == (4, 3)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_predict_stays_in_unit_interval_for_huge_logits() -> None:
    model = SuccessModel.from_arrays(
        ["a", "b"], mean=np.zeros(DIM), basis=np.eye(DIM)[:, :1], loadings=[[1e4], [-1e4]], ability=[0, 0]
    )
    with np.errstate(over="raise", invalid="raise"):  # no overflow or NaN on the way
        p = model.predict(_unit_rows(3), ["x"] * 3)
    assert np.all((p >= 0) & (p <= 1)) and np.all(np.isfinite(p))
    assert np.allclose(p[:, 0] + p[:, 1], 1.0)


def test_index_is_the_column_and_unknown_names_raise() -> None:
    model = _model()
    assert model.models == ("weak", "strong", "mid")
    assert [model.index(m) for m in model.models] == [0, 1, 2]
    with pytest.raises(KeyError):
        model.index("absent")


def test_from_arrays_rejects_inconsistent_shapes_and_repeated_names() -> None:
    with pytest.raises(ValueError, match="shapes disagree"):
        SuccessModel.from_arrays(
            ["a"], mean=np.zeros(DIM), basis=np.zeros((DIM, 2)), loadings=[[0, 0], [0, 0]], ability=[0, 0]
        )
    with pytest.raises(ValueError, match="unique"):
        SuccessModel.from_arrays(
            ["a", "a"], mean=np.zeros(DIM), basis=np.zeros((DIM, 1)), loadings=[[0], [0]], ability=[0, 0]
        )


def test_predict_rejects_embeddings_of_another_width() -> None:
    with pytest.raises(ValueError, match=r"\(n, 6\)"):
        _model().predict(np.zeros((1, DIM + 1), dtype=np.float32), ["x"])


def test_write_then_load_round_trips_predictions(tmp_path: Path) -> None:
    model = _model()
    root = write_success_model(tmp_path / "art", model, _identity(), {"training": {"rows": 3}})
    loaded = load_success_model(root)
    emb = _unit_rows(5)
    np.testing.assert_allclose(loaded.predict(emb, ["x"] * 5), model.predict(emb, ["x"] * 5), rtol=1e-6)
    assert loaded.models == model.models
    assert loaded.manifest["training"] == {"rows": 3}
    assert loaded.encoder == _identity()


def _written(tmp_path: Path) -> Path:
    return write_success_model(tmp_path / "art", _model(), _identity(), {})


def test_load_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(RouterArtifactError, match="does not exist") as err:
        load_success_model(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(err.value)


def test_load_refuses_a_replaced_arrays_file(tmp_path: Path) -> None:
    root = _written(tmp_path)
    np.savez_compressed(root / ARRAYS_FILE, mean=np.zeros(DIM))
    with pytest.raises(RouterArtifactError, match="corrupt or was replaced") as err:
        load_success_model(root)
    assert str(root) in str(err.value)


def test_load_refuses_a_manifest_of_another_format(tmp_path: Path) -> None:
    root = _written(tmp_path)
    manifest = json.loads((root / MANIFEST).read_text())
    (root / MANIFEST).write_text(json.dumps({**manifest, "format": "llmgw-router-difficulty"}))
    with pytest.raises(RouterArtifactError, match="format"):
        load_success_model(root)


def test_load_refuses_model_names_that_do_not_match_the_arrays(tmp_path: Path) -> None:
    root = _written(tmp_path)
    manifest = json.loads((root / MANIFEST).read_text())
    (root / MANIFEST).write_text(json.dumps({**manifest, "models": ["only-one"]}))
    with pytest.raises(RouterArtifactError, match="does not match the manifest"):
        load_success_model(root)


def test_load_refuses_non_finite_weights(tmp_path: Path) -> None:
    bad = _model()
    bad.loadings[0, 0] = np.nan
    root = write_success_model(tmp_path / "art", bad, _identity(), {})
    with pytest.raises(RouterArtifactError, match="non-finite"):
        load_success_model(root)


def test_load_refuses_arrays_for_another_encoder_width(tmp_path: Path) -> None:
    wide = _identity()
    wide = EncoderIdentity(**{**wide.to_json(), "dim": DIM + 1, "probe_embedding": (0.0,) * (DIM + 1)})
    root = write_success_model(tmp_path / "art", _model(), wide, {})
    with pytest.raises(RouterArtifactError, match="6-d embeddings"):
        load_success_model(root)


def test_check_encoder_accepts_the_trained_encoder_and_refuses_others(tmp_path: Path) -> None:
    loaded = load_success_model(_written(tmp_path))
    loaded.check_encoder(_identity())
    other_file = EncoderIdentity(**{**_identity().to_json(), "model_sha256": "cd" * 32})
    with pytest.raises(RouterArtifactError, match="trained on encoder"):
        loaded.check_encoder(other_file)
    drifted = tuple(-x for x in _identity().probe_embedding)
    with pytest.raises(RouterArtifactError, match="probe embedding"):
        loaded.check_encoder(_identity(), live_probe=drifted)


def test_the_shipped_artifact_loads_and_predicts_every_model() -> None:
    model = load_success_model()
    p = model.predict(np.zeros((1, model.dim), dtype=np.float32), [""])
    assert p.shape == (1, len(model.models)) and np.all((p > 0) & (p < 1))
    assert model.manifest["training"]["files"], "the artifact records what it was trained on"


def test_index_accepts_any_letter_case_and_declared_aliases(tmp_path: Path) -> None:
    base = _model()
    model = SuccessModel.from_arrays(
        base.models,
        mean=base.mean,
        basis=base.basis,
        loadings=base.loadings,
        ability=base.ability,
        aliases={"weak-chat": "weak"},
    )
    assert model.index("STRONG") == 1 and model.index("Weak-Chat") == 0
    loaded = load_success_model(write_success_model(tmp_path / "a", model, _identity(), {}))
    assert loaded.index("weak-chat") == 0
    with pytest.raises(ValueError, match="not a trained model"):
        SuccessModel.from_arrays(
            base.models,
            mean=base.mean,
            basis=base.basis,
            loadings=base.loadings,
            ability=base.ability,
            aliases={"x": "absent"},
        )
