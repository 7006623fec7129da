"""Budgets changed at run time: the admin API writes them, every replica sees them within a second.

The policy's limits stay the default; an override replaces the fields it sets at one (level, name):

    key <key id> | app <org>/<app> | org <org> | tag <tag> | end_user <org>/<app>

(`end_user` is the limit of each end user of that app.) With Redis they live in one hash under the
key store's root, `P:{P}:budgets` (field `<level> <name>`, value the limits' JSON with only the fields
set), next to a version counter `P:{P}:budgets:version` that every change increments in the same
script (`lua/put_budget.lua`). Each replica reads the version once a second (one GET) and reloads the
hash (HSCAN) when it moved; the replica that made the change reloads at once. The hash is bounded
(`MAX_OVERRIDES` fields). Without Redis the overrides live in this process (one replica).

`Overrides` (ratelimit.model) is plain data; `Admissions` compares its version with the one its rule
cache was built from, so a change reaches the next admission of every key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from importlib import resources
from typing import Literal, Protocol

import orjson
import redis.asyncio
from redis.exceptions import RedisError

from gateway.errors import UpstreamUnavailableError
from ratelimit.keys import root
from ratelimit.model import LevelLimits, Overrides

BudgetLevel = Literal["key", "app", "org", "tag", "end_user"]
LEVELS: tuple[BudgetLevel, ...] = ("key", "app", "org", "tag", "end_user")
MAX_OVERRIDES = 100_000
POLL_S = 1.0

_log = logging.getLogger("llmgw.budgets")


class OverridesFull(Exception):
    """The store holds `MAX_OVERRIDES` budgets already."""


def encode(limits: LevelLimits) -> bytes:
    # Only the fields set: merging must not reset the policy's other limits of that level.
    return orjson.dumps(limits.model_dump(mode="json", exclude_unset=True))


def build(entries: Mapping[tuple[str, str], LevelLimits], version: int) -> Overrides:
    """Plain `Overrides` from (level, name) -> limits (an unknown level is ignored: a newer replica's)."""
    per: dict[str, dict[str, LevelLimits]] = {level: {} for level in LEVELS}
    for (level, name), limits in entries.items():
        if level in per:
            per[level][name] = limits
    return Overrides(
        version=version,
        key=per["key"],
        app=per["app"],
        org=per["org"],
        tag=per["tag"],
        end_user=per["end_user"],
    )


class BudgetStore(Protocol):
    async def version(self) -> int: ...

    async def entries(self) -> dict[tuple[str, str], LevelLimits]: ...

    async def put(
        self, level: BudgetLevel, name: str, limits: LevelLimits | None
    ) -> tuple[LevelLimits | None, int]:
        """Set (`limits`) or delete (None) one override: (what was there before, the new version)."""
        ...


class MemoryBudgetStore:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], LevelLimits] = {}
        self._version = 0

    async def version(self) -> int:
        return self._version

    async def entries(self) -> dict[tuple[str, str], LevelLimits]:
        return dict(self._entries)

    async def put(
        self, level: BudgetLevel, name: str, limits: LevelLimits | None
    ) -> tuple[LevelLimits | None, int]:
        before = self._entries.get((level, name))
        if limits is None:
            self._entries.pop((level, name), None)
        else:
            if before is None and len(self._entries) >= MAX_OVERRIDES:
                raise OverridesFull(f"at most {MAX_OVERRIDES} run-time budgets")
            self._entries[(level, name)] = limits
        self._version += 1
        return before, self._version


class RedisBudgetStore:
    def __init__(self, client: redis.asyncio.Redis, prefix: str = "llmgw") -> None:
        self._client = client
        self._hash = f"{root(prefix)}:budgets"
        self._version = f"{root(prefix)}:budgets:version"
        lua = resources.files("gateway.budget").joinpath("lua", "put_budget.lua").read_text()
        self._put = client.register_script(lua)

    async def version(self) -> int:
        try:
            raw = await self._client.get(self._version)
        except RedisError as exc:
            raise _unavailable() from exc
        return int(raw) if raw is not None else 0

    async def entries(self) -> dict[tuple[str, str], LevelLimits]:
        out: dict[tuple[str, str], LevelLimits] = {}
        try:
            async for field, raw in self._client.hscan_iter(self._hash, count=500):
                text = field.decode() if isinstance(field, bytes) else str(field)
                level, _, name = text.partition(" ")
                try:
                    out[(level, name)] = LevelLimits.model_validate_json(raw)
                except ValueError:  # written by a newer replica with fields this one lacks: skip it
                    _log.warning("budget %r: unreadable here, ignored", text)
        except RedisError as exc:
            raise _unavailable() from exc
        return out

    async def put(
        self, level: BudgetLevel, name: str, limits: LevelLimits | None
    ) -> tuple[LevelLimits | None, int]:
        value = encode(limits) if limits is not None else b""
        try:
            reply = await self._put(
                keys=[self._hash, self._version], args=[f"{level} {name}", value, MAX_OVERRIDES]
            )
        except RedisError as exc:
            raise _unavailable() from exc
        if not isinstance(reply[0], bytes):  # {-1}: the hash is full
            raise OverridesFull(f"at most {MAX_OVERRIDES} run-time budgets")
        before = LevelLimits.model_validate_json(reply[0]) if reply[0] else None
        return before, int(reply[1])


def _unavailable() -> UpstreamUnavailableError:
    return UpstreamUnavailableError("budget store unavailable", code="budget_store_unavailable")


class BudgetOverrides:
    """The current overrides of this replica (`current`), kept in step with the store."""

    def __init__(self, store: BudgetStore, poll_s: float = POLL_S) -> None:
        self._store = store
        self._poll_s = poll_s
        self.current = Overrides()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self.refresh()
        except UpstreamUnavailableError:
            _log.warning(
                "run-time budgets: the store is unavailable at start; the policy's apply until it is back"
            )
        self._task = asyncio.create_task(self._poll())

    async def refresh(self, force: bool = False) -> None:
        version = await self._store.version()
        if force or version != self.current.version:
            self.current = build(await self._store.entries(), version)

    async def put(self, level: BudgetLevel, name: str, limits: LevelLimits | None) -> LevelLimits | None:
        before, _ = await self._store.put(level, name, limits)
        await self.refresh(force=True)
        return before

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self.refresh()
            except UpstreamUnavailableError:
                pass  # the last overrides seen stay in force; the next round tries again
            except Exception:  # noqa: BLE001 - a bad entry must not stop the polling for good
                _log.exception("run-time budgets: refresh failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
