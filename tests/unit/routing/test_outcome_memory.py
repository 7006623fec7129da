import numpy as np
import pytest

from router.memory import BlendParams, Neighbourhood, OutcomeMemory, blend, from_record, to_record


def _unit(i: int, dim: int = 8) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    v[i] = 1.0
    return v


def test_neighbourhood_is_k_nearest_by_cosine() -> None:
    mem = OutcomeMemory(dim=8, capacity=10, k=2)
    assert mem.neighbourhood(_unit(0)) is None
    mem.add(_unit(0) * 5, 1.0)
    mem.add(_unit(1), 0.0)
    mem.add(_unit(0) + 0.5 * _unit(1), 0.0)
    hood = mem.neighbourhood(_unit(0))
    assert hood is not None
    assert hood.labels.tolist() == [1.0, 0.0]
    assert hood.similarities[0] == pytest.approx(1.0)
    assert hood.similarities[1] == pytest.approx(1 / np.sqrt(1.25), rel=1e-5)


def test_ring_overwrites_oldest() -> None:
    mem = OutcomeMemory(dim=8, capacity=2, k=5)
    mem.add(_unit(0), 1.0)
    mem.add(_unit(1), 1.0)
    mem.add(_unit(2), 0.0)
    assert len(mem) == 2
    hood = mem.neighbourhood(_unit(0))
    assert hood is not None and hood.n_eff == pytest.approx(0.0)
    assert sorted(hood.labels.tolist()) == [0.0, 1.0]


def test_add_rejects_bad_input() -> None:
    mem = OutcomeMemory(dim=8)
    with pytest.raises(ValueError):
        mem.add(_unit(0), 1.5)
    with pytest.raises(ValueError):
        mem.add(np.zeros(8), 1.0)
    with pytest.raises(ValueError):
        mem.add(np.ones(4), 1.0)


def test_blend_weight_grows_with_neighbours() -> None:
    cfg = BlendParams(blend_c=4.0, scale="probability")
    assert blend(0.3, None, cfg) == 0.3
    one = Neighbourhood(np.array([1.0], np.float32), np.array([1.0], np.float32))
    four = Neighbourhood(np.ones(4, np.float32), np.ones(4, np.float32))
    assert blend(0.2, one, cfg) == pytest.approx(0.2 * 0.8 + 0.2)
    assert blend(0.2, four, cfg) == pytest.approx(0.6)
    negative = Neighbourhood(np.array([-0.5], np.float32), np.array([1.0], np.float32))
    assert blend(0.2, negative, cfg) == 0.2


def test_record_round_trip() -> None:
    v = np.arange(1, 9, dtype=np.float32)
    emb, label = from_record(to_record(v, 1.0))
    assert label == 1.0
    np.testing.assert_allclose(emb, v / np.linalg.norm(v), atol=1e-3)
    with pytest.raises(ValueError):
        from_record(b"\x00")


def test_blend_on_prior_scale_is_relative_to_base_rate() -> None:
    cfg = BlendParams(blend_c=4.0)
    at_base = Neighbourhood(np.ones(4, np.float32), np.array([1, 0, 0, 0], np.float32), base_rate=0.25)
    assert blend(0.6, at_base, cfg) == pytest.approx(0.6)  # neighbours as hard as traffic: no move
    hard = Neighbourhood(np.ones(4, np.float32), np.ones(4, np.float32), base_rate=0.25)
    up = 0.5 * (0.75 / np.sqrt(0.25 * 0.75)) / np.sqrt(12)
    assert blend(0.3, hard, cfg) == pytest.approx(0.3 + up, rel=1e-5)
    assert blend(0.9, hard, cfg) == 1.0


def test_neighbourhood_carries_memory_base_rate() -> None:
    mem = OutcomeMemory(dim=8, capacity=10, k=1)
    for label in (1.0, 0.0, 0.0, 0.0):
        mem.add(_unit(0), label)
    hood = mem.neighbourhood(_unit(0))
    assert hood is not None and hood.base_rate == pytest.approx(0.25)


def test_the_base_rate_follows_the_ring_when_it_overwrites() -> None:
    mem = OutcomeMemory(dim=4, capacity=3, k=3)
    for i, label in enumerate((1.0, 1.0, 1.0, 0.0, 0.0)):
        mem.add(np.eye(4, dtype=np.float32)[i % 4] + 0.1, label)
    hood = mem.neighbourhood(np.ones(4, dtype=np.float32))
    assert hood is not None and hood.base_rate == pytest.approx(1 / 3)
