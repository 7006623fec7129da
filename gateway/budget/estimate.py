"""The input-token estimate of a reservation, calibrated per pool from the usage the pool settles.

Admission needs an upper bound of the prompt's tokens before the pool has seen it, without running a
tokenizer on the hot path. `relay.normalize.prepare` measures the prompt while validating it
(`InputSize`: text bytes, the bytes beyond one per character, tokens counted exactly or allowed flat);
here text bytes become tokens at a rate learnt from what the pool reported (docs/design/019):

    estimate = int(text_bytes * rate * MARGIN) + fixed + excess

- `rate` is the highest `(prompt_tokens - fixed) / text_bytes` seen among the last `WINDOW` to
  `2 * WINDOW` prompts of the same size band (`BANDS`: 256 B, 1 KB, 4 KB, 16 KB and up; two
  alternating halves give a sliding max in O(1)). Bands, because a short slice of text varies far
  more in density than a long one: the densest 300-byte snippet of English is twice the density of
  50 KB of it, and a maximum over all sizes would reserve long prompts at the short ones' worst. A
  band without `MIN_SAMPLES` samples borrows the nearest shorter band's rate (higher, so safe), or
  else the nearest longer band's times `SHORTER` per band; with none, the configured
  `input_bytes_per_token` (1.0: one token per byte, which no tokenizer exceeds on text) is used.
- `excess` is the highest shortfall seen (any prompt size, prompts under 256 B included) once a rate
  is known: what a template adds beyond the per-message allowance (a default system prompt, say).
- Mostly-ASCII text and text of wide characters (CJK: three bytes each, about one token each) are
  calibrated apart, so a pool's Chinese traffic does not triple its English reservations.
- A pool that lies low (tiny prompt_tokens) cannot take the rate under `FLOOR` tokens per byte (no
  real tokenizer packs more than 8 bytes of ASCII or 12 bytes of CJK into a token on average); one that
  lies high is capped at one token per byte. Settlement charges what the pool reports in either case
  (gateway.budget.usage bounds it); the estimate only decides admission.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple


class InputSize(NamedTuple):
    """A prompt's size as the estimate needs it, measured while the prompt is validated: text is turned
    into tokens at a calibrated rate, `fixed` is counted as is. (A NamedTuple, not a frozen dataclass:
    made per request, and a frozen dataclass's `__init__` is an `object.__setattr__` call per field.)"""

    text_bytes: int  # UTF-8 bytes of the text (messages, prompts, tools)
    extra_bytes: int  # of those, the bytes beyond one per character (0 for ASCII, 2 per CJK character)
    fixed: int  # tokens counted exactly or allowed flat: token ids, template markers, images


MIN_SAMPLES = 50  # samples of a band before its calibrated rate replaces the configured one
WINDOW = 256  # samples per half of a band's sliding window
BANDS = (256, 1024, 4096, 16384)  # lower bounds of the size bands (bytes of text); shorter: no band
MARGIN = 1.1  # headroom over the highest rate seen
SHORTER = 1.25  # a band with no calibrated band below it: the next longer band's rate times this
FLOOR = (1 / 8, 1 / 12)  # lowest tokens per byte assumed: mostly-ASCII text, wide-character text
MAX_EXCESS = 512  # the most template tokens beyond the allowance a sample may teach


def _band(text_bytes: int) -> int:
    """The size band of a prompt: -1 under BANDS[0], else the index of the highest bound reached."""
    return bisect_right(BANDS, text_bytes) - 1


class _Band:
    """One size band's sliding maximum of tokens per byte."""

    __slots__ = ("samples", "half", "rate", "prev_rate")

    def __init__(self) -> None:
        self.samples = 0
        self.half = 0  # samples in the current half-window
        self.rate = self.prev_rate = 0.0

    def observe(self, rate: float) -> bool:
        """Count a sample; True when the band's sliding max may have changed (rates to recompute)."""
        changed = rate > self.rate
        if changed:
            self.rate = rate
        self.samples += 1
        self.half += 1
        if self.half >= WINDOW:
            self.prev_rate, self.rate, self.half = self.rate, 0.0, 0
            changed = True
        return changed and self.samples >= MIN_SAMPLES or self.samples == MIN_SAMPLES


class _Rate:
    """One class of text (mostly ASCII, or wide characters): its bands' rates and the excess."""

    __slots__ = ("floor", "configured", "bands", "per_byte", "excess", "prev_excess", "half")

    def __init__(self, bytes_per_token: float, floor: float) -> None:
        self.floor = floor
        self.configured = 1 / bytes_per_token
        self.bands = tuple(_Band() for _ in BANDS)
        self.per_byte = [self.configured] * len(BANDS)  # what estimates use, per band
        self.excess = self.prev_excess = 0
        self.half = 0

    def tokens(self, text_bytes: int) -> int:
        # Per request: conditionals, not max() (a builtin call and an argument tuple each).
        band = bisect_right(BANDS, text_bytes) - 1
        excess = self.excess if self.excess >= self.prev_excess else self.prev_excess
        return int(text_bytes * self.per_byte[band if band > 0 else 0]) + excess

    def observe(self, text_bytes: int, tokens: int) -> None:
        """`tokens`: the reported prompt tokens minus the fixed part of the estimate."""
        band = _band(text_bytes)
        if band >= 0:
            rate = tokens / text_bytes
            if self.bands[band].observe(rate if rate < 1.0 else 1.0):
                self._recompute()  # rarely: most samples are under the window's max
        per_byte = self.per_byte[band if band > 0 else 0]
        if per_byte != self.configured:  # a rate is known: what the template adds beyond it
            short = tokens - int(text_bytes * per_byte)
            if short > self.excess:
                self.excess = short if short < MAX_EXCESS else MAX_EXCESS
        self.half += 1
        if self.half >= WINDOW:
            self.prev_excess, self.excess, self.half = self.excess, 0, 0

    def _recompute(self) -> None:
        """Each band's rate: its own once calibrated, else the nearest shorter calibrated band's, else
        the nearest longer one's raised by `SHORTER` per band (shorter text varies more), else the
        configured one."""
        own = [
            max(b.rate, b.prev_rate, self.floor) * MARGIN if b.samples >= MIN_SAMPLES else 0.0
            for b in self.bands
        ]
        for i in range(len(own)):
            shorter = [r for r in own[: i + 1] if r]
            longer = [(r, j - i) for j, r in enumerate(own) if r and j > i]
            if shorter:
                self.per_byte[i] = shorter[-1]
            elif longer:
                rate, steps = longer[0]
                self.per_byte[i] = min(rate * SHORTER**steps, max(rate, self.configured))
            else:
                self.per_byte[i] = self.configured

    @property
    def calibrated(self) -> bool:
        return any(b.samples >= MIN_SAMPLES for b in self.bands)


class PoolEstimate:
    """A pool's calibrated input estimate (one per pool and gateway process)."""

    __slots__ = ("_narrow", "_wide")

    def __init__(self, bytes_per_token: float) -> None:
        self._narrow = _Rate(bytes_per_token, FLOOR[0])
        self._wide = _Rate(bytes_per_token, FLOOR[1])

    def _class(self, size: InputSize) -> _Rate:
        # Over 1/8 of the bytes beyond one per character: mostly wide characters.
        return self._wide if size.extra_bytes * 8 > size.text_bytes else self._narrow

    def tokens(self, size: InputSize) -> int:
        """An upper bound of the prompt's tokens on this pool."""
        text = size.text_bytes
        if not text:
            return size.fixed
        rate = self._wide if size.extra_bytes * 8 > text else self._narrow  # _class, inlined: per request
        return rate.tokens(text) + size.fixed

    def observe(self, size: InputSize, prompt_tokens: int) -> None:
        """What the pool reported for a prompt of `size` (truthful, validated usage only)."""
        if size.text_bytes:
            above = prompt_tokens - size.fixed
            self._class(size).observe(size.text_bytes, above if above > 0 else 0)

    @property
    def calibrated(self) -> bool:
        return self._narrow.calibrated or self._wide.calibrated


class InputEstimates:
    """Every pool's estimate, made on first use (pools are a bounded set from the configuration)."""

    __slots__ = ("_bytes_per_token", "_pools")

    def __init__(self, bytes_per_token: float) -> None:
        self._bytes_per_token = bytes_per_token
        self._pools: dict[str, PoolEstimate] = {}

    def of(self, pool: str) -> PoolEstimate:
        est = self._pools.get(pool)
        if est is None:
            est = self._pools[pool] = PoolEstimate(self._bytes_per_token)
        return est
