"""The calibrated input estimate (gateway.budget.estimate): conservative until it has samples, then
close to the pool's real counts and still above them; a lying pool cannot take it under the floor."""

from __future__ import annotations

import random

from eval.sim.tokenizer import count_tokens
from gateway.budget.estimate import FLOOR, MIN_SAMPLES, WINDOW, InputSize, PoolEstimate
from gateway.edge.exchange import Kind
from gateway.relay.normalize import input_size

WORDS = "the budget holds under every shape of request and the pool reports what it counted".split()


def english(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def cjk(rng: random.Random, chars: int) -> str:
    return "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(chars))


def prompt_size(text: str) -> InputSize:
    return input_size(Kind.COMPLETIONS, {"prompt": text})


def feed(est: PoolEstimate, texts: list[str]) -> None:
    for t in texts:
        est.observe(prompt_size(t), count_tokens(t))


def test_one_token_per_byte_until_enough_samples() -> None:
    rng = random.Random(1)
    est = PoolEstimate(1.0)
    texts = [english(rng, 200) for _ in range(MIN_SAMPLES - 1)]
    feed(est, texts)
    size = prompt_size(texts[0])
    assert not est.calibrated
    assert est.tokens(size) == size.text_bytes + size.fixed


def test_calibrated_estimate_is_above_and_close_to_the_real_count() -> None:
    rng = random.Random(2)
    est = PoolEstimate(1.0)
    feed(est, [english(rng, rng.randint(100, 2000)) for _ in range(600)])
    assert est.calibrated
    for _ in range(200):
        text = english(rng, rng.randint(100, 2000))
        real = count_tokens(text)
        assert real <= est.tokens(prompt_size(text)) <= 1.5 * real


def test_short_prompts_stay_covered_by_their_allowance() -> None:
    rng = random.Random(3)
    est = PoolEstimate(1.0)
    feed(est, [english(rng, rng.randint(1, 2000)) for _ in range(300)])
    for n in range(1, 30):
        text = english(rng, n)
        assert est.tokens(prompt_size(text)) >= count_tokens(text)


def test_wide_characters_are_calibrated_apart_from_ascii() -> None:
    rng = random.Random(4)
    est = PoolEstimate(1.0)
    feed(est, [english(rng, 400) for _ in range(100)])
    text = english(rng, 400)
    before = est.tokens(prompt_size(text))
    # A burst of CJK (few bytes per token in a byte-level BPE: here one token per character) ...
    for _ in range(100):
        t = cjk(rng, 300)
        est.observe(prompt_size(t), len(t))
    # ... leaves the English estimate alone, and the CJK one is above its real count.
    assert est.tokens(prompt_size(text)) == before
    t = cjk(rng, 300)
    assert len(t) <= est.tokens(prompt_size(t)) <= 1.5 * len(t)


def test_a_lying_pool_cannot_shrink_the_estimate_under_the_floor() -> None:
    est = PoolEstimate(1.0)
    text = "x" * 4000
    for _ in range(MIN_SAMPLES * 4):
        est.observe(prompt_size(text), 1)  # "one token", for 4 kB
    size = prompt_size(text)
    assert est.tokens(size) >= int(size.text_bytes * FLOOR[0])


def test_a_pool_lying_high_is_capped_at_one_token_per_byte() -> None:
    est = PoolEstimate(1.0)
    text = "y" * 2000
    for _ in range(MIN_SAMPLES):
        est.observe(prompt_size(text), 10**9)
    size = prompt_size(text)
    assert est.tokens(size) <= int(size.text_bytes * 1.1) + size.fixed + 512


def test_the_window_forgets_old_traffic() -> None:
    rng = random.Random(5)
    est = PoolEstimate(1.0)
    code = "x=(a[1]+b[2])*{c};" * 60  # punctuation: a token per character in the simulator
    feed(est, [code] * MIN_SAMPLES)
    high = est.tokens(prompt_size(english(rng, 400)))
    feed(est, [english(rng, 400) for _ in range(2 * WINDOW)])
    text = english(rng, 400)
    assert est.tokens(prompt_size(text)) < high
    assert est.tokens(prompt_size(text)) >= count_tokens(text)


def test_long_prompts_are_not_reserved_at_the_short_ones_worst() -> None:
    """A short snippet varies far more in density than a long text: each size band keeps its own rate,
    so the densest short prompts seen do not set the rate of long ones."""
    rng = random.Random(6)
    est = PoolEstimate(1.0)
    dense = "x=(a[1]+b[2])*{c};"  # a token per character in the simulator
    for _ in range(3 * MIN_SAMPLES):
        short = english(rng, 40) + dense * 5  # ~300 bytes, a third of it punctuation
        est.observe(prompt_size(short), count_tokens(short))
        long = english(rng, 4000)  # ~25 KB of prose
        est.observe(prompt_size(long), count_tokens(long))
    long = english(rng, 4000)
    assert count_tokens(long) <= est.tokens(prompt_size(long)) <= 1.3 * count_tokens(long)
    short = english(rng, 40) + dense * 5
    assert est.tokens(prompt_size(short)) >= count_tokens(short)


def test_a_band_without_samples_borrows_a_safe_rate() -> None:
    rng = random.Random(7)
    est = PoolEstimate(1.0)
    feed(est, [english(rng, 200) for _ in range(MIN_SAMPLES)])  # ~1.2 KB prompts only
    # Longer prompts: the shorter band's rate (denser text, so safe).
    long = english(rng, 8000)
    assert count_tokens(long) <= est.tokens(prompt_size(long)) <= 1.5 * count_tokens(long)
    # Shorter prompts: the longer band's rate, raised, never above the configured one token per byte.
    short = english(rng, 60)
    size = prompt_size(short)
    assert count_tokens(short) <= est.tokens(size) <= size.text_bytes + size.fixed
