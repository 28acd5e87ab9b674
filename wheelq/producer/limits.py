"""A topic's backpressure limits, the producer's side: set and read (`wheelq.core.flow`)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from wheelq.core import keys as k
from wheelq.core.flow import TopicLimits, validate_limits
from wheelq.store import ops
from wheelq.store.executor import Call

if TYPE_CHECKING:
    from wheelq.producer.operations import Op, Producer

T = TypeVar("T")


def set_limits(
    producer: Producer, topic: str, max_pending: object, max_ready: object
) -> Op[TopicLimits]:
    limits = validate_limits(max_pending, max_ready)
    shards = yield from producer.shard_count(topic, create=True)
    assert shards is not None
    fields = limits.fields(shards)
    calls: list[Call[object]] = []
    for keys in k.all_shards(topic, shards):
        calls += ops.write_limits(keys, fields)
    yield calls
    return limits


def get_limits(producer: Producer, topic: str) -> Op[TopicLimits]:
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        return TopicLimits()
    (raw,) = yield [ops.read_limits(k.ShardKeys(topic, 0))]
    return TopicLimits.from_fields(raw)


class LimitMethods:
    """`set_limits` and `limits` on the blocking client."""

    _producer: Producer

    def _run(self, op: Op[T]) -> T:
        raise NotImplementedError

    def set_limits(
        self, topic: str, *, max_pending: int | None = None, max_ready: int | None = None
    ) -> TopicLimits:
        """Set the topic's backpressure limits (None: no limit); returns them.

        Args:
            max_pending: Most jobs waiting to fire; an enqueue past it raises
                `TopicFullError` and writes nothing of what it refused.
            max_ready: Most fired jobs the slowest consumer group has not acked (or not
                read); past it the scheduler holds due jobs back in the sorted set and
                fires them, late, as workers catch up. Nothing is dropped.

        Both are kept per shard, as ``ceil(limit / shards)`` each (README, "Backpressure").

        Raises:
            InvalidArgumentError: A limit neither None nor an int in [1, 2**40].
        """
        return self._run(set_limits(self._producer, topic, max_pending, max_ready))

    def limits(self, topic: str) -> TopicLimits:
        """The topic's limits (no limits for an unknown topic)."""
        return self._run(get_limits(self._producer, topic))


class AsyncLimitMethods:
    """The same on `AsyncClient`, awaited."""

    _producer: Producer

    def _run(self, op: Op[T]) -> Awaitable[T]:
        raise NotImplementedError

    async def set_limits(
        self, topic: str, *, max_pending: int | None = None, max_ready: int | None = None
    ) -> TopicLimits:
        return await self._run(set_limits(self._producer, topic, max_pending, max_ready))

    set_limits.__doc__ = LimitMethods.set_limits.__doc__

    async def limits(self, topic: str) -> TopicLimits:
        return await self._run(get_limits(self._producer, topic))
