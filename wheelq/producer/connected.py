"""What every client and admin holds of Redis, written once: `Connected` (under `Client`
and `Admin`) and `AsyncConnected` (under `AsyncClient` and `AsyncAdmin`) each hold the
executor their calls go through, the `Producer` (settings, encoding, shard counts) and the
breaker that guards the calls. An admin made `of` a client holds the client's three, and
closing it leaves them open."""

from __future__ import annotations

from typing import Generic, Self, TypeVar

import redis
import redis.asyncio

from wheelq.core.settings import ClientSettings
from wheelq.producer.operations import Op, Producer, guarded
from wheelq.runtime.breaker import Breaker
from wheelq.runtime.clock import LocalClock
from wheelq.store.executor import AsyncExecutor, SyncExecutor, drive, drive_async

T = TypeVar("T")
E = TypeVar("E", SyncExecutor, AsyncExecutor)


class _Holding(Generic[E]):
    """The executor, producer and breaker, and whether closing closes them (`_owns`)."""

    _executor: E
    _producer: Producer
    _breaker: Breaker
    _owns: bool
    """False when they are another's (`_sharing`): its owner closes them."""

    def _hold(self, executor: E, settings: ClientSettings | None) -> None:
        self._executor = executor
        self._producer = Producer(settings or ClientSettings(), executor.block_ms)
        self._breaker = Breaker(self._producer.settings.breaker_open_ms, LocalClock())
        self._owns = True

    def _over(self, executor: E) -> Self:
        """This one with its calls going through `executor` (`from_url`'s: it may switch
        to a cluster client) instead of the plain one its constructor made."""
        self._executor = executor
        return self

    @classmethod
    def _sharing(cls, other: _Holding[E]) -> Self:
        """One on `other`'s executor, producer (its shard counts) and breaker (`Admin.of`)."""
        made = cls.__new__(cls)
        made._executor, made._producer = other._executor, other._producer
        made._breaker, made._owns = other._breaker, False
        return made


class Connected(_Holding[SyncExecutor]):
    """A blocking client's hold on Redis (see the module)."""

    def __init__(self, connection: redis.Redis, settings: ClientSettings | None = None) -> None:
        self._hold(SyncExecutor(connection), settings)

    @property
    def redis(self) -> redis.Redis:
        """The redis-py client the calls go through (a cluster client on a cluster)."""
        return self._executor.client

    def _run(self, op: Op[T]) -> T:
        return drive(guarded(self._breaker, op), self._executor.run)

    def close(self) -> None:
        """Close the connections (not those of the client it was made `of`)."""
        if self._owns:
            self._executor.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncConnected(_Holding[AsyncExecutor]):
    """An asyncio client's hold on Redis (see the module)."""

    def __init__(
        self, connection: redis.asyncio.Redis, settings: ClientSettings | None = None
    ) -> None:
        self._hold(AsyncExecutor(connection), settings)

    @property
    def executor(self) -> AsyncExecutor:
        """What the calls go through; a worker or service beside it can share it."""
        return self._executor

    @property
    def redis(self) -> redis.asyncio.Redis:
        """The redis-py client the calls go through (a cluster client on a cluster)."""
        return self._executor.client

    async def _run(self, op: Op[T]) -> T:
        return await drive_async(guarded(self._breaker, op), self._executor.run)

    async def aclose(self) -> None:
        """Close the connections (not those of the client it was made `of`)."""
        if self._owns:
            await self._executor.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
