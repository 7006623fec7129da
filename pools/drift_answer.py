"""The drift canary's wire shapes: the request both pools get, and their answers as plain data.

`canary_body` is the one request of a drift check (greedy, chosen-token logprobs and top-k
alternatives, optionally vLLM's `prompt_logprobs`); `trajectory` turns an OpenAI chat completion into
`pools.drift.Step`s and refuses answers the comparison cannot use with `DriftAnswerError`, whose message
says what was wrong (the CLI prints it; the gateway counts it). `prompt_scores` compares vLLM's
`prompt_logprobs`: both pools score the *same* prompt tokens (teacher forcing), so unlike the
continuation this never diverges.

vLLM serialises a -inf logprob as -9999.0; values at or below `NEG_INF_SENTINEL` are read as -inf
(left out of |Δ logprob| by the comparison, like NaN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pools.drift import Step

__all__ = [
    "CANARY_PROMPTS",
    "MAX_TOP_LOGPROBS",
    "NEG_INF_SENTINEL",
    "DriftAnswerError",
    "PromptScore",
    "canary_body",
    "prompt_logprobs",
    "prompt_scores",
    "trajectory",
]

MAX_TOP_LOGPROBS = 20  # OpenAI's and vLLM's (default --max-logprobs) limit
NEG_INF_SENTINEL = -9999.0

# The shipped canary set (`llmgw drift` and the gateway's canary default to it). Short on purpose (a
# check is prompts x 2 greedy calls) and varied in kind, so that a drift that shows only on code,
# numbers or repetition is not missed: prose, a list, arithmetic, code, a translation, a repetition.
CANARY_PROMPTS: tuple[str, ...] = (
    "Explain in two sentences why the sky is blue.",
    "List five prime numbers greater than 100.",
    "What is 17 multiplied by 23? Show the steps.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Translate into French: The meeting is moved to Thursday morning.",
    "Repeat the word 'gateway' ten times, separated by commas.",
)


class DriftAnswerError(ValueError):
    """An answer the comparison cannot use (not a chat completion, no logprobs, bad values)."""


def canary_body(
    model: str, prompt: str, max_tokens: int, top_logprobs: int, prompt_lp: bool
) -> dict[str, Any]:
    """Greedy (temperature 0, seed fixed) so that two agreeing pools give the same tokens."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 0,
        "logprobs": True,
        "top_logprobs": top_logprobs,
        "stream": False,
    }
    if prompt_lp:
        body["prompt_logprobs"] = 1  # vLLM extension: top-1 plus the prompt's own token per position
    return body


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise DriftAnswerError(f"{where}: logprob is {type(v).__name__}, not a number")
    x = float(v)
    return -math.inf if x <= NEG_INF_SENTINEL else x


def _step(entry: Any, i: int) -> Step:
    where = f"choices[0].logprobs.content[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        raise DriftAnswerError(f"{where}: not a token entry")
    top: list[tuple[str, float]] = []
    alts = entry.get("top_logprobs")
    for j, alt in enumerate(alts if isinstance(alts, list) else []):
        if isinstance(alt, dict) and isinstance(alt.get("token"), str):
            top.append((alt["token"], _number(alt.get("logprob"), f"{where}.top_logprobs[{j}]")))
    return Step(entry["token"], _number(entry.get("logprob"), where), tuple(top))


def _choice(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise DriftAnswerError(f"the answer is a JSON {type(answer).__name__}, not a chat completion")
    if "error" in answer and "choices" not in answer:
        err = answer["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise DriftAnswerError(f"the pool answered an error: {msg}")
    choices = answer.get("choices")
    if answer.get("object") not in (None, "chat.completion") or not isinstance(choices, list) or not choices:
        raise DriftAnswerError("not a chat completion (no choices)")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise DriftAnswerError("choices[0] is not an object")
    return choice


def trajectory(answer: Any) -> list[Step]:
    """The chosen tokens of a chat completion's first choice, with their logprobs and top-k."""
    choice = _choice(answer)
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list):
        raise DriftAnswerError(
            "the answer carries no token logprobs (choices[0].logprobs.content): the pool ignores "
            "`logprobs: true`, so it cannot be compared"
        )
    return [_step(e, i) for i, e in enumerate(content)]


def prompt_logprobs(answer: Any) -> list[dict[str, float]] | None:
    """vLLM's `prompt_logprobs` (top level of a chat answer): per prompt position, token id -> logprob.
    None when the pool sent none (not vLLM, or not asked). The first position (no context) is skipped."""
    raw = answer.get("prompt_logprobs") if isinstance(answer, dict) else None
    if not isinstance(raw, list):
        return None
    out: list[dict[str, float]] = []
    for i, pos in enumerate(raw):
        if pos is None:
            continue
        if not isinstance(pos, dict):
            raise DriftAnswerError(f"prompt_logprobs[{i}] is not an object")
        out.append(
            {
                tok: _number(v.get("logprob") if isinstance(v, dict) else v, f"prompt_logprobs[{i}]")
                for tok, v in pos.items()
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class PromptScore:
    positions: int  # prompt positions compared (the shorter side's, when tokenizations differ)
    samples: int  # (position, token) pairs with finite logprobs on both sides
    mean_abs_logprob: float
    max_abs_logprob: float
    same_length: bool  # False: the pools tokenised the prompt differently (different tokenizers)


def prompt_scores(a: Sequence[dict[str, float]], b: Sequence[dict[str, float]]) -> PromptScore:
    """|Δ logprob| over every token id both pools list at the same prompt position."""
    deltas: list[float] = []
    for pa, pb in zip(a, b, strict=False):
        for tok in sorted(pa.keys() & pb.keys()):
            x, y = pa[tok], pb[tok]
            if math.isfinite(x) and math.isfinite(y):
                deltas.append(abs(x - y))
    return PromptScore(
        positions=min(len(a), len(b)),
        samples=len(deltas),
        mean_abs_logprob=math.fsum(deltas) / len(deltas) if deltas else 0.0,
        max_abs_logprob=max(deltas, default=0.0),
        same_length=len(a) == len(b),
    )
