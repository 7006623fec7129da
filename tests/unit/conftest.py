"""The unit layer's shared switches.

`@pytest.mark.needs_encoder`: the test loads the router's ONNX encoder, which `make install` builds into
router/assets/ (or `LLMGW_ROUTER_ENCODER_DIR`) and git does not hold. Without it the test is skipped with
the reason, instead of erroring in a fixture.
"""

from __future__ import annotations

import pytest

from router.encoder import ENCODER_MANIFEST, FULL_LAYERS, ROUTER_LAYERS, default_encoder_dir, variant_file


def encoder_missing() -> str | None:
    """Why the built encoder cannot be used (a file it needs is absent), or None when it is there."""
    root = default_encoder_dir()
    needed = (variant_file(FULL_LAYERS), variant_file(ROUTER_LAYERS), "tokenizer.json", ENCODER_MANIFEST)
    absent = [name for name in needed if not (root / name).is_file()]
    if not absent:
        return None
    lacks = ", ".join(absent)
    return f"router encoder not built: {root} lacks {lacks} (make router-encoder, or make install)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_encoder: loads the router's built ONNX encoder; skipped when it is absent"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = encoder_missing()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("needs_encoder") is not None:
            item.add_marker(skip)
