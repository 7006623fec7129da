"""`llmgw cascade eval` on a slice of a RouterBench file: decisions-out format, and every reported
figure recomputed from the decisions and the data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "routing"
ARC = SHARED / "routerbench_arc_challenge_train.jsonl"

POLICY = """\
pools:
  - {name: mixtral, model: mixtral-8x7b-chat, endpoints: {static: ["http://127.0.0.1:9101"]}}
  - {name: yi, model: Yi-34B-Chat, endpoints: {static: ["http://127.0.0.1:9102"]}}
  - {name: gpt-4, model: gpt-4-1106-preview, endpoints: {static: ["http://127.0.0.1:9103"]}}
models:
  - name: auto
    route:
      policy:
        tiers: [{pool: mixtral}, {pool: yi}, {pool: gpt-4}]
        cascade:
          scorers: [{kind: agreement}, {kind: trained}]
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, object]]]:
    if not ARC.exists():
        pytest.skip(f"{ARC} not available")
    tmp = tmp_path_factory.mktemp("cascade")
    data = tmp / "slice.jsonl"
    data.write_text("".join(ARC.read_text().splitlines(keepends=True)[:120]))
    config = tmp / "policy.yaml"
    config.write_text(POLICY)
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "cascade", "eval", "--config", str(config), "--data", str(data),
         "--decisions-out", str(tmp / "decisions.jsonl"), "--out", str(tmp / "out"), "--folds", "3"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "gap recovered" in proc.stdout
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    return tmp, rows


def test_decisions_have_the_documented_format(run: tuple[Path, list[dict[str, object]]]) -> None:
    tmp, rows = run
    decisions = [json.loads(line) for line in (tmp / "decisions.jsonl").read_text().splitlines()]
    assert [d["id"] for d in decisions] == [r["id"] for r in rows]
    for d in decisions:
        assert set(d) == {"id", "tier", "escalated", "score"}
        assert d["tier"] in {"yi", "mixtral", "gpt-4"}
        assert isinstance(d["escalated"], bool)
        assert d["score"] is None or 0.0 <= d["score"] <= 1.0
        # Pair step (mixtral, yi) then gpt-4: an escalated row is answered by gpt-4 and only then.
        assert d["escalated"] == (d["tier"] == "gpt-4")


def test_report_figures_recompute_from_the_decisions(run: tuple[Path, list[dict[str, object]]]) -> None:
    tmp, rows = run
    decisions = {d["id"]: d for d in map(json.loads, (tmp / "decisions.jsonl").read_text().splitlines())}
    report = json.loads((tmp / "out" / "report.json").read_text())
    model = {"mixtral": "mixtral-8x7b-chat", "yi": "Yi-34B-Chat", "gpt-4": "gpt-4-1106-preview"}
    quality = cost = strong_cost = 0.0
    for r in rows:
        out = r["outcomes"]
        assert isinstance(out, dict)
        d = decisions[r["id"]]
        quality += out[model[d["tier"]]]["score"]
        # Every request pays for both cheap calls, and for gpt-4 when it escalated.
        cost += out["mixtral-8x7b-chat"]["cost_usd"] + out["Yi-34B-Chat"]["cost_usd"]
        cost += out["gpt-4-1106-preview"]["cost_usd"] if d["escalated"] else 0.0
        strong_cost += out["gpt-4-1106-preview"]["cost_usd"]
    overall = report["overall"]
    assert overall["n"] == len(rows)
    assert overall["quality"] == pytest.approx(quality / len(rows))
    assert overall["cost_usd"] == pytest.approx(cost)
    assert overall["cost_share"] == pytest.approx(cost / strong_cost)
    escalated = sum(1 for d in decisions.values() if d["escalated"])
    assert overall["escalated_rows"] == escalated
    assert sum(overall["escalations"].values()) == escalated
    assert overall["tier_share"]["gpt-4"] == pytest.approx(escalated / len(rows))
    assert len(report["folds"]) == 3
    assert (tmp / "out" / "cost_quality.png").stat().st_size > 1000


def test_bad_config_fails_with_a_message(tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY.replace("{kind: agreement}", "{kind: logprob}"))
    data = tmp_path / "slice.jsonl"
    data.write_text("".join(ARC.read_text().splitlines(keepends=True)[:5]) if ARC.exists() else "")
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "cascade", "eval",
         "--config", str(config), "--data", str(data)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no token logprobs" in proc.stderr


def test_step_scorer_trains_ships_and_replays(tmp_path: Path) -> None:
    """train-scorer --config/--alias writes a format-2 artifact for the alias's tiers; an alias that
    names it replays as configured; cross-validation can train step scorers per fold."""
    if not ARC.exists():
        pytest.skip(f"{ARC} not available")
    data = tmp_path / "slice.jsonl"
    data.write_text("".join(ARC.read_text().splitlines(keepends=True)[:60]))
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY)
    artifact = tmp_path / "step.json"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "cascade", *args],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc

    cli(
        "train-scorer", "--data", str(data), "--out", str(artifact),
        "--config", str(config), "--alias", "auto",
    )  # fmt: skip
    body = json.loads(artifact.read_text())
    assert body["format"] == "llmgw-answer-scorer/2"
    assert body["meta"]["tiers"] == ["mixtral", "yi", "gpt-4"]
    config.write_text(POLICY.replace("{kind: trained}", f"{{kind: trained, artifact: {artifact}}}"))
    out = tmp_path / "decisions.jsonl"
    cli("eval", "--config", str(config), "--data", str(data), "--as-configured", "--decisions-out", str(out))
    assert len(out.read_text().splitlines()) == 60
    # --scorer auto follows the configured artifact: step scorers per fold, named in no output, so
    # compare with an explicit --scorer step run.
    auto = cli("eval", "--config", str(config), "--data", str(data), "--folds", "2", "--inner-folds", "2")
    step = cli(
        "eval", "--config", str(config), "--data", str(data), "--folds", "2", "--inner-folds", "2",
        "--scorer", "step",
    )  # fmt: skip
    assert auto.stdout == step.stdout
