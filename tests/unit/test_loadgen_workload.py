"""Workload files: validation errors name the file and the key; env keys; flag overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.loadgen.workload import LogNormal, WorkloadError, load_workload, with_overrides

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


def test_unknown_key_names_file_and_dotted_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "requests:\n  stream_shar: 0.5\n")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(path) in str(err.value)
    assert "unknown key 'requests.stream_shar'" in str(err.value)


def test_bad_distribution_parameter_names_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "requests:\n  prompt_tokens: {dist: lognormal, mean: 100, sigma: -1}\n")
    with pytest.raises(WorkloadError, match=r"'requests\.prompt_tokens\.lognormal\.sigma'"):
        load_workload(path)


def test_unknown_distribution_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "requests:\n  output_tokens: {dist: zipf, value: 3}\n")
    with pytest.raises(WorkloadError, match=r"requests\.output_tokens"):
        load_workload(path)


def test_uniform_bounds_must_be_ordered(tmp_path: Path) -> None:
    path = _write(tmp_path, "requests:\n  output_tokens: {dist: uniform, min: 10, max: 5}\n")
    with pytest.raises(WorkloadError, match="min \\(10\\) is larger than max \\(5\\)"):
        load_workload(path)


def test_missing_key_env_fails_at_load_naming_the_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOADGEN_TEST_KEY", raising=False)
    path = _write(tmp_path, "tenants:\n  - {name: a, key: sk-a}\n  - {name: b, key_env: LOADGEN_TEST_KEY}\n")
    with pytest.raises(WorkloadError, match=r"'tenants\.1\.key_env': environment variable LOADGEN_TEST_KEY"):
        load_workload(path)
    monkeypatch.setenv("LOADGEN_TEST_KEY", "sk-b")
    workload, _ = load_workload(path)
    assert [t.resolve_key() for t in workload.tenants] == ["sk-a", "sk-b"]


def test_tenant_needs_exactly_one_key_source(tmp_path: Path) -> None:
    path = _write(tmp_path, "tenants:\n  - {name: a}\n")
    with pytest.raises(WorkloadError, match="exactly one of key, key_env"):
        load_workload(path)


def test_slo_class_references_are_checked(tmp_path: Path) -> None:
    path = _write(tmp_path, "aliases:\n  - {name: small, slo_class: fast}\n")
    with pytest.raises(WorkloadError, match="slo_class 'fast' is not in slo_classes"):
        load_workload(path)


def test_load_needs_a_bound_and_a_warmup_shorter_than_it(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="set duration_s and/or requests"):
        load_workload(_write(tmp_path, "load: {duration_s: null}\n"))
    with pytest.raises(WorkloadError, match="warmup_s"):
        load_workload(_write(tmp_path, "load: {duration_s: 5, warmup_s: 5}\n"))


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="invalid YAML"):
        load_workload(_write(tmp_path, "load: [\n"))
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "nope.yaml")


def test_overrides_merge_one_level_and_are_validated(tmp_path: Path) -> None:
    path = _write(tmp_path, "load: {rate: 2, duration_s: 10}\nsweep: {rates: [1, 2]}\n")
    workload, raw = load_workload(path)
    merged = with_overrides(str(path), raw, {"load": {"rate": 5}, "sweep": None, "seed": 3})
    assert (merged.load.rate, merged.load.duration_s, merged.sweep, merged.seed) == (5, 10, None, 3)
    with pytest.raises(WorkloadError, match=r"'load\.rate'"):
        with_overrides(str(path), raw, {"load": {"rate": -1}})


def test_workload_is_frozen() -> None:
    workload, _ = load_workload(None)
    with pytest.raises(ValueError):
        workload.seed = 4  # type: ignore[misc]


def test_committed_two_pools_workload_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_BENCH_KEY", "sk-test")
    workload, _ = load_workload(ROOT / "eval/workloads/two-pools.yaml")
    assert {a.name for a in workload.aliases} == {"small", "large", "auto"}
    assert workload.sweep is not None and len(workload.sweep.rates) >= 3
    assert isinstance(workload.requests.prompt_tokens, LogNormal)


def test_committed_capacity_files_load() -> None:
    from eval.sim.profile import load_profile

    workload, _ = load_workload(ROOT / "eval/workloads/capacity.yaml")
    assert workload.tenants == [] and workload.sweep is not None
    assert load_profile(str(ROOT / "eval/workloads/capacity-sim.yaml")).kv_capacity_tokens == 8192


def test_committed_tenants_flood_workload_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    for t in "ABC":
        monkeypatch.setenv(f"LLMGW_KEY_{t}", f"sk-{t}")
    workload, _ = load_workload(ROOT / "eval/workloads/tenants-flood.yaml")
    assert [(t.name, t.weight) for t in workload.tenants] == [("a", 10), ("b", 1), ("c", 1)]
