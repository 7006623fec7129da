"""pools.drift: the pure comparison of two greedy trajectories (table-tested), and its answer parsing."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pools.drift import Comparison, Step, breaches, compare, summarize, top_kl
from pools.drift_answer import (
    DriftAnswerError,
    canary_body,
    prompt_logprobs,
    prompt_scores,
    trajectory,
)

TOP = (("a", -0.1), ("b", -2.5), ("c", -4.0))


def steps(*spec: tuple[str, float]) -> list[Step]:
    return [Step(t, lp, ((t, lp), ("zz", lp - 3.0))) for t, lp in spec]


ABC = steps(("x", -0.5), ("y", -0.25), ("z", -1.0))


def test_identical_trajectories_compare_as_exactly_zero() -> None:
    c = compare(ABC, list(ABC))
    assert c == Comparison(
        length_a=3,
        length_b=3,
        match=True,
        divergence=None,
        shared=3,
        mean_abs_logprob=0.0,
        max_abs_logprob=0.0,
        kl=0.0,
        topk_overlap=1.0,
        compared=3,
        nonfinite=0,
    )
    s = summarize([c, c])
    assert (s.match_ratio, s.mean_abs_logprob, s.max_abs_logprob, s.kl, s.topk_overlap) == (1, 0, 0, 0, 1)
    assert s.first_divergence is None and s.mean_divergence is None and s.positions == 6
    assert breaches(s, 0.0, 0.0, 1.0) == ()


@pytest.mark.parametrize(
    ("a", "b", "divergence", "shared", "mean_abs", "max_abs", "compared"),
    [
        # the same tokens, logprobs apart by 0.25 and 0.5
        (ABC, steps(("x", -0.25), ("y", -0.25), ("z", -0.5)), None, 3, 0.25, 0.5, 3),
        # diverges at 1: |Δ| over position 0 only, distributions over 0..1 (the same context up to 1)
        (ABC, steps(("x", -0.75), ("q", -0.25), ("z", -1.0)), 1, 1, 0.25, 0.25, 2),
        # diverges at the first token: no shared prefix, position 0's distributions still compare
        (ABC, steps(("q", -0.5), ("y", -0.25)), 0, 0, 0.0, 0.0, 1),
        # one is a prefix of the other: it diverges where the shorter ended
        (ABC, ABC[:2], 2, 2, 0.0, 0.0, 2),
        # empty against non-empty, and empty against empty
        ([], ABC, 0, 0, 0.0, 0.0, 0),
        ([], [], None, 0, 0.0, 0.0, 0),
    ],
)
def test_shapes(
    a: list[Step],
    b: list[Step],
    divergence: int | None,
    shared: int,
    mean_abs: float,
    max_abs: float,
    compared: int,
) -> None:
    c = compare(a, b)
    assert (c.divergence, c.shared, c.compared) == (divergence, shared, compared)
    assert c.match is (divergence is None)
    assert c.mean_abs_logprob == pytest.approx(mean_abs)
    assert c.max_abs_logprob == pytest.approx(max_abs)
    assert (c.length_a, c.length_b) == (len(a), len(b))


def test_nonfinite_logprobs_are_left_out_and_counted() -> None:
    a = steps(("x", -0.5), ("y", math.nan), ("z", -math.inf), ("w", -1.0))
    b = steps(("x", -0.75), ("y", -0.25), ("z", -1.0), ("w", -1.0))
    c = compare(a, b)
    assert c.match and c.nonfinite == 2
    assert c.mean_abs_logprob == pytest.approx(0.125)  # (0.25 + 0) / 2
    assert all(math.isfinite(x) for x in (c.kl, c.topk_overlap, c.mean_abs_logprob))
    s = summarize([c])
    assert s.positions == 2 and s.nonfinite == 2 and s.mean_abs_logprob == pytest.approx(0.125)


def test_missing_top_logprobs_skip_the_kl_but_not_the_deltas() -> None:
    a = [Step("x", math.nan), Step("y", -0.5)]  # NaN chosen token and no alternatives: nothing listed
    b = [Step("x", -0.5, TOP), Step("y", -0.75, TOP)]
    c = compare(a, b)
    assert c.compared == 1  # position 0: side a lists nothing finite
    assert c.mean_abs_logprob == pytest.approx(0.25) and c.nonfinite == 1


def test_top_kl_estimator() -> None:
    same = dict(TOP)
    assert top_kl(same, dict(TOP)) == (0.0, 1.0)
    assert top_kl({}, same) is None
    # b misses "c": floored at b's smallest listed logprob (-2.5), both renormalised over {a, b, c}
    b = {"a": -0.1, "b": -2.5}
    kl, jac = top_kl(same, b) or (math.nan, math.nan)
    pa = [math.exp(v) for v in (-0.1, -2.5, -4.0)]
    pb = [math.exp(v) for v in (-0.1, -2.5, -2.5)]
    pa = [x / sum(pa) for x in pa]
    pb = [x / sum(pb) for x in pb]
    assert kl == pytest.approx(sum(p * math.log(p / q) for p, q in zip(pa, pb, strict=True)))
    assert kl > 0 and jac == pytest.approx(2 / 3)
    # very negative logprobs do not underflow to a division by zero
    deep = {"a": -800.0, "b": -801.0}
    assert top_kl(deep, {"a": -801.0, "b": -800.0}) is not None


def test_a_drifting_pool_breaches_its_bounds() -> None:
    drifted = compare(ABC, steps(("x", -0.75), ("q", -0.25)))
    s = summarize([compare(ABC, ABC), drifted])
    assert s.match_ratio == 0.5 and s.diverged == 1 and s.first_divergence == 1 and s.mean_divergence == 1
    assert s.mean_abs_logprob == pytest.approx(0.25 / 4)  # one Δ of 0.25 over 3 + 1 shared positions
    assert breaches(s, max_mean_abs_logprob=0.01, max_kl=None, min_match_ratio=0.9) == (
        "mean_abs_logprob",
        "match_ratio",
    )
    assert breaches(s) == ()
    assert summarize([]).match_ratio == 1.0


def _answer(content: Any, **extra: Any) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [{"index": 0, "logprobs": {"content": content}}], **extra}


def test_trajectory_from_a_chat_answer() -> None:
    content = [
        {"token": "x", "logprob": -0.5, "top_logprobs": [{"token": "x", "logprob": -0.5}]},
        {"token": "y", "logprob": -9999.0, "top_logprobs": []},  # vLLM's -inf
        {"token": "z", "logprob": math.nan},  # no top_logprobs key at all, a NaN logprob
    ]
    got = trajectory(_answer(content))
    assert got[0] == Step("x", -0.5, (("x", -0.5),))
    assert got[1].logprob == -math.inf and got[1].top == ()
    assert math.isnan(got[2].logprob) and got[2].top == ()
    c = compare(got, got)  # a trajectory with -inf and NaN still compares with itself as zero
    assert c.match and c.nonfinite == 2 and c.mean_abs_logprob == 0.0 and c.kl == 0.0


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ([1, 2], "not a chat completion"),
        ({"error": {"message": "boom"}}, "boom"),
        ({"object": "text_completion", "choices": [{"text": "hi"}]}, "not a chat completion"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"message": {"content": "hi"}}]}, "no token logprobs"),
        (_answer([{"token": "x", "logprob": "high"}]), "not a number"),
        (_answer([{"logprob": -1.0}]), "not a token entry"),
    ],
)
def test_answers_that_cannot_be_compared(answer: Any, says: str) -> None:
    with pytest.raises(DriftAnswerError, match=says):
        trajectory(answer)


def test_prompt_logprobs_compare_the_same_prompt_tokens() -> None:
    a = prompt_logprobs({"prompt_logprobs": [None, {"5": {"logprob": -1.0}}, {"7": {"logprob": -2.0}}]})
    b = prompt_logprobs({"prompt_logprobs": [None, {"5": {"logprob": -1.5}}, {"7": {"logprob": -2.0}}]})
    assert a is not None and b is not None
    s = prompt_scores(a, b)
    assert (s.positions, s.samples, s.same_length) == (2, 2, True)
    assert s.mean_abs_logprob == pytest.approx(0.25) and s.max_abs_logprob == pytest.approx(0.5)
    same = prompt_scores(a, a)
    assert same.mean_abs_logprob == 0.0 and same.max_abs_logprob == 0.0
    assert prompt_logprobs({"choices": []}) is None
    assert not prompt_scores(a, a[:1]).same_length


def test_canary_body_is_greedy_with_logprobs() -> None:
    body = canary_body("tiny", "hi", 16, 5, prompt_lp=True)
    assert body["temperature"] == 0 and body["logprobs"] is True and body["top_logprobs"] == 5
    assert body["prompt_logprobs"] == 1
    assert "prompt_logprobs" not in canary_body("tiny", "hi", 16, 5, prompt_lp=False)
