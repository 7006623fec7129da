"""A three-tier `success` alias through a whole gateway in this process (pools played by a
MockTransport): the success predictor runs on the router's inference thread with the real encoder, the
start tier follows the per-tier probabilities, the header keeps one number and the request log and the
routing span carry the probabilities per tier."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest

from gateway.app import GatewayApp
from gateway.config import Policy
from gateway.observability.request_log import LOGGER
from gateway.settings import Settings
from gateway.upstream.mock import MockReply, MockTransport
from gateway.upstream.transport import Request
from router.difficulty import DifficultyModel, SuccessScorer
from router.tiers import tier_columns
from tests.support.fake_upstream import OK_BODY

pytestmark = pytest.mark.needs_encoder  # the real encoder embeds every prompt

POOLS = {
    "small": "http://small.test:8000",
    "medium": "http://medium.test:8000",
    "large": "http://large.test:8000",
}
LIKE = {"small": "Llama-3.1-8B", "medium": "Llama-3.1-70B", "large": "gpt-4o"}
# Per model of the predictor (its column order is not the tiers' order: `like` maps them).
ROWS = {
    "easy": {"gpt-4o": 0.97, "Llama-3.1-8B": 0.95, "Llama-3.1-70B": 0.96},
    "middling": {"gpt-4o": 0.90, "Llama-3.1-8B": 0.40, "Llama-3.1-70B": 0.87},
    "hard": {"gpt-4o": 0.85, "Llama-3.1-8B": 0.10, "Llama-3.1-70B": 0.55},
}


class _Predictor:
    """In-memory SuccessPredictor: the row of the keyword in the prompt. It checks that it is handed
    what serving promises: one L2-normalized encoder embedding per text."""

    models = ("gpt-4o", "Llama-3.1-70B", "Llama-3.1-8B")
    manifest: Mapping[str, Any] = {}

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def index(self, name: str) -> int:
        return self.models.index(name)

    def predict(self, emb: npt.NDArray[np.float32], texts: Sequence[str]) -> npt.NDArray[np.float64]:
        assert emb.shape[0] == len(texts) and np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-3)
        self.calls.append(emb.shape)
        word = next(w for w in ROWS if any(w in t for t in texts))
        return np.asarray([[ROWS[word][m] for m in self.models]] * len(texts), dtype=np.float64)


class _Span:
    def __init__(self, name: str) -> None:
        self.name = name
        self.attributes: dict[str, Any] = {}

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value


class _Tracing:
    """TraceHooks that keep the child spans (what the routing stage writes on its span)."""

    enabled = True

    def __init__(self) -> None:
        self.spans: list[_Span] = []

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[_Span]:
        s = _Span(name)
        self.spans.append(s)
        yield s

    def attempt(self, *args: Any) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def start_request(self, kind: Any, headers: Any) -> Any:
        return object()

    def request_body(self, root: Any, kind: Any, body: Any) -> None:
        return None

    def end_request(self, root: Any, attributes: Any, status: int) -> None:
        return None

    def event(self, root: Any, name: str, attributes: Any) -> None:
        return None


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(record.getMessage()))


def _policy() -> Policy:
    return Policy.model_validate(
        {
            "pools": [
                {
                    "name": name,
                    "engine": "openai",
                    "model": f"{name}-model",
                    "endpoints": {"static": [url]},
                    "timeouts": {"connect_s": 1, "first_token_s": 2, "total_s": 5},
                }
                for name, url in POOLS.items()
            ],
            "models": [
                {
                    "name": "auto",
                    "max_tokens": {"default": 16, "cap": 64},
                    "route": {
                        "policy": {
                            "tiers": [{"pool": p, "like": LIKE[p]} for p in POOLS],
                            # The shipped predictor is not what this test routes by: the alias starts
                            # in fallback and the test puts its in-memory predictor in place.
                            "success": {
                                "tolerance": 0.05,
                                "model": "/nonexistent/success",
                                "on_unavailable": "fallback",
                            },
                        }
                    },
                }
            ],
            "tenancy": {"auth": "disabled"},
        }
    )


@pytest.fixture(autouse=True)
def _gc_as_it_was() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.fixture(scope="module")
def model() -> Iterator[DifficultyModel]:
    m = DifficultyModel.load()
    yield m
    m.close()


@asynccontextmanager
async def gateway(
    model: DifficultyModel, predictor: _Predictor, lines: _Lines, tracing: _Tracing
) -> AsyncIterator[tuple[httpx.AsyncClient, MockTransport]]:
    mock = MockTransport(
        lambda req: MockReply(200, orjson.dumps(OK_BODY), {"content-type": "application/json"})
    )
    log = logging.getLogger(LOGGER)
    log.addHandler(lines)  # before the app's request_logger(): it then adds no stdout handler
    try:
        app = GatewayApp(_policy(), Settings(request_log=True), tracing=tracing, transport=mock)
        ra = app.routed["auto"]
        assert ra.fallback is not None and ra.success is None  # the nonexistent artifact
        scorer = SuccessScorer(model, predictor, model.encoder, 32, cache_size=0)
        app.routed["auto"] = dataclasses.replace(
            ra,
            difficulty=model,
            success=scorer,
            columns=tier_columns(predictor, [t.like for t in ra.policy.tiers]),
            fallback=None,
        )
        async with app.lifespan(app.api):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=10) as client:
                yield client, mock
    finally:
        log.removeHandler(lines)


def _pool(req: Request) -> str:
    return next(name for name, url in POOLS.items() if req.base.startswith(url))


async def test_easy_prompts_start_cheap_hard_ones_higher_and_the_log_says_why(model: DifficultyModel) -> None:
    predictor, lines, tracing = _Predictor(), _Lines(), _Tracing()
    asks = {"easy": "small", "middling": "medium", "hard": "large"}
    async with gateway(model, predictor, lines, tracing) as (gw, mock):
        replies = {}
        for word in asks:
            body = {"model": "auto", "messages": [{"role": "user", "content": f"a {word} question: 2 + 2?"}]}
            replies[word] = await gw.post("/v1/chat/completions", json=body)
    assert [_pool(r) for r in mock.requests] == list(asks.values())
    assert predictor.calls == [(1, 384)] * 3  # one predictor call per request, on real embeddings
    for word, pool in asks.items():
        r = replies[word]
        assert r.status_code == 200 and r.headers["x-llmgw-tier"] == pool
        # One number in the header: the cheapest tier's predicted chance of failing.
        assert float(r.headers["x-llmgw-difficulty"]) == pytest.approx(
            1 - ROWS[word]["Llama-3.1-8B"], abs=1e-4
        )
    routes = [line["route"] for line in lines.lines]
    assert [r["start"] for r in routes] == list(asks.values())
    assert [r["tier"] for r in routes] == list(asks.values())
    assert routes[2]["success"] == [0.1, 0.55, 0.85] and routes[2]["tiers"] == list(POOLS)
    assert routes[0]["tolerance"] == 0.05
    spans = [s for s in tracing.spans if s.name == "routing"]
    assert [s.attributes["llmgw.route.success"] for s in spans] == [
        [ROWS[w][LIKE[p]] for p in POOLS] for w in asks
    ]
