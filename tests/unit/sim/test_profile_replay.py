from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from eval.sim.profile import ProfileError, SimProfile, builtin_profiles, load_profile
from eval.sim.replay import ReplayError, ReplayIndex
from eval.sim.requests import Context, parse_chat, parse_completion


def test_builtin_profiles_are_valid() -> None:
    assert load_profile("instant").is_instant
    small, large = load_profile("small"), load_profile("large")
    assert not small.is_instant
    assert large.step_base_ms >= 3 * small.step_base_ms
    assert set(builtin_profiles()) == {"instant", "small", "large"}


def test_yaml_profile_and_flag_override(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("step_base_ms: 5\nmax_num_seqs: 8\n")
    p = load_profile(str(f), {"max_num_seqs": 2})
    assert p.step_base_ms == 5 and p.max_num_seqs == 2


def test_unknown_key_is_rejected_by_name(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("step_base_ms: 5\ndecode_ms_per_seq: 1\n")
    with pytest.raises(ProfileError, match="decode_ms_per_seq"):
        load_profile(str(f))


def test_bad_values_and_names() -> None:
    with pytest.raises(ProfileError, match="max_model_len"):
        load_profile(None, {"kv_capacity_tokens": 1024, "max_model_len": 4096})
    with pytest.raises(ProfileError, match="neither a built-in"):
        load_profile("no-such-profile")
    with pytest.raises(ProfileError, match="step_base_ms"):
        load_profile(None, {"step_base_ms": -1})
    assert SimProfile(kv_capacity_tokens=8192, block_size=16).num_blocks == 512


def write_dataset(path: Path) -> None:
    rows = [
        {"id": "1", "prompt": "What is 2+2?\nAnswer:", "outcomes": {"m": {"score": 1, "response": "4"}}},
        {"id": "2", "prompt": "Null one", "outcomes": {"m": {"score": 0, "response": None}}},
        {"id": "3", "prompt": "Long one", "outcomes": {"m": {"score": 1, "response": "word " * 50}}},
        {"id": "4", "prompt": "Other model", "outcomes": {"x": {"score": 1, "response": "nope"}}},
    ]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")


def test_replay_lookup(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    write_dataset(f)
    index = ReplayIndex.load(f, "m")
    assert index.rows == 4 and len(index) == 2
    assert index.lookup("  What is 2+2?\nAnswer:\n") == "4"
    assert index.lookup("Null one") is None and index.lookup("Other model") is None
    with pytest.raises(ReplayError, match="no row"):
        ReplayIndex.load(f, "missing-model")


def test_replay_answers_and_truncates(tmp_path: Path, make_ctx: Callable[..., Context]) -> None:
    f = tmp_path / "d.jsonl"
    write_dataset(f)
    ctx = make_ctx(replay=ReplayIndex.load(f, "m"))
    hit = parse_chat(
        ctx,
        {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "What is 2+2?\nAnswer:"},
            ]
        },
    )
    assert hit.replay_hit is True and hit.choices[0].text == "4" and hit.choices[0].finish_reason == "stop"
    cut = parse_completion(ctx, {"prompt": "Long one", "max_tokens": 5})
    assert cut.replay_hit is True and cut.choices[0].finish_reason == "length"
    assert cut.choices[0].text == "word word word word word"
    miss = parse_completion(ctx, {"prompt": "Null one", "max_tokens": 5})
    assert miss.replay_hit is False and len(miss.choices[0].pieces) <= 5


def test_cli_reports_profile_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from eval.sim.cli import main

    f = tmp_path / "p.yaml"
    f.write_text("prefill_ms: 1\n")
    assert main(["--profile", str(f)]) == 2
    assert "unknown key 'prefill_ms'" in capsys.readouterr().err
    assert main(["--replay", str(f)]) == 2
