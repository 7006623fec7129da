"""Revocations broadcast between replicas: a Redis pub/sub channel under the key prefix.

    llmgw:{llmgw}:keys:revoked   messages "<publisher id> <sha256 hex>", one per revocation

`publish` sends one; every process runs one subscriber task (from `start` to `close`, the app's
lifespan) that hands other processes' messages to a callback. Its own messages are skipped by
publisher id: the revoking process invalidated its cache at once, before publishing. The subscriber
reconnects after any Redis error, with exponential backoff (0.1 s doubling to 5 s). Messages sent
while a subscriber is disconnected are lost (pub/sub keeps nothing); the authenticator's cache TTL
then bounds that replica's delay.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

import redis.asyncio
from redis.exceptions import RedisError

POLL_S = 1.0  # one wait for the next message; the loop then waits again
BACKOFF_S = (0.1, 5.0)  # first and longest wait before subscribing again after a Redis error
SHA_LEN = 64

_log = logging.getLogger("llmgw.keys")


class RevocationChannel:
    def __init__(self, client: redis.asyncio.Redis, channel: str, heard: Callable[[str], None]) -> None:
        self._client = client
        self.channel = channel
        self._heard = heard
        self._publisher = secrets.token_hex(8)  # tells this process's own messages from the others'
        self._task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()  # set while the subscription is live (tests wait on it)

    async def publish(self, sha: str) -> None:
        """Tell the other replicas. A failure is logged, not raised: the revocation is stored already,
        and their cache TTL bounds the delay."""
        try:
            await self._client.publish(self.channel, f"{self._publisher} {sha}")
        except RedisError as exc:
            _log.warning(
                "key revocation stored but not broadcast (%s): other replicas refuse the key when "
                "their key cache entry expires",
                exc,
            )

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._subscribe_forever(), name="key-revocations")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.subscribed.clear()

    async def _subscribe_forever(self) -> None:
        backoff = BACKOFF_S[0]
        while True:
            try:
                await self._listen()
            except (RedisError, OSError) as exc:
                if self.subscribed.is_set():  # a live subscription broke: a new outage, backoff anew
                    backoff = BACKOFF_S[0]
                self.subscribed.clear()
                _log.warning("key revocation subscriber: %s; subscribing again in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])

    async def _listen(self) -> None:
        """One subscription, until its connection fails (raises) or the task is cancelled."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self.channel)
            self.subscribed.set()
            while True:
                message = await pubsub.get_message(timeout=POLL_S)
                if message is not None:
                    self._message(message.get("data"))
        finally:
            # Through a typed name: redis-py types aclose() from 8.2 on, so an ignore would be unused there.
            close: Callable[[], Awaitable[object]] = pubsub.aclose
            await close()

    def _message(self, data: object) -> None:
        text = data.decode("latin-1") if isinstance(data, bytes) else str(data)
        publisher, _, sha = text.partition(" ")
        if publisher != self._publisher and len(sha) == SHA_LEN:
            self._heard(sha)
