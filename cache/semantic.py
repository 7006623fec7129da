"""The semantic cache's vector index: nearest stored prompt embedding within one scope.

The gateway's semantic cache embeds a prompt once (the router's encoder, reused), asks the index for
the most similar earlier prompt *in the same scope* and serves that prompt's stored reply when the
cosine similarity clears the configured threshold (eval/bench/cache/semantic_eval.py measures which). The
scope is an opaque byte string the caller derives from tenant + model + system prompt: an entry is
only ever compared with queries of its own scope, so one tenant's answer is never served to another
(design §6).

Two backends, one contract (`VectorIndex`):

- `RedisVectorIndex`: the Redis query engine (Redis 8, or Redis Stack / RediSearch 2.x). Each entry is
  one HASH `<prefix><scope hex>:<entry hex>` with fields `scope` (the scope in hex, a TAG), `vec` (the
  embedding as little-endian FLOAT32 bytes) and `value`, written together with its EXPIRE by one EVAL
  so no entry can outlive its TTL. One index (`FT.CREATE ... ON HASH PREFIX`) covers all scopes; a
  lookup is a KNN-1 query pre-filtered by the scope tag, so the vector search only ranks that scope's
  entries. The entry id is a hash of scope + vector: the same prompt cached twice (two replicas
  missing at once) overwrites one key instead of piling up duplicates.
  Index choice, FLAT rather than HNSW: the scope pre-filter leaves a few hundred candidates, which
  RediSearch ranks by brute force either way. Measured (`python -m eval.bench.cache.bench_lookup`, 10,000
  entries over 100 scopes, dim 384, 5,000 queries): P50 0.11-0.17 ms and P99 0.6-1.2 ms sequential,
  P99 1.1-2.5 ms at concurrency 8, for both, the differences between them smaller than between runs;
  even 10,000 entries in ONE scope gave both ~1 ms P50. FLAT is exact, needs no tuning and has no
  graph to repair on every write and every expiry delete, so it is the default (`algorithm="HNSW"`
  remains available should one scope ever hold far more entries).
  Redis Cluster: every entry is a single key, so writes route anywhere, but FT.SEARCH on an OSS
  cluster sees only the shard it is sent to; a clustered deployment needs the query engine's
  coordinator (Redis Enterprise / Redis Cloud, or a Redis build with the search coordinator), else
  point the semantic cache at a standalone (replicated) Redis.
- `MemoryVectorIndex`: one process, bounded (oldest entry evicted first), TTL by an injected clock,
  numpy brute force per scope. For single-replica and development setups, and as the reference the
  Redis backend's tests mirror.

Errors: `ensure()` turns "this server cannot do vector search" (no FT.* commands, an index of another
shape, no permission) into a returned reason, because that is a deployment fact the gateway reports
and then runs without the semantic cache. Connection failures and timeouts are not such a fact and
propagate (redis-py's exception classes) from all three methods; the caller treats them as a miss.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import redis.exceptions as rexc

from cache.commands import Commands

Vector = npt.NDArray[np.float32]

DEFAULT_DIM = 384  # the router's MiniLM encoder
INDEX_ALGORITHM = "FLAT"

# HSET + EXPIRE as one command: two separate writes could leave an entry without its TTL (a crash in
# between), and MULTI/EXEC cannot be used on a connection other coroutines pipeline through.
_PUT_SCRIPT = (
    "redis.call('HSET', KEYS[1], 'scope', ARGV[1], 'vec', ARGV[2], 'value', ARGV[3]) "
    "redis.call('EXPIRE', KEYS[1], ARGV[4]) return 1"
)


class VectorIndex(Protocol):
    async def ensure(self) -> str | None:
        """Create the index if missing. None when ready, else why the index is unavailable."""
        ...

    async def search(self, scope: bytes, vector: Vector, min_similarity: float) -> tuple[bytes, float] | None:
        """The stored value of the entry in `scope` most similar to `vector`, and that cosine
        similarity, if it is at least `min_similarity`."""
        ...

    async def add(self, scope: bytes, vector: Vector, value: bytes, ttl_s: int) -> None: ...


def _unit(vector: Vector, dim: int) -> Vector | None:
    """`vector` as a float32 unit vector of length `dim`; None for a zero or non-finite vector, which
    has no direction to compare (cosine is undefined)."""
    v = np.asarray(vector, dtype=np.float32)
    if v.shape != (dim,):
        raise ValueError(f"expected a vector of shape ({dim},), got {v.shape}")
    norm = float(np.linalg.norm(v))
    if not np.isfinite(norm) or norm == 0.0:
        return None
    unit: Vector = v / np.float32(norm)
    return unit


def entry_id(scope: bytes, unit: Vector) -> bytes:
    """Same scope and vector, same entry: the vector has a fixed length, so scope || vector is unique."""
    return hashlib.blake2b(scope + unit.tobytes(), digest_size=12).digest()


class RedisVectorIndex:
    """`VectorIndex` on the Redis query engine (see the module docstring for the key scheme)."""

    def __init__(
        self,
        commands: Commands,
        *,
        index: str = "llmgw-sem-v1",
        prefix: bytes = b"llmgw:sem:v1:",
        dim: int = DEFAULT_DIM,
        algorithm: str = INDEX_ALGORITHM,
    ) -> None:
        if algorithm not in ("FLAT", "HNSW"):
            raise ValueError(f"algorithm must be FLAT or HNSW, got {algorithm!r}")
        self._redis = commands
        self._index = index
        self._prefix = prefix
        self._dim = dim
        self._algorithm = algorithm

    @property
    def index_name(self) -> str:
        return self._index

    async def ensure(self) -> str | None:
        try:
            info = await self._redis.execute("FT.INFO", self._index)
        except rexc.ResponseError as exc:
            msg = str(exc)
            if "unknown index" not in msg.lower() and "no such index" not in msg.lower():
                return self._unavailable(msg)
        else:
            return self._check_shape(info)
        try:
            await self._redis.execute(*self._create_args())
        except rexc.ResponseError as exc:
            if "already exists" in str(exc).lower():  # another replica created it in the meantime
                return None
            return self._unavailable(str(exc))
        return None

    def _unavailable(self, msg: str) -> str:
        if "unknown command" in msg.lower():
            return (
                f"this Redis has no query engine (FT.* commands); the semantic cache needs Redis 8 or "
                f"Redis Stack ({msg})"
            )
        return f"vector index {self._index!r} unavailable: {msg}"

    def _create_args(self) -> tuple[bytes | str | int, ...]:
        vec_params: tuple[str | int, ...] = ("TYPE", "FLOAT32", "DIM", self._dim, "DISTANCE_METRIC", "COSINE")
        return (
            "FT.CREATE", self._index, "ON", "HASH", "PREFIX", 1, self._prefix,
            "SCHEMA", "scope", "TAG",
            "vec", "VECTOR", self._algorithm, len(vec_params), *vec_params,
        )  # fmt: skip

    def _check_shape(self, info: Any) -> str | None:
        """An index of this name built for another encoder would answer nonsense or fail every query."""
        fields = _pairs(info)
        attributes = fields.get(b"attributes")
        for attribute in attributes if isinstance(attributes, list) else []:
            attr = _pairs(attribute)
            if attr.get(b"identifier") != b"vec":
                continue
            dim = attr.get(b"dim")
            metric = attr.get(b"distance_metric")
            if (dim is not None and int(dim) != self._dim) or metric not in (None, b"COSINE"):
                return (
                    f"vector index {self._index!r} exists with dim {dim!r} / metric {metric!r}, expected "
                    f"{self._dim} / COSINE: drop it (FT.DROPINDEX) or configure another index name"
                )
            return None
        return f"vector index {self._index!r} exists without a 'vec' vector field; drop it or rename"

    async def search(self, scope: bytes, vector: Vector, min_similarity: float) -> tuple[bytes, float] | None:
        unit = _unit(vector, self._dim)
        if unit is None:
            return None
        reply = await self._redis.execute(
            "FT.SEARCH", self._index, f"(@scope:{{{scope.hex()}}})=>[KNN 1 @vec $B AS d]",
            "PARAMS", 2, "B", unit.astype("<f4").tobytes(),
            "SORTBY", "d", "RETURN", 2, "d", "value", "LIMIT", 0, 1, "DIALECT", 2,
        )  # fmt: skip
        # RESP2 reply: [total, key, [field, value, ...]]; an entry that expired between being found
        # and being read comes back without its fields.
        if not isinstance(reply, list) or len(reply) < 3 or not isinstance(reply[2], list):
            return None
        fields = _pairs(reply[2])
        distance, value = fields.get(b"d"), fields.get(b"value")
        if distance is None or not isinstance(value, bytes):
            return None
        similarity = 1.0 - float(distance)
        return (value, similarity) if similarity >= min_similarity else None

    async def add(self, scope: bytes, vector: Vector, value: bytes, ttl_s: int) -> None:
        if ttl_s < 1:
            raise ValueError(f"ttl_s must be >= 1, got {ttl_s}")
        unit = _unit(vector, self._dim)
        if unit is None:
            return
        key = self._prefix + scope.hex().encode() + b":" + entry_id(scope, unit).hex().encode()
        await self._redis.execute(
            "EVAL", _PUT_SCRIPT, 1, key, scope.hex(), unit.astype("<f4").tobytes(), value, ttl_s
        )


def _pairs(flat: Any) -> dict[bytes, Any]:
    """[k1, v1, k2, v2, ...] (RESP2) or a map (RESP3) as a dict with bytes keys."""
    if isinstance(flat, dict):
        return {k.encode() if isinstance(k, str) else k: v for k, v in flat.items()}
    if not isinstance(flat, list):
        return {}
    return {
        (k.encode() if isinstance(k, str) else k): v
        for k, v in zip(flat[::2], flat[1::2], strict=False)
        if isinstance(k, bytes | str)
    }


@dataclass(slots=True)
class _Scope:
    """One scope's entries as rows of a growing matrix: search is one matrix-vector product; removal
    moves the last row into the hole, so neither add nor remove copies the matrix."""

    dim: int
    vectors: Vector = field(init=False)
    expires: npt.NDArray[np.float64] = field(init=False)
    values: list[bytes] = field(default_factory=list)
    ids: list[bytes] = field(default_factory=list)
    row_of: dict[bytes, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.vectors = np.empty((4, self.dim), dtype=np.float32)
        self.expires = np.empty(4, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.ids)

    def append(self, eid: bytes, unit: Vector, value: bytes, expires: float) -> None:
        n = len(self.ids)
        if n == len(self.vectors):
            self.vectors = np.concatenate([self.vectors, np.empty_like(self.vectors)])
            self.expires = np.concatenate([self.expires, np.empty_like(self.expires)])
        self.vectors[n], self.expires[n] = unit, expires
        self.values.append(value)
        self.ids.append(eid)
        self.row_of[eid] = n

    def remove(self, eid: bytes) -> None:
        row, last = self.row_of.pop(eid), len(self.ids) - 1
        if row != last:
            moved = self.ids[last]
            self.vectors[row], self.expires[row] = self.vectors[last], self.expires[last]
            self.values[row], self.ids[row] = self.values[last], moved
            self.row_of[moved] = row
        self.values.pop()
        self.ids.pop()


class MemoryVectorIndex:
    """`VectorIndex` in process memory: at most `max_entries` entries over all scopes (the oldest
    write is evicted first), expiry by `clock` (seconds, monotonic)."""

    def __init__(
        self, max_entries: int, clock: Callable[[], float] = time.monotonic, *, dim: int = DEFAULT_DIM
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._max = max_entries
        self._clock = clock
        self._dim = dim
        self._scopes: dict[bytes, _Scope] = {}
        self._order: OrderedDict[bytes, bytes] = OrderedDict()  # entry id -> scope, oldest write first

    def __len__(self) -> int:
        return len(self._order)

    async def ensure(self) -> str | None:
        return None

    async def search(self, scope: bytes, vector: Vector, min_similarity: float) -> tuple[bytes, float] | None:
        unit = _unit(vector, self._dim)
        entries = self._scopes.get(scope)
        if unit is None or entries is None:
            return None
        now = self._clock()
        n = len(entries)
        for row in np.flatnonzero(entries.expires[:n] <= now)[::-1]:  # highest rows first: stable
            self._drop(scope, entries.ids[int(row)])
        if len(entries) == 0:
            return None
        sims = entries.vectors[: len(entries)] @ unit
        best = int(np.argmax(sims))
        similarity = float(sims[best])
        return (entries.values[best], similarity) if similarity >= min_similarity else None

    async def add(self, scope: bytes, vector: Vector, value: bytes, ttl_s: int) -> None:
        if ttl_s < 1:
            raise ValueError(f"ttl_s must be >= 1, got {ttl_s}")
        unit = _unit(vector, self._dim)
        if unit is None:
            return
        eid = entry_id(scope, unit)
        if eid in self._order:
            self._drop(scope, eid)
        while len(self._order) >= self._max:
            oldest, oldest_scope = next(iter(self._order.items()))
            self._drop(oldest_scope, oldest)
        entries = self._scopes.get(scope)
        if entries is None:
            entries = self._scopes[scope] = _Scope(self._dim)
        entries.append(eid, unit, value, self._clock() + ttl_s)
        self._order[eid] = scope

    def _drop(self, scope: bytes, eid: bytes) -> None:
        entries = self._scopes[scope]
        entries.remove(eid)
        del self._order[eid]
        if len(entries) == 0:
            del self._scopes[scope]
