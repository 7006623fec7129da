"""The Dockerfile as data (no Docker engine here; hadolint lints it in `make helm-check`).

What the image contains and whether it imports is test_image_context.py's: it builds the package from
the emulated context. These tests pin the stages' shape (slim non-root runtime, the sim target).
"""

from __future__ import annotations

import re

from tests.support.chart import ROOT


def stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions per stage name: [(INSTRUCTION, arguments)], continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, args = line.partition(" ")
        if instr.upper() == "FROM":
            m = re.search(r"\bAS\s+(\S+)", args, re.I)
            current = out.setdefault(m.group(1) if m else f"stage{len(out)}", [])
        current.append((instr.upper(), args))
    return out


def test_runtime_stage_is_slim_non_root_and_serves() -> None:
    s = stages()
    assert {"build", "encoder", "runtime", "sim"} <= set(s)
    runtime = s["runtime"]
    assert runtime[0] == ("FROM", "${PYTHON_IMAGE} AS runtime")
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert ("ENTRYPOINT", '["llmgw"]') in runtime and ("CMD", '["serve"]') in runtime
    runs = " ".join(a for i, a in runtime if i == "RUN")
    assert not re.search(r"apt-get install|gcc|build-essential|pip install", runs), (
        "build tools in the runtime"
    )
    assert "rm -rf /opt/llmgw/lib/python3.11/site-packages/eval" in runs, "eval/ must not ship in the gateway"
    copies = [a for i, a in runtime if i == "COPY"]
    assert any("--from=encoder" in c and "router/assets/minilm-l6-v2-int8" in c for c in copies)


def test_sim_stage_adds_eval_and_runs_the_simulator() -> None:
    sim = stages()["sim"]
    assert sim[0][1].startswith("runtime AS sim")
    assert any(i == "COPY" and "site-packages/eval" in a for i, a in sim)
    assert ("CMD", '["sim", "--host", "0.0.0.0", "--port", "8000"]') in sim


def test_dockerignore_keeps_local_state_out() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*") + 1 :].count("!gateway/") == 1
    assert "router/assets/" in lines
    assert not any(line.startswith("!.") for line in lines)


def test_the_context_is_copied_whole_once() -> None:
    # .dockerignore is the one list of sources (docs/design/012): no COPY names its own.
    from_context = [
        (name, a) for name, st in stages().items() for i, a in st if i == "COPY" and "--from" not in a
    ]
    assert from_context == [("build", ". .")]
