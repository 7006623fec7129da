"""Move the limiter's settled counters from their pre-0.3 names (`{P}:...`) to the root (`P:{P}:...`).

0.3 put every limiter key under the one prefix the rest of the gateway writes under (`ratelimit.keys`).
Without this step an upgrade would forget the day's and month's quota usage (and the last minute's)
of every tenant: each counter would start again at zero under its new name. Each counter moves in one
script call (`lua/move_legacy_v1.lua`; old and new name share the hash tag, so the call is legal on
Redis Cluster), adding to whatever a new replica has settled there already, so the step can run on
every replica's start, concurrently, and again later: it is idempotent once the old names are gone.
Leases are not moved: a request admitted by an old replica is settled by that replica on the old
names, and those expire within 2 x lease + 1 s of their last write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from ratelimit.keys import legacy_move, legacy_root
from ratelimit.model import SUB_WINDOWS


class LegacyClient(Protocol):
    """The slice of redis-py's asyncio client (standalone, Sentinel or Cluster) the move needs."""

    def scan_iter(self, match: str, count: int) -> AsyncIterator[bytes]: ...

    def register_script(self, script: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class Moved:
    quota: int
    windows: int


async def move_legacy_counters(
    client: LegacyClient, key_prefix: str, sub_windows: int = SUB_WINDOWS
) -> Moved:
    """Move every settled counter under the legacy root; returns how many of each kind moved.

    SCAN with a MATCH on the legacy root visits each key once in bounded steps (redis-py's cluster
    client scans every primary), so a large keyspace never blocks Redis for the limiter's scripts."""
    lua = resources.files("ratelimit").joinpath("lua", "move_legacy_v1.lua").read_text()
    script = client.register_script(lua)
    moved = {"q": 0, "sw": 0}
    pattern = _glob_escape(legacy_root(key_prefix)) + ":*"
    async for raw in client.scan_iter(match=pattern, count=1000):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        move = legacy_move(key_prefix, name)
        if move is None:
            continue
        kind, new = move
        if int(await script(keys=[name, new], args=[kind, sub_windows])):
            moved[kind] += 1
    return Moved(quota=moved["q"], windows=moved["sw"])


def _glob_escape(s: str) -> str:
    # The prefix pattern allows `.`, `-`, `_` only, but `{`/`}` are literal in Redis globs already;
    # escape the glob's own specials anyway so the pattern can never match more than the root.
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)
