"""LoRA adapters in the engine (pure): GPU slots with LRU eviction, and what `/metrics` reports of them.

vLLM keeps every registered adapter in CPU memory and runs a batch only with adapters in its `max_loras`
GPU slots. Its scheduler (v1 `Scheduler.schedule`) admits a waiting request only if its adapter is
already in the batch or the batch holds fewer than `max_loras` adapters; otherwise it skips the request
and goes on scanning the queue. Before the forward pass the worker activates the batch's adapters: one
that is not in a slot is copied in, evicting the least recently used slot not needed by this batch.
Here that copy is a *swap*: counted, and charged to the step as `swap_ms` (a simulator-only knob).

`vllm:lora_requests_info` as vLLM 0.32 emits it (`v1/metrics/loggers.py`, `LoRARequestStates`): after
every step the gauge of the label set {max_lora, waiting_lora_adapters, running_lora_adapters} is set
to the current time (the label sets of earlier steps keep their older times, so a reader takes the
newest). Both adapter labels are the same comma-joined list, in first-seen order, of the adapters with
any running *or* waiting request: vLLM fills both dicts with every adapter it tracks (a quirk of 0.32,
kept here). After the last request ends the newest label set has empty lists.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Label sets kept for the info gauge; vLLM keeps every one it ever set (a bounded memory here).
INFO_HISTORY = 64


@dataclass(frozen=True, slots=True)
class LoraSettings:
    """The engine side of `--enable-lora`: vLLM's `--max-loras`, `--max-lora-rank` and the swap cost."""

    max_loras: int = 1
    max_lora_rank: int = 16
    swap_ms: float = 30.0


class LoraSlots:
    """`capacity` GPU slots; `loaded` in LRU order (oldest first). `swaps` counts adapters copied in."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("max_loras must be at least 1")
        self.capacity = capacity
        self.loaded: OrderedDict[str, None] = OrderedDict()
        self.swaps = 0

    @staticmethod
    def fits(batch: set[str], name: str, capacity: int) -> bool:
        """May a request for `name` join a batch already using the adapters `batch`?"""
        return name in batch or len(batch) < capacity

    def activate(self, batch: Iterable[str]) -> int:
        """Make every adapter of `batch` (at most `capacity` distinct ones) resident; return the swaps.

        A missing adapter takes a free slot, else evicts the least recently used adapter that this
        batch does not use. All of the batch's adapters become the most recently used."""
        names = list(dict.fromkeys(batch))
        if len(names) > self.capacity:
            raise ValueError(f"a batch of {len(names)} adapters exceeds max_loras={self.capacity}")
        needed = set(names)
        swapped = 0
        for name in names:
            if name in self.loaded:
                continue
            if len(self.loaded) >= self.capacity:
                victim = next(n for n in self.loaded if n not in needed)
                del self.loaded[victim]
            self.loaded[name] = None
            swapped += 1
        for name in names:
            self.loaded.move_to_end(name)
        self.swaps += swapped
        return swapped

    def discard(self, name: str) -> None:
        """An unloaded adapter leaves its slot (a reload from another path must be copied in again)."""
        self.loaded.pop(name, None)


class InFlight:
    """Per adapter, the sequences not finished yet, in first-seen order like vLLM's `LoRARequestStates`
    (an adapter leaves when its last request ends and goes to the end when it comes back)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def remove(self, name: str) -> None:
        left = self.counts.get(name, 0) - 1
        if left > 0:
            self.counts[name] = left
        else:
            self.counts.pop(name, None)

    def label(self) -> str:
        return ",".join(self.counts)


class InfoHistory:
    """The `vllm:lora_requests_info` samples: label set (waiting, running) -> the time it was last set."""

    def __init__(self, clock: Callable[[], float] = time.time, keep: int = INFO_HISTORY) -> None:
        self._clock = clock
        self._keep = keep
        self.samples: OrderedDict[tuple[str, str], float] = OrderedDict()

    def record(self, waiting: str, running: str) -> None:
        key = (waiting, running)
        self.samples[key] = self._clock()
        self.samples.move_to_end(key)
        while len(self.samples) > self._keep:
            self.samples.popitem(last=False)


class EngineLora:
    """Everything the engine keeps for LoRA: settings, slots, in-flight adapters, the info gauge."""

    def __init__(self, settings: LoraSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.slots = LoraSlots(settings.max_loras)
        self.in_flight = InFlight()
        self.info = InfoHistory(clock)

    def fits(self, batch: set[str], name: str) -> bool:
        return LoraSlots.fits(batch, name, self.settings.max_loras)

    def activate(self, batch: Iterable[str | None]) -> float:
        """Swap in the batch's adapters; the milliseconds that costs the step."""
        return self.slots.activate(n for n in batch if n is not None) * self.settings.swap_ms

    def record_step(self) -> None:
        label = self.in_flight.label()
        self.info.record(label, label)
