"""`llmgw router train | eval | score` end to end on small files made here (no shared data needed).

Runs the real encoder (built by `make install`); training uses a tiny synthetic routing file whose
strong-model gain depends on the prompt, so a trained artifact has something to learn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gateway.cli import main
from router.difficulty import DifficultyModel

STRONG, WEAK = "strong-m", "weak-m"


def _routing_file(path: Path, n: int = 60) -> Path:
    rng = random.Random(0)
    lines = []
    for i in range(n):
        hard = i % 2 == 0
        task = "algebra" if i % 3 else "history"
        topic = (
            f"Solve the integral of x^{i} times log(x) and prove convergence"
            if hard
            else f"Name the color {i}"
        )
        weak_ok = (not hard) or rng.random() < 0.2
        row = {
            "id": f"row-{i}",
            "source": "test",
            "task": task,
            "prompt": f"{topic}.\nA. one\nB. two\nAnswer:",
            "outcomes": {
                STRONG: {"score": 1.0, "cost_usd": 0.01, "response": None},
                WEAK: {"score": 1.0 if weak_ok else 0.0, "cost_usd": 0.001, "response": None},
            },
        }
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_score_reads_only_id_and_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.jsonl"
    # No task, no outcomes, an extra field, an empty prompt and a long one: all must score.
    src.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": "a", "prompt": "What is the derivative of sin(x)?"},
                {"id": "b", "prompt": "", "extra": 1},
                {"id": "c", "prompt": "word " * 50_000},
            ]
        )
        + "\n"
    )
    out = tmp_path / "out" / "scores.jsonl"
    assert main(["router", "score", "--in", str(src), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b", "c"]
    assert all(set(r) == {"id", "difficulty"} for r in rows)
    assert all(0.0 <= r["difficulty"] <= 1.0 for r in rows)
    # The CLI and the serving API agree on a prompt.
    model = DifficultyModel.load()
    try:
        assert rows[0]["difficulty"] == pytest.approx(
            model.score_sync("What is the derivative of sin(x)?"), abs=1e-6
        )
    finally:
        model.close()


def test_score_rejects_a_line_without_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "prompt": "ok"}) + "\n" + json.dumps({"id": "b"}) + "\n")
    assert main(["router", "score", "--in", str(src), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "in.jsonl:2" in capsys.readouterr().err


def test_score_with_a_broken_model_fails_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "prompt": "ok"}) + "\n")
    code = main(
        [
            "router",
            "score",
            "--model",
            str(tmp_path / "missing"),
            "--in",
            str(src),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2
    assert "missing" in capsys.readouterr().err


def test_train_then_eval_then_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _routing_file(tmp_path / "train.jsonl")
    art = tmp_path / "artifact"
    code = main(
        [
            "router",
            "train",
            "--data",
            str(data),
            "--out",
            str(art),
            "--strong",
            STRONG,
            "--weak",
            WEAK,
            "--folds",
            "3",
            "--k",
            "3",
            "5",
            "--rank",
            "8",
            "--no-cache",
        ]
    )
    assert code == 0
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["training"]["rows_used"] == 60
    assert manifest["training"]["strong"] == STRONG

    model = DifficultyModel.load(art)
    try:
        hard = model.score_sync(
            "Solve the integral of x^7 times log(x) and prove convergence.\nA. one\nB. two\nAnswer:"
        )
        easy = model.score_sync("Name the color 7.\nA. one\nB. two\nAnswer:")
    finally:
        model.close()
    assert hard > easy  # it learned the prompts

    out_dir = tmp_path / "report"
    code = main(
        [
            "router",
            "eval",
            "--model",
            str(art),
            "--data",
            str(data),
            "--strong",
            STRONG,
            "--weak",
            WEAK,
            "--out",
            str(out_dir),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "per-task prior" in text and "oracle" in text
    report = json.loads((out_dir / "router_eval.json").read_text())
    assert set(report["routers"]) == {"router", "random", "per-task prior", "oracle"}
    ours = report["routers"]["router"]
    for field in ("apgr", "apgr_deciles", "cpt50", "cpt80", "at_shares"):
        assert field in ours
    assert report["routers"]["random"]["apgr"] == pytest.approx(0.5)
    assert ours["apgr"] > 0.6  # in-sample on an easy synthetic task
    assert set(ours["at_shares"]["0.5"]) == {"quality", "pgr", "cost_usd"}
    assert set(report["calibration"]["0.3"]) == {"threshold", "realized_share", "quality"}
    assert (out_dir / "quality_vs_share.png").stat().st_size > 1000
    assert (out_dir / "cost_quality.png").stat().st_size > 1000


def test_train_refuses_too_few_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _routing_file(tmp_path / "tiny.jsonl", n=4)
    code = main(
        [
            "router",
            "train",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "a"),
            "--strong",
            STRONG,
            "--weak",
            WEAK,
            "--no-cache",
        ]
    )
    assert code == 2
    assert "usable rows" in capsys.readouterr().err
