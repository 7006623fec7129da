"""Request planning: arrivals and content are deterministic under a seed; lengths follow the workload."""

from __future__ import annotations

import random
from pathlib import Path
from statistics import mean

import orjson
import pytest

from eval.loadgen.plan import Planner, arrival_times, load_prompts, sample_length
from eval.loadgen.workload import Choice, Fixed, LogNormal, Uniform, Workload, build_workload


def test_poisson_arrivals_repeat_under_a_seed_and_differ_across_seeds() -> None:
    a = arrival_times("poisson", 10, seed=1, duration_s=20, count=None)
    assert a == arrival_times("poisson", 10, seed=1, duration_s=20, count=None)
    assert a != arrival_times("poisson", 10, seed=2, duration_s=20, count=None)
    assert all(x < y for x, y in zip(a, a[1:], strict=False))
    assert 0 < a[0] and a[-1] < 20
    assert 150 < len(a) < 250  # 200 expected; a seeded draw, far from the bounds


def test_constant_arrivals_are_evenly_spaced_and_bounded_by_count() -> None:
    assert arrival_times("constant", 4, seed=0, duration_s=None, count=5) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert len(arrival_times("constant", 4, seed=0, duration_s=2, count=None)) == 8
    assert len(arrival_times("poisson", 100, seed=0, duration_s=100, count=7)) == 7


def test_a_shorter_run_is_a_prefix_of_a_longer_one() -> None:
    short = arrival_times("poisson", 5, seed=9, duration_s=3, count=None)
    assert arrival_times("poisson", 5, seed=9, duration_s=6, count=None)[: len(short)] == short


def test_arrivals_need_a_bound() -> None:
    with pytest.raises(ValueError):
        arrival_times("poisson", 5, seed=0, duration_s=None, count=None)


def test_sample_length_distributions() -> None:
    rng = random.Random(0)
    assert sample_length(Fixed(dist="fixed", value=7), rng) == 7
    uni = [sample_length(Uniform(dist="uniform", min=3, max=5), rng) for _ in range(200)]
    assert set(uni) == {3, 4, 5}
    logn = [
        sample_length(LogNormal(dist="lognormal", mean=200, sigma=0.5, max=100000), rng) for _ in range(4000)
    ]
    assert 185 < mean(logn) < 215  # `mean` is the distribution's mean, not exp(mu)
    clipped = [
        sample_length(LogNormal(dist="lognormal", mean=200, sigma=2, min=50, max=300), rng)
        for _ in range(500)
    ]
    assert min(clipped) == 50 and max(clipped) == 300
    ch = [sample_length(Choice(dist="choice", values=[1, 9], weights=[0, 1]), rng) for _ in range(50)]
    assert set(ch) == {9}


def _workload(**data: object) -> Workload:
    return build_workload("test", dict(data))


def _bodies(w: Workload, n: int) -> list[dict[str, object]]:
    planner = Planner(w)
    return [orjson.loads(planner.next().body) for _ in range(n)]


def test_planner_is_deterministic_under_the_seed() -> None:
    w = _workload(
        seed=5, requests={"stream_share": 0.5, "prompt_tokens": {"dist": "uniform", "min": 5, "max": 50}}
    )
    assert _bodies(w, 20) == _bodies(w, 20)
    assert _bodies(w, 20) != _bodies(_workload(seed=6, requests=w.requests.model_dump()), 20)


def test_bodies_have_the_sampled_lengths_and_stream_usage() -> None:
    w = _workload(
        seed=1,
        requests={
            "prompt_tokens": {"dist": "fixed", "value": 40},
            "output_tokens": {"dist": "fixed", "value": 9},
            "stream_share": 0.5,
            "ignore_eos": True,
        },
    )
    bodies = _bodies(w, 40)
    assert {b["stream"] for b in bodies} == {True, False}
    for b in bodies:
        assert b["max_tokens"] == 9 and b["ignore_eos"] is True
        messages = b["messages"]
        assert isinstance(messages, list) and len(messages) == 1
        assert len(messages[0]["content"].split()) == 40  # one word per token
        assert ("stream_options" in b) == b["stream"]
        if b["stream"]:
            assert b["stream_options"] == {"include_usage": True}


def test_prefix_groups_share_their_system_prompt() -> None:
    w = _workload(seed=2, requests={"prefix": {"groups": 3, "tokens": 64, "share": 1.0}})
    planner = Planner(w)
    specs = [planner.next() for _ in range(60)]
    systems: dict[int, set[str]] = {}
    for spec in specs:
        assert spec.prefix_group is not None
        system = orjson.loads(spec.body)["messages"][0]
        assert system["role"] == "system"
        systems.setdefault(spec.prefix_group, set()).add(system["content"])
    assert sorted(systems) == [0, 1, 2]
    assert all(len(v) == 1 for v in systems.values())
    assert len({next(iter(v)) for v in systems.values()}) == 3
    assert all(60 <= len(next(iter(v)).split()) <= 68 for v in systems.values())


def test_tenants_and_aliases_follow_their_weights() -> None:
    w = _workload(
        seed=3,
        tenants=[{"name": "a", "key": "ka", "weight": 1}, {"name": "b", "key": "kb", "weight": 3}],
        aliases=[{"name": "small", "weight": 1}, {"name": "large", "weight": 1, "slo_class": "slow"}],
        slo_classes={"slow": {"e2e_ms": 1000}},
        target={"base_urls": ["http://a", "http://b"], "api": "completions"},
    )
    planner = Planner(w)
    specs = [planner.next() for _ in range(400)]
    assert {(s.tenant, s.key) for s in specs} == {("a", "ka"), ("b", "kb")}
    assert 0.65 < sum(s.tenant == "b" for s in specs) / 400 < 0.85
    assert {s.slo_class for s in specs if s.alias == "large"} == {"slow"}
    assert {s.slo_class for s in specs if s.alias == "small"} == {None}
    assert [s.target for s in specs[:4]] == [0, 1, 0, 1]
    assert "prompt" in orjson.loads(specs[0].body)


def test_dataset_prompts(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(
        "\n".join(orjson.dumps({"id": str(i), "prompt": f"question {i}"}).decode() for i in range(5))
    )
    assert load_prompts(data, limit=3) == ["question 0", "question 1", "question 2"]
    w = _workload(seed=0, requests={"dataset": {"path": str(data)}})
    planner = Planner(w, load_prompts(data, None))
    contents = {orjson.loads(planner.next().body)["messages"][-1]["content"] for _ in range(50)}
    assert contents <= {f"question {i}" for i in range(5)} and len(contents) > 1
    (tmp_path / "bad.jsonl").write_text('{"id": "1"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: no string field 'prompt'"):
        load_prompts(tmp_path / "bad.jsonl", None)
