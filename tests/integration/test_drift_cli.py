"""`llmgw drift` against real processes: two simulators (identical: exactly zero), and a scripted
OpenAI-shaped server whose answers drift, are not chat completions, or carry no logprobs."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from eval.drift.__main__ import main as drift
from gateway import cli
from tests.support.procs import ROOT, free_port
from tests.support.scripted_openai import scripted_server
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with Stack(tmp_path_factory.mktemp("drift-sims")) as s:
        a, b = (s.sim("m", "--profile", "instant", name=f"sim-{i}", ready=False) for i in range(2))
        s.ready()
        yield a.url, b.url


@pytest.fixture(scope="module")
def scripted() -> Iterator[str]:
    with scripted_server() as url:
        yield url


def test_identical_simulators_report_exactly_zero(
    sims: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = drift(
        ["--pools", *sims, "--max-tokens", "8", "--out", str(tmp_path), "--min-bound-match-ratio", "1"]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "report.json").read_text())
    o = report["overall"]
    assert report["format"] == "llmgw-drift/1" and o["prompts"] == 6
    assert (o["match_ratio"], o["mean_abs_logprob"], o["max_abs_logprob"], o["kl"]) == (1.0, 0.0, 0.0, 0.0)
    assert o["positions"] == 6 * 8 and o["first_divergence"] is None
    assert o["prompt_logprobs"]["samples"] > 0 and o["prompt_logprobs"]["max_abs_logprob"] == 0.0
    assert (tmp_path / "drift.png").read_bytes()[:4] == b"\x89PNG"
    assert "6/6 identical" in capsys.readouterr().out


def test_a_drifting_pool_is_reported_and_fails_its_bound(
    scripted: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "p.txt"
    prompts.write_text("# canaries\nhello\n\nworld\n")
    args = ["--pools", f"{scripted}/ref", f"{scripted}/drift", "--model", "m", "--prompts", str(prompts)]
    code = drift([*args, "--out", str(tmp_path / "r"), "--max-bound-mean-abs-logprob", "0.1"])
    err = capsys.readouterr().err
    assert code == 1 and "outside the bounds: mean_abs_logprob" in err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    o = report["overall"]
    assert o["prompts"] == 2 and o["match_ratio"] == 0.0 and o["first_divergence"] == 1
    assert o["mean_abs_logprob"] == pytest.approx(0.25) and o["kl"] > 0
    assert report["prompts"][0]["abs_logprob_deltas"] == [0.25]
    assert o["prompt_logprobs"] is None  # the scripted server sends none


@pytest.mark.parametrize(
    ("script", "says"),
    [
        ("text", "not a chat completion"),
        ("nolp", "no token logprobs"),
        ("html", "HTTP 502: <html>bad gateway</html>"),
        ("list", "not a chat completion object"),
    ],
)
def test_unusable_answers_are_one_line_and_exit_2(
    scripted: str, script: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = drift(
        ["--pools", f"{scripted}/ref", f"{scripted}/{script}", "--model", "m", "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err
    assert err.count("\n") == 1 and f"/{script}" in err  # names the pool that failed
    assert not (tmp_path / "report.json").exists()


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    assert drift(["--pools", dead, dead, "--out", str(tmp_path)]) == 2
    assert "unreachable" in capsys.readouterr().err
    assert drift(["--pools", "small", dead, "--out", str(tmp_path)]) == 2
    assert "with --config" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    assert drift(["--pools", dead, dead, "--prompts", str(empty), "--out", str(tmp_path)]) == 2
    assert "no prompts" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        drift(["--pools", dead, dead, "--top-logprobs", "25"])
    assert exc.value.code == 2


def test_pool_names_resolve_through_a_policy(
    sims: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: ref, model: m, endpoints: {{static: ["{sims[0]}"]}}}}
  - {{name: new, model: m, endpoints: {{static: ["{sims[1]}"]}}}}
  - {{name: dyn, model: m, endpoints: {{dns: {{name: x.invalid., port: 8000}}}}}}
models:
  - {{name: m, route: {{pool: ref}}}}
"""
    )
    base = ["--config", str(policy), "--max-tokens", "4", "--out", str(tmp_path / "r")]
    assert drift([*base, "--pools", "ref", "new", "--no-prompt-logprobs"]) == 0
    assert json.loads((tmp_path / "r" / "report.json").read_text())["a"]["url"] == sims[0]
    assert drift([*base, "--pools", "ref", "dyn"]) == 2
    assert "no static endpoint" in capsys.readouterr().err
    assert drift([*base, "--pools", "ref", "nope"]) == 2
    assert "no pool 'nope'" in capsys.readouterr().err


def test_llmgw_dispatches_drift_through_the_declared_entry_point(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    value = declared["llmgw.commands"]["drift"]
    ep = EntryPoint(name="drift", value=value, group="llmgw.commands")
    monkeypatch.setattr(cli, "_plugin_commands", lambda: {"drift": ep})
    dead = f"http://127.0.0.1:{free_port()}"
    assert cli.main(["drift", "--pools", dead, dead, "--out", str(tmp_path)]) == 2
    assert "unreachable" in capsys.readouterr().err
