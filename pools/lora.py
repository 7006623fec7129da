"""LoRA adapters on a replica, and adapter-aware picking (pure).

What the gateway knows of one replica's adapters (`Adapters`):
- `registered`: adapters the engine serves (it answers a request for them): what the gateway loaded
  there, what its `/v1/models` listed at the last re-read. vLLM keeps a registered adapter in CPU
  memory and swaps it into one of `--max-loras` slots when a request needs it.
- `active`: adapters running or waiting on it per its last `vllm:lora_requests_info` scrape, plus the
  ones this gateway has in flight there now.
- `recent`: the adapters this gateway sent it last, newest first: vLLM's slots are LRU, so the
  `max_loras` most recent ones are probably still in a slot after their requests ended.

`place` ranks the eligible replicas for an adapter: `active` (it is in a slot: no swap), `free_slot`
(registered, fewer adapters in slots than `max_loras`: swapped in without evicting one), `swap`
(registered: vLLM evicts its least recently used adapter), `load` (the gateway loads it first). The
best rank wins among replicas whose load is under `load_factor` x the mean load (bounded loads, as in
prefix affinity): a hot adapter spills to the next rank instead of queueing on the one replica that
has it. No replica under the bound: the least loaded (`any`).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

ACTIVE = "active"
FREE_SLOT = "free_slot"
SWAP = "swap"
LOAD = "load"
ANY = "any"
PLACEMENTS = (ACTIVE, FREE_SLOT, SWAP, LOAD, ANY)
_RANK = {ACTIVE: 0, FREE_SLOT: 1, SWAP: 2, LOAD: 3}

__all__ = [
    "PLACEMENTS",
    "Adapters",
    "HasAdapters",
    "LoraInfo",
    "LoraPicking",
    "listed_adapters",
    "parse_lora_info",
    "place",
]


@dataclass(frozen=True, slots=True)
class LoraInfo:
    """One `vllm:lora_requests_info` reading: the adapters with running and waiting requests."""

    running: frozenset[str]
    waiting: frozenset[str]
    max_lora: int | None


def _names(value: str) -> frozenset[str]:
    return frozenset(n for n in value.split(",") if n)


def parse_lora_info(samples: Iterable[tuple[dict[str, str], float]]) -> LoraInfo | None:
    """The newest reading: vLLM sets the gauge of the current label set to the time, and the gauges
    of earlier label sets stay at theirs."""
    best: tuple[float, dict[str, str]] | None = None
    for labels, value in samples:
        if best is None or value >= best[0]:
            best = (value, labels)
    if best is None:
        return None
    labels = best[1]
    raw = labels.get("max_lora", "")
    return LoraInfo(
        _names(labels.get("running_lora_adapters", "")),
        _names(labels.get("waiting_lora_adapters", "")),
        int(raw) if raw.isdigit() else None,
    )


@dataclass(frozen=True, slots=True)
class LoraPicking:
    """A LoRA pool's picking settings (from the gateway's `pools[].lora`)."""

    max_loras: int
    preloaded: bool  # every replica starts with every adapter (no runtime loading)
    affinity: bool
    load_factor: float
    adapters: int = 0  # how many the pool declares


@dataclass(slots=True)
class Adapters:
    """One replica's adapters as the gateway knows them (mutated by the relay, the scraper, the lister)."""

    max_loras: int  # the pool's configured slots (the scrape's max_lora, when it has one, wins)
    registered: set[str] = field(default_factory=set)
    scraped: LoraInfo | None = None
    recent: OrderedDict[str, None] = field(default_factory=OrderedDict)
    loaded_at: dict[str, float] = field(default_factory=dict)  # when this gateway loaded each here

    @property
    def slots(self) -> int:
        s = self.scraped
        return s.max_lora if s is not None and s.max_lora else self.max_loras

    def in_slot(self) -> set[str]:
        """Adapters probably in a slot now: active per scrape, else the most recently sent here."""
        s = self.scraped
        out = set(s.running | s.waiting) if s is not None else set()
        for a in reversed(self.recent):
            if len(out) >= self.slots:
                break
            out.add(a)
        return out

    def placement(self, adapter: str, preloaded: bool) -> str:
        """`preloaded`: every replica starts with every adapter (no runtime loading)."""
        slot = self.in_slot()
        if adapter in slot:
            return ACTIVE
        if not preloaded and adapter not in self.registered:
            return LOAD
        return FREE_SLOT if len(slot) < self.slots else SWAP

    def sent(self, adapter: str) -> None:
        """A request for `adapter` was placed here."""
        self.recent[adapter] = None
        self.recent.move_to_end(adapter)
        while len(self.recent) > 4 * self.slots:  # bounded: only the newest `slots` are ever read
            self.recent.popitem(last=False)

    def loaded(self, adapter: str, now: float) -> None:
        self.registered.add(adapter)
        self.loaded_at[adapter] = now

    def lost(self, adapter: str) -> None:
        """The engine said it does not serve `adapter` (it restarted, or someone unloaded it)."""
        self.registered.discard(adapter)
        self.loaded_at.pop(adapter, None)
        self.recent.pop(adapter, None)

    def relisted(self, listed: Iterable[str], asked_at: float) -> None:
        """`/v1/models` (asked at `asked_at`) lists these adapters: they are what it serves, with the
        ones this gateway loaded after the question (the answer could not show them yet)."""
        fresh = {a for a, t in self.loaded_at.items() if t >= asked_at}
        self.registered = set(listed) | fresh
        self.loaded_at = {a: t for a, t in self.loaded_at.items() if a in self.registered}
        for a in [a for a in self.recent if a not in self.registered]:
            del self.recent[a]


def listed_adapters(text: str) -> set[str] | None:
    """The adapters of a vLLM `/v1/models` answer (the entries with a `parent`); None if unreadable."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return {
        m["id"]
        for m in items
        if isinstance(m, dict) and isinstance(m.get("id"), str) and m.get("parent") is not None
    }


class HasAdapters(Protocol):
    @property
    def adapters(self) -> Adapters | None: ...


R = TypeVar("R", bound=HasAdapters)


def place(
    cands: Sequence[R],
    adapter: str,
    *,
    preloaded: bool,
    loads: Sequence[float],
    cap: int,
    weight: Callable[[R], int],
) -> tuple[R, str]:
    """The replica for a request of `adapter` among `cands` (non-empty, all eligible; `loads` theirs
    and `cap` the bound, from `pools.picker.bounded_loads`), and why.

    Within a rank the least loaded wins, then the highest rendezvous `weight` of (adapter, replica):
    replicas of equal standing give every adapter its own stable first choice, the same on every
    gateway, so adapters spread over the pool instead of all landing on its first replica."""
    best: tuple[int, float, int] | None = None
    at = -1
    where = ANY
    for i, (r, ld) in enumerate(zip(cands, loads, strict=True)):
        if ld + 1 > cap:
            continue
        state = r.adapters
        w = state.placement(adapter, preloaded) if state is not None else SWAP
        key = (_RANK[w], ld, -weight(r))
        if best is None or key < best:
            best, at, where = key, i, w
    if best is None:
        at = min(range(len(cands)), key=loads.__getitem__)
    return cands[at], where
