"""`make test`'s layer runner (tests/support/layers.py): every layer runs, each is timed, a failed layer
fails the report, and pytest's "no tests collected" (exit 5) is not a failure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import layers


def _exit(code: int) -> list[str]:
    return [sys.executable, "-c", f"raise SystemExit({code})"]


def test_a_failed_layer_does_not_stop_the_next_and_fails_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run" / "layers.tsv"
    assert layers.main(["start", str(log)]) == 0
    assert layers.main(["run", str(log), "unit", "--pytest", "--", *_exit(0)]) == 0
    assert layers.main(["run", str(log), "e2e", "--pytest", "--", *_exit(1)]) == 0  # make goes on
    assert layers.main(["run", str(log), "helm-check", "--", *_exit(0)]) == 0
    assert [line.split("\t")[::2] for line in log.read_text().splitlines()[1:]] == [
        ["unit", "0"],
        ["e2e", "1"],
        ["helm-check", "0"],
    ]
    assert layers.main(["report", str(log)]) == 1
    table = capsys.readouterr().out.split("layer", 1)[1]
    assert "e2e" in table and "FAILED (exit 1)" in table
    assert "sum of the layers" in table and "wall time" in table and "FAILED: e2e" in table


def test_a_buffered_layer_prints_its_output_in_one_piece_after_it_ends(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "layers.tsv"
    layers.main(["start", str(log)])
    say = [sys.executable, "-c", "print('first'); print('second')"]
    layers.main(["run", str(log), "helm-check", "--buffer", "--", *say])
    out = capfd.readouterr().out
    assert out.index("=== helm-check: ") < out.index("first\nsecond") < out.index("=== helm-check: ok")


def test_no_tests_collected_is_a_pass_for_pytest_layers_only(tmp_path: Path) -> None:
    log = tmp_path / "layers.tsv"
    layers.main(["start", str(log)])
    layers.main(["run", str(log), "conformance", "--pytest", "--", *_exit(5)])
    assert layers.main(["report", str(log)]) == 0
    layers.main(["run", str(log), "fuzz", "--", *_exit(5)])
    assert layers.main(["report", str(log)]) == 1


def test_a_missing_command_is_a_failed_layer(tmp_path: Path) -> None:
    log = tmp_path / "layers.tsv"
    layers.main(["start", str(log)])
    layers.main(["run", str(log), "lint+types", "--", str(tmp_path / "no-such-binary")])
    assert log.read_text().splitlines()[1].split("\t")[2] == "127"
    assert layers.main(["report", str(log)]) == 1


def test_bad_usage_is_refused(tmp_path: Path) -> None:
    assert layers.main(["run", str(tmp_path / "log"), "unit", "--", ""][:4]) == 2
    assert layers.main(["frobnicate"]) == 2
