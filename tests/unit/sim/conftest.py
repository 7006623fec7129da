from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from eval.sim.profile import SimProfile
from eval.sim.replay import ReplayIndex
from eval.sim.requests import Context


def make_context(
    profile: SimProfile | None = None, replay: ReplayIndex | None = None, seed: int = 0
) -> Context:
    return Context(
        profile=profile or SimProfile(),
        served_names=("small", "alias"),
        replay=replay,
        rng=random.Random(seed),
        id_prefix="t",
    )


MakeContext = Callable[..., Context]


@pytest.fixture
def make_ctx() -> MakeContext:
    return make_context


@pytest.fixture
def ctx() -> Context:
    return make_context()
