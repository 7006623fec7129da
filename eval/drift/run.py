"""The drift check's I/O: each canary prompt to both pools, answers parsed, compared (pools.drift).

Sequential and synchronous on purpose: a check is a handful of greedy calls, and one request at a time
keeps both engines' batches identical in size (batch composition can change numerics on some engines).
`prompt_logprobs` is asked for first; a pool that refuses it with a 400 naming it is asked again
without, and the report says the prompt scoring was unavailable on that pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from eval.drift.targets import Target
from pools.drift import Comparison, Step, Summary, compare, summarize
from pools.drift_answer import (
    DriftAnswerError,
    PromptScore,
    canary_body,
    prompt_logprobs,
    prompt_scores,
    trajectory,
)


class CheckError(RuntimeError):
    """A pool that could not be asked or whose answer cannot be compared; the message names it."""


@dataclass(frozen=True, slots=True)
class CheckSettings:
    max_tokens: int = 32
    top_logprobs: int = 5
    prompt_logprobs: bool = True


@dataclass(frozen=True, slots=True)
class PromptResult:
    prompt: str
    a: list[Step]
    b: list[Step]
    comparison: Comparison
    prompt_score: PromptScore | None  # None: a pool sent no prompt_logprobs


@dataclass(frozen=True, slots=True)
class Check:
    results: list[PromptResult]
    summary: Summary
    prompt_score: PromptScore | None  # every prompt's prompt positions pooled
    prompt_logprobs: dict[str, bool]  # per target label: did it return prompt_logprobs


def _error_text(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        return str(msg) if msg else resp.text[:300]
    except (ValueError, AttributeError):
        return resp.text[:300]


def _post(client: httpx.Client, t: Target, body: dict[str, Any]) -> httpx.Response:
    try:
        return client.post(f"{t.url}/v1/chat/completions", json=body, headers=t.headers)
    except httpx.HTTPError as exc:
        raise CheckError(f"{t.label} ({t.url}): unreachable ({type(exc).__name__}: {exc})") from None


def ask(client: httpx.Client, t: Target, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A chat answer of `t` and whether it was asked with prompt_logprobs (dropped after a 400 on it)."""
    resp = _post(client, t, body)
    asked_prompt = "prompt_logprobs" in body
    if resp.status_code == 400 and asked_prompt and "prompt_logprobs" in _error_text(resp):
        body = {k: v for k, v in body.items() if k != "prompt_logprobs"}
        resp, asked_prompt = _post(client, t, body), False
    if resp.status_code != 200:
        raise CheckError(f"{t.label} ({t.url}): HTTP {resp.status_code}: {_error_text(resp)}")
    try:
        answer = resp.json()
    except ValueError:
        raise CheckError(f"{t.label} ({t.url}): the answer is not JSON: {resp.text[:200]!r}") from None
    if not isinstance(answer, dict):
        raise CheckError(f"{t.label} ({t.url}): the answer is not a chat completion object")
    return answer, asked_prompt


def _one(client: httpx.Client, t: Target, prompt: str, s: CheckSettings) -> tuple[list[Step], Any]:
    body = canary_body(t.model, prompt, s.max_tokens, s.top_logprobs, s.prompt_logprobs)
    answer, _ = ask(client, t, body)
    try:
        return trajectory(answer), prompt_logprobs(answer)
    except DriftAnswerError as exc:
        raise CheckError(f"{t.label} ({t.url}): {exc}") from None


def run_check(client: httpx.Client, a: Target, b: Target, prompts: list[str], s: CheckSettings) -> Check:
    results: list[PromptResult] = []
    pooled_a: list[dict[str, float]] = []
    pooled_b: list[dict[str, float]] = []
    had = {a.label: False, b.label: False}
    for prompt in prompts:
        ta, pa = _one(client, a, prompt, s)
        tb, pb = _one(client, b, prompt, s)
        had[a.label] |= pa is not None
        had[b.label] |= pb is not None
        score = None
        if pa is not None and pb is not None:
            score = prompt_scores(pa, pb)
            if score.same_length:  # different tokenisations are not position-comparable
                pooled_a += pa
                pooled_b += pb
        results.append(PromptResult(prompt, ta, tb, compare(ta, tb), score))
    overall = prompt_scores(pooled_a, pooled_b) if pooled_a else None
    return Check(results, summarize([r.comparison for r in results]), overall, had)
