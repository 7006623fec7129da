"""The `llmgw` command tells the truth (issue 44): exit codes, closed pipes, --version, help, status lines.

Each test runs the installed `llmgw` entry point as a real subprocess, as a person's shell would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from eval.loadgen.cli import error_rate_failure
from eval.status import Status
from gateway.cli import PLUGIN_HELP, _plugin_commands
from tests.support.procs import ROOT, free_port

LLMGW = str(Path(sys.executable).parent / "llmgw")
ARC = ROOT.parent / "shared" / "data" / "routing" / "routerbench_arc_challenge_train.jsonl"


def llmgw(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LLMGW, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_version_is_the_package_version() -> None:
    proc = llmgw("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"llmgw {version('llm-gateway')}"


def test_a_closed_pipe_ends_quietly_with_exit_0() -> None:
    """`llmgw config schema | head -1`: the schema (~100 KB) outgrows the pipe, the reader has gone."""
    proc = subprocess.Popen(
        [LLMGW, "config", "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    assert proc.wait(timeout=30) == 0
    assert first == b"{\n"
    assert proc.stderr.read() == b""


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["bench", "--help"], ["keys", "generate"]])
def test_a_pipe_closed_before_anything_is_written_is_quiet_too(argv: list[str]) -> None:
    # `| true`: the reader is gone before the interpreter has started, so even argparse's own exit
    # (SystemExit after --help) meets the closed pipe at its final flush.
    proc = subprocess.Popen([LLMGW, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
    assert proc.stderr.read() == b""


def test_the_shell_pipeline_of_the_issue() -> None:
    proc = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {LLMGW} config schema | head -1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "{\n", "")


def test_every_subcommand_is_described_in_words() -> None:
    top = llmgw("--help")
    assert top.returncode == 0
    assert "(eval." not in top.stdout  # not by module path
    assert set(_plugin_commands()) <= set(PLUGIN_HELP)
    for name, about in PLUGIN_HELP.items():
        assert re.search(rf"^\s+{name}\s+{re.escape(about.split()[0])}", top.stdout, re.M), (name, top.stdout)
    for name in ("serve", "config", "keys", "db", "spend", *PLUGIN_HELP):
        sub = llmgw(name, "--help")
        assert sub.returncode == 0, sub.stderr
        description = sub.stdout.split("\n\n")[1]
        assert len(description.split()) >= 3 and not description.startswith(("positional", "options")), (
            name,
            sub.stdout,
        )


def test_bench_against_a_closed_port_fails_and_says_why(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args = ("bench", "run", "--url", url, "--requests", "3", "--rate", "20", "--no-plots", "--quiet")
    proc = llmgw(*args, "--out", str(tmp_path / "a"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    why = "3 of 3 measured requests failed (100.0%; connection 3), more than --max-error-rate 0.01"
    assert f"llmgw bench: {why}" in proc.stderr, proc.stderr
    assert (tmp_path / "a" / "bench.json").exists()  # the report is still written
    # A threshold of 1 accepts any error rate: the old behaviour, on request.
    tolerant = llmgw(*args, "--max-error-rate", "1", "--out", str(tmp_path / "b"))
    assert tolerant.returncode == 0, tolerant.stderr
    bad = llmgw(*args, "--max-error-rate", "1.5", "--out", str(tmp_path / "c"))
    assert bad.returncode == 2 and "expected a share in [0, 1]" in bad.stderr


def _level(measured: int, errors: dict[str, int]) -> dict[str, object]:
    return {"requests": {"measured": measured}, "errors": errors}


def test_the_error_budget_counts_every_level() -> None:
    assert error_rate_failure([_level(100, {}), _level(100, {"http_503": 2})], 0.01) is None  # 1 % exactly
    why = error_rate_failure([_level(100, {"timeout": 1}), _level(100, {"http_503": 2})], 0.01)
    assert (
        why
        == "3 of 200 measured requests failed (1.5%; http_503 2, timeout 1), more than --max-error-rate 0.01"
    )
    assert error_rate_failure([_level(0, {})], 0.01) is not None  # nothing measured proves nothing


def test_status_line_is_periodic_and_stops_with_the_block() -> None:
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            lines.extend(t for t in text.splitlines() if t)

        def flush(self) -> None:
            pass

    with Status("llmgw test", every_s=0.05, stream=Sink()) as status:  # type: ignore[arg-type]
        status.phase("step one")
        time.sleep(0.3)
    count = len(lines)
    time.sleep(0.15)
    assert len(lines) == count >= 2
    assert all(re.fullmatch(r"llmgw test: step one \(\d+ s\)", line) for line in lines), lines


@pytest.mark.skipif(not ARC.exists(), reason=f"routing data not found at {ARC}")
@pytest.mark.parametrize("command", ["router eval", "cascade eval"])
def test_quiet_routing_commands_print_a_status_line(command: str, tmp_path: Path) -> None:
    data = tmp_path / "slice.jsonl"
    data.write_text("".join(ARC.read_text().splitlines(keepends=True)[:120]))
    if command == "router eval":
        args = ["router", "eval", "--model", "router/artifacts/default", "--data", str(data),
                "--strong", "gpt-4-1106-preview", "--weak", "mixtral-8x7b-chat"]  # fmt: skip
    else:
        policy = tmp_path / "policy.yaml"
        policy.write_text(
            "pools:\n"
            + "".join(
                f'  - {{name: {n}, model: {m}, endpoints: {{static: ["http://127.0.0.1:9"]}}}}\n'
                for n, m in (
                    ("mixtral", "mixtral-8x7b-chat"),
                    ("yi", "Yi-34B-Chat"),
                    ("gpt-4", "gpt-4-1106-preview"),
                )
            )
            + "models:\n  - name: auto\n    route:\n      policy:\n"
            "        tiers: [{pool: mixtral}, {pool: yi}, {pool: gpt-4}]\n"
            "        cascade: {scorers: [{kind: agreement}, {kind: trained}]}\n"
        )
        args = ["cascade", "eval", "--config", str(policy), "--data", str(data), "--folds", "3"]
    # A short period stands in for the default 5 s: the commands take a second or two on this slice.
    proc = llmgw(*args, env={"LLMGW_STATUS_EVERY_S": "0.2", "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"^llmgw {command}: .+ \(\d+ s\)$", proc.stderr, re.M), proc.stderr
    assert f"llmgw {command}:" not in proc.stdout  # the result alone on stdout
