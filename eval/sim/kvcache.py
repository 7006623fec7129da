"""KV-cache block pool with prefix caching, after vLLM V1's `BlockPool`.

Capacity is `num_blocks` blocks of `block_size` tokens. Every block not referenced by a running sequence
sits in one LRU free queue (an OrderedDict), whether or not it still holds a cached prefix:
freed blocks go to the tail, allocation pops the head, and popping a block that still carries a prefix
hash evicts that hash. A prefix-cache hit on a free block takes it back out of the queue (ref 0 -> 1),
so cached-but-idle blocks count as free for usage (like vLLM: usage = 1 - free / total) yet are reused
when a new request shares the prefix.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockPool:
    __slots__ = ("num_blocks", "block_size", "_ref", "_hash", "_cached", "_free")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # prefix hash -> block id
        # OrderedDict, not dict: popping the head of a dict slows down as deleted slots pile up there.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def match_prefix(self, hashes: Sequence[int]) -> list[int]:
        """Leading blocks of `hashes` that are cached (not yet claimed)."""
        hits: list[int] = []
        cached = self._cached
        for h in hashes:
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def can_allocate(self, hits: Sequence[int], num_new: int) -> bool:
        # Hit blocks that are idle must leave the free queue, so they are not available for new blocks.
        idle_hits = sum(1 for b in hits if self._ref[b] == 0)
        return len(self._free) - idle_hits >= num_new

    def allocate(self, hits: Sequence[int], num_new: int) -> list[int]:
        """Claim the `hits` blocks and `num_new` fresh ones; caller checked `can_allocate`."""
        ref, free = self._ref, self._free
        blocks = list(hits)
        for b in hits:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1
        for _ in range(num_new):
            blocks.append(self._pop_free())
        return blocks

    def grow(self) -> int:
        """One more block for a running sequence; caller checked `num_free`."""
        return self._pop_free()

    def _pop_free(self) -> int:
        b = self._free.popitem(last=False)[0]
        old = self._hash[b]
        if old is not None:  # evict the LRU cached prefix held by this block
            if self._cached.get(old) == b:
                del self._cached[old]
            self._hash[b] = None
        self._ref[b] = 1
        return b

    def register(self, blocks: Sequence[int], hashes: Sequence[int], start: int) -> None:
        """Record the prefix hashes of freshly computed full blocks `blocks[start:len(hashes)]`."""
        for i in range(start, min(len(hashes), len(blocks))):
            h = hashes[i]
            if h not in self._cached:  # an identical block computed concurrently keeps the first copy
                self._cached[h] = blocks[i]
                self._hash[blocks[i]] = h

    def free(self, blocks: Sequence[int]) -> None:
        # Reverse order: tail blocks are the least shared, so they are evicted first.
        ref, free = self._ref, self._free
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None
