"""The input-token estimate of a reservation, calibrated per pool from the usage the pool settles.

Admission needs an upper bound of the prompt's tokens before the pool has seen it, without running a
tokenizer on the hot path. `relay.normalize.prepare` measures the prompt while validating it
(`InputSize`: text bytes, the bytes beyond one per character, tokens counted exactly or allowed flat);
here text bytes become tokens at a rate learnt from what the pool reported (docs/design/019):

    estimate = int(text_bytes * rate * MARGIN) + fixed + excess

- `rate` is the highest `(prompt_tokens - fixed) / text_bytes` seen in the last `WINDOW` to
  `2 * WINDOW` samples of prompts of at least `SAMPLE_BYTES` (two alternating halves give a sliding max
  in O(1)); short prompts are ruled by their additive template tokens, not by the rate.
- `excess` is the highest shortfall seen (any prompt size) once the rate is known: what a template
  adds beyond the per-message allowance (a default system prompt, say).
- Until `MIN_SAMPLES` samples, the configured `input_bytes_per_token` (1.0: one token per byte, which
  no tokenizer exceeds on text) is used as is.
- Mostly-ASCII text and text of wide characters (CJK: three bytes each, about one token each) are
  calibrated apart, so a pool's Chinese traffic does not triple its English reservations.
- A pool that lies low (tiny prompt_tokens) cannot take the rate under `FLOOR` tokens per byte (no
  real tokenizer packs more than 8 bytes of ASCII or 12 bytes of CJK into a token on average); one that
  lies high is capped at one token per byte. Settlement charges what the pool reports in either case
  (gateway.budget.usage bounds it); the estimate only decides admission.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InputSize:
    """A prompt's size as the estimate needs it, measured while the prompt is validated: text is turned
    into tokens at a calibrated rate, `fixed` is counted as is."""

    text_bytes: int  # UTF-8 bytes of the text (messages, prompts, tools)
    extra_bytes: int  # of those, the bytes beyond one per character (0 for ASCII, 2 per CJK character)
    fixed: int  # tokens counted exactly or allowed flat: token ids, template markers, images


MIN_SAMPLES = 50  # samples per class before the calibrated rate replaces the configured one
WINDOW = 256  # samples per half of the sliding window
SAMPLE_BYTES = 256  # prompts shorter than this calibrate only the excess
MARGIN = 1.1  # headroom over the highest rate seen
FLOOR = (1 / 8, 1 / 12)  # lowest tokens per byte assumed: mostly-ASCII text, wide-character text
MAX_EXCESS = 512  # the most template tokens beyond the allowance a sample may teach


class _Rate:
    """One class's sliding maximum of tokens per byte, and of the excess."""

    __slots__ = ("floor", "samples", "half", "rate", "prev_rate", "excess", "prev_excess", "per_byte")

    def __init__(self, bytes_per_token: float, floor: float) -> None:
        self.floor = floor
        self.samples = 0
        self.half = 0  # samples in the current half-window
        self.rate = self.prev_rate = 0.0
        self.excess = self.prev_excess = 0
        self.per_byte = 1 / bytes_per_token  # what estimates use: configured until calibrated

    def observe(self, text_bytes: int, tokens: int) -> None:
        """`tokens`: the reported prompt tokens minus the fixed part of the estimate."""
        if text_bytes >= SAMPLE_BYTES:
            self.rate = max(self.rate, min(1.0, tokens / text_bytes))
            self.samples += 1
        if self.samples >= MIN_SAMPLES:
            self.per_byte = max(self.rate, self.prev_rate, self.floor) * MARGIN
            short = tokens - int(text_bytes * self.per_byte)
            self.excess = max(self.excess, min(MAX_EXCESS, short))
        self.half += 1
        if self.half >= WINDOW:
            self.prev_rate, self.rate = self.rate, 0.0
            self.prev_excess, self.excess = self.excess, 0
            self.half = 0

    @property
    def extra(self) -> int:
        return max(self.excess, self.prev_excess)


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
        if not size.text_bytes:
            return size.fixed
        c = self._class(size)
        return int(size.text_bytes * c.per_byte) + size.fixed + c.extra

    def observe(self, size: InputSize, prompt_tokens: int) -> None:
        """What the pool reported for a prompt of `size` (truthful, validated usage only)."""
        if size.text_bytes:
            self._class(size).observe(size.text_bytes, max(0, prompt_tokens - size.fixed))

    @property
    def calibrated(self) -> bool:
        return self._narrow.samples >= MIN_SAMPLES or self._wide.samples >= MIN_SAMPLES


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
