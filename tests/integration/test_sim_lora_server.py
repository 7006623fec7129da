"""A real `llmgw sim --enable-lora` process: adapters listed, loaded, unloaded, served, swapped, scraped."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from eval.sim.adapters import write_adapter
from tests.support.procs import free_port
from tests.support.stack import Stack

Start = Callable[..., str]
PROMPT = {"prompt": "Tell me about the harbour", "max_tokens": 8, "temperature": 0}


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Start]:
    with Stack(tmp_path) as s:

        def start(*args: str, runtime: bool = True) -> str:
            port = free_port()
            env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True" if runtime else "0"}  # "0": as unset
            argv = ["sim", "--host", "127.0.0.1", "--port", str(port), *args]
            return s.spawn(argv, "/health", name="sim", port=port, env=env).url

        yield start


def _text(url: str, model: str) -> str:
    r = httpx.post(url + "/v1/completions", json={**PROMPT, "model": model}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == model
    return str(r.json()["choices"][0]["text"])


def _metric_lines(url: str, name: str) -> list[str]:
    return [line for line in httpx.get(url + "/metrics").text.splitlines() if line.startswith(name)]


def _swaps(url: str) -> float:
    (line,) = _metric_lines(url, "sim:lora_swaps_total{")
    return float(line.rsplit(" ", 1)[1])


def test_load_list_serve_unload(start_sim: Start, tmp_path: Path) -> None:
    a, b = write_adapter(tmp_path / "a"), write_adapter(tmp_path / "b")
    url = start_sim("--served-model-name", "base", "--enable-lora", "--max-lora-rank", "8",
                    "--lora-modules", f"a={a}", "--max-loras", "2")  # fmt: skip
    models = {m["id"]: m for m in httpx.get(url + "/v1/models").json()["data"]}
    assert list(models) == ["base", "a"]
    assert models["a"]["parent"] == "base" and models["a"]["root"] == str(a)

    load = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "b", "lora_path": str(b)})
    assert load.status_code == 200 and load.text == "Success: LoRA adapter 'b' added successfully."
    assert "content-type" not in load.headers
    again = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "b", "lora_path": str(b)})
    assert again.status_code == 400 and again.json()["error"]["type"] == "InvalidUserInput"
    bad = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "c", "lora_path": str(tmp_path / "x")})
    assert bad.status_code == 404
    assert bad.json()["error"] == {
        "message": f"Loading lora c failed: No adapter found for {tmp_path / 'x'}",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }
    assert [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]] == ["base", "a", "b"]

    base, by_a, by_b = _text(url, "base"), _text(url, "a"), _text(url, "b")
    assert len({base, by_a, by_b}) == 3 and _text(url, "a") == by_a

    gone = httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": "b"})
    assert gone.status_code == 200 and gone.text == "Success: LoRA adapter 'b' removed successfully."
    assert httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": "b"}).status_code == 404
    r = httpx.post(url + "/v1/completions", json={**PROMPT, "model": "b"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError"


def test_swaps_cost_time_and_show_in_metrics(start_sim: Start, tmp_path: Path) -> None:
    a, b = write_adapter(tmp_path / "a"), write_adapter(tmp_path / "b")
    url = start_sim("--served-model-name", "base", "--profile", "small", "--step-base-ms", "2",
                    "--enable-lora", "--max-loras", "1", "--lora-swap-ms", "300",
                    "--lora-modules", f"a={a}", f"b={b}")  # fmt: skip

    def elapsed(model: str) -> float:
        t0 = time.monotonic()
        r = httpx.post(
            url + "/v1/completions",
            json={"model": model, "prompt": "hi", "max_tokens": 3, "ignore_eos": True},
        )
        assert r.status_code == 200
        return time.monotonic() - t0

    cold, warm, swapped = elapsed("a"), elapsed("a"), elapsed("b")
    assert cold > 0.28 and swapped > 0.28 and swapped - warm > 0.15
    assert _swaps(url) == 2
    (info,) = [
        line for line in _metric_lines(url, "vllm:lora_requests_info{") if 'running_lora_adapters=""' in line
    ]
    assert 'max_lora="1"' in info and 'waiting_lora_adapters=""' in info
    assert float(info.rsplit(" ", 1)[1]) == pytest.approx(time.time(), abs=60)  # a timestamp, like vLLM
    named = _metric_lines(url, 'vllm:lora_requests_info{max_lora="1",running_lora_adapters="b"')
    assert named, "the label set of the step that ran b keeps its sample"


def test_without_runtime_updating_the_routes_do_not_exist(start_sim: Start, tmp_path: Path) -> None:
    url = start_sim("--enable-lora", runtime=False)
    r = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "b", "lora_path": str(tmp_path)})
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    assert _metric_lines(url, "vllm:lora_requests_info") == []  # no step yet: no sample


def test_a_static_adapter_that_does_not_load_stops_the_start(tmp_path: Path) -> None:
    args = ["--port", str(free_port()), "--enable-lora", "--lora-modules", f"a={tmp_path / 'none'}"]
    done = subprocess.run([sys.executable, "-m", "eval.sim.cli", *args], capture_output=True, timeout=30)
    assert done.returncode == 2 and b"No adapter found" in done.stderr
