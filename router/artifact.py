"""The difficulty model artifact: a directory with `manifest.json` and `head.npz`.

    manifest.json   format + format_version; encoder identity (source package/version, recipe version,
                    probe embedding); input rule (view, token budget); head layout (component kinds,
                    params, standardization, weights) and the sha256 of head.npz; calibration
                    (strong share -> difficulty threshold); training provenance (data files with sha256,
                    row counts, strong/weak pair, hyper-parameters) and the cross-validated metrics
    head.npz        the components' arrays and the calibration curve (no pickles: `allow_pickle=False`)

Loading validates everything it reads and raises `RouterArtifactError` naming the path and the fault;
a gateway must never route on a half-read model. The encoder check (probe embedding) happens in
router/difficulty.py, where the encoder is opened.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from router.artifact_error import RouterArtifactError
from router.encoder import EncoderIdentity
from router.head import COMPONENT_TYPES, Component, Head

FORMAT = "llmgw-router-difficulty"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HEAD_FILE = "head.npz"
VIEW = "last-user-turn-tail"


def default_artifact_dir() -> Path:
    return Path(__file__).resolve().parent / "artifacts" / "default"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Artifact:
    path: Path
    manifest: Mapping[str, Any]
    encoder: EncoderIdentity
    max_tokens: int
    head: Head
    thresholds: Mapping[float, float]
    head_sha256: str

    @property
    def identity(self) -> str:
        name = self.manifest.get("name", self.path.name)
        head = f"{name}@v{FORMAT_VERSION}:{self.head_sha256[:12]}"
        return f"{head} ({self.encoder.describe()}, {self.max_tokens} tokens)"


def _fail(path: Path, what: str) -> RouterArtifactError:
    return RouterArtifactError(f"router artifact {path}: {what}")


def read_manifest(root: Path, fmt: str, version: int, kind: str = "router artifact") -> dict[str, Any]:
    """The JSON object in `root`/manifest.json, of format `fmt` at `version`; any fault is a
    RouterArtifactError starting with `kind` and the path (the success predictor's artifact too)."""

    def fail(what: str) -> RouterArtifactError:
        return RouterArtifactError(f"{kind} {root}: {what}")

    if not root.is_dir():
        raise fail("directory does not exist")
    try:
        raw = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise fail(f"{MANIFEST} is missing") from None
    except (OSError, ValueError) as exc:
        raise fail(f"{MANIFEST} is not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise fail(f"{MANIFEST} must be a JSON object")
    if raw.get("format") != fmt:
        raise fail(f"{MANIFEST}: format is {raw.get('format')!r}, expected {fmt!r}")
    if raw.get("format_version") != version:
        raise fail(
            f"{MANIFEST}: format_version {raw.get('format_version')!r} is not supported (need {version})"
        )
    return raw


def _thresholds(root: Path, raw: Any) -> dict[float, float]:
    if not isinstance(raw, dict) or not raw:
        raise _fail(root, f"{MANIFEST}: calibration.thresholds must be a non-empty object")
    out: dict[float, float] = {}
    for share, value in raw.items():
        try:
            x, t = float(share), float(value)
        except (TypeError, ValueError):
            raise _fail(root, f"{MANIFEST}: threshold {share!r}: {value!r} is not a number") from None
        if not (0.0 <= x <= 1.0 and 0.0 <= t <= 1.0 and math.isfinite(t)):
            raise _fail(root, f"{MANIFEST}: threshold {share!r}: {value!r} must be in [0, 1]")
        out[x] = t
    return dict(sorted(out.items()))


def load_artifact(path: str | Path | None = None) -> Artifact:
    root = Path(path) if path is not None else default_artifact_dir()
    manifest = read_manifest(root, FORMAT, FORMAT_VERSION)
    try:
        encoder = EncoderIdentity.from_json(
            manifest["encoder"], f"router artifact {root}: {MANIFEST}: encoder"
        )
        max_tokens = int(manifest["input"]["max_tokens"])
        view = manifest["input"]["view"]
        head_meta = manifest["head"]
        expected_sha = str(head_meta["sha256"])
        specs = list(head_meta["components"])
        thresholds = _thresholds(root, manifest["calibration"]["thresholds"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _fail(root, f"{MANIFEST} lacks or mistypes a required field ({exc!r})") from exc
    if view != VIEW:
        raise _fail(root, f"{MANIFEST}: input view {view!r} is not supported (need {VIEW!r})")
    if not 3 <= max_tokens <= 512:
        raise _fail(root, f"{MANIFEST}: input.max_tokens {max_tokens} is outside [3, 512]")
    head_path = root / HEAD_FILE
    if not head_path.is_file():
        raise _fail(root, f"{HEAD_FILE} is missing")
    actual_sha = sha256_file(head_path)
    if actual_sha != expected_sha:
        raise _fail(
            root,
            f"{HEAD_FILE} is corrupt or was replaced "
            f"(sha256 {actual_sha[:12]}…, manifest says {expected_sha[:12]}…)",
        )
    head = _load_head(root, head_path, specs, encoder.dim)
    return Artifact(
        path=root,
        manifest=manifest,
        encoder=encoder,
        max_tokens=max_tokens,
        head=head,
        thresholds=thresholds,
        head_sha256=actual_sha,
    )


def _load_head(root: Path, head_path: Path, specs: list[Any], dim: int) -> Head:
    try:
        with np.load(head_path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise _fail(root, f"{HEAD_FILE} is unreadable ({exc})") from exc
    try:
        components: list[Component] = []
        for i, spec in enumerate(specs):
            kind = spec["kind"]
            if kind not in COMPONENT_TYPES:
                raise _fail(root, f"{MANIFEST}: head component {i} has unknown kind {kind!r}")
            components.append(COMPONENT_TYPES[kind].from_arrays(arrays, f"c{i}", spec["params"]))
        head = Head(
            components=tuple(components),
            centers=tuple(float(s["center"]) for s in specs),
            scales=tuple(float(s["scale"]) for s in specs),
            weights=tuple(float(s["weight"]) for s in specs),
            cdf_raw=arrays["cdf_raw"].astype(np.float64),
            cdf_share=arrays["cdf_share"].astype(np.float64),
        )
        # One probe row through the whole head catches shape mismatches at load, not on a request.
        check = head.difficulty(np.zeros((1, dim), dtype=np.float32), [""])
    except RouterArtifactError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise _fail(root, f"{HEAD_FILE} does not match the manifest's head layout ({exc!r})") from exc
    if not components or not np.all(np.isfinite(check)) or any(s <= 0 for s in head.scales):
        raise _fail(root, "head is empty or produces non-finite scores")
    return head


def write_artifact(
    out: str | Path,
    *,
    name: str,
    encoder: EncoderIdentity,
    max_tokens: int,
    head: Head,
    thresholds: Mapping[float, float],
    extra: Mapping[str, Any],
) -> Path:
    """Write head.npz then manifest.json (the manifest pins the head's hash, so it goes last)."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {"cdf_raw": head.cdf_raw, "cdf_share": head.cdf_share}
    specs = []
    for i, (comp, c, s, w) in enumerate(
        zip(head.components, head.centers, head.scales, head.weights, strict=True)
    ):
        arrays.update(comp.arrays(f"c{i}"))
        specs.append({"kind": comp.kind, "params": comp.params(), "center": c, "scale": s, "weight": w})
    np.savez_compressed(root / HEAD_FILE, **arrays)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "encoder": encoder.to_json(),
        "input": {"view": VIEW, "max_tokens": max_tokens},
        "head": {"sha256": sha256_file(root / HEAD_FILE), "components": specs},
        "calibration": {
            "kind": "empirical CDF of out-of-fold training scores; difficulty = training percentile",
            "thresholds": {f"{x:g}": t for x, t in sorted(thresholds.items())},
        },
        **extra,
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return root
