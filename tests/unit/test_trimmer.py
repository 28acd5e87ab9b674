"""The trimmer's step against scripted replies: every led shard trimmed, each called again
while it has more (within a bound), a refused shard reported while the others are trimmed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.node_context import NodeParts, keys
from tests.support.waiting import until
from wheelq.errors import ScriptError
from wheelq.scheduler.trimmer import MAX_CALLS_PER_ROUND, Trimmer
from wheelq.store.call import Call
from wheelq.store.history import Trimmed

INTERVAL_MS = 60_000


def shard_of(call: Call[Any]) -> int:
    return int(call.keys[0].split("}", 1)[0].rsplit(":", 1)[1])


def wrong_type(shard: int) -> ScriptError:
    return ScriptError(
        f"trim.lua: key '{keys(shard).ready}' holds a value of the wrong type; nothing was written"
    )


@pytest.fixture
def parts() -> NodeParts:
    parts = NodeParts.make({"trim_interval_ms": INTERVAL_MS, "retention_ms": 0, "trim_batch": 10})
    parts.executor.answer("trim", lambda call: Trimmed(0, False, 0))
    return parts


def replies(*results: Trimmed) -> Iterator[Trimmed]:
    yield from results
    while True:
        yield Trimmed(0, False, 0)


async def test_repeats_a_shard_while_it_has_more(parts: NodeParts) -> None:
    trimmer = Trimmer(parts.ctx)
    parts.lead(0).shards = 4  # the topic's byte budget is split over its 4 shards
    parts.lead(1)
    busy = replies(Trimmed(10, True, 0), Trimmed(10, True, 1), Trimmed(3, False, 0))
    parts.executor.answer(
        "trim", lambda call: next(busy) if shard_of(call) == 0 else Trimmed(4, False, 0)
    )
    assert await trimmer.step() == INTERVAL_MS / 1000
    assert [[shard_of(c) for c in r] for r in parts.executor.rounds] == [[0, 1], [0], [0]]
    (call,) = parts.executor.rounds[0][:1]
    budget = parts.ctx.settings.history_max_bytes
    assert list(call.args) == [0, 10, 86_400_000, budget // 4]
    assert trimmer.trimmed == 27
    assert [(e.kind, e.shard, e.count) for e in parts.events] == [
        ("trimmed", 0, 10),
        ("trimmed", 1, 4),
        ("trimmed", 0, 10),
        ("trimmed", 0, 3),
    ]


async def test_a_round_calls_a_shard_at_most_max_calls_per_round_times(parts: NodeParts) -> None:
    trimmer = Trimmer(parts.ctx)
    parts.lead(0)
    parts.executor.answer("trim", lambda call: Trimmed(10, True, 0))
    assert await trimmer.trim_once() == 10 * MAX_CALLS_PER_ROUND
    assert len(parts.executor.sent("trim")) == MAX_CALLS_PER_ROUND


async def test_a_refused_shard_is_reported_and_the_others_are_trimmed(parts: NodeParts) -> None:
    trimmer = Trimmer(parts.ctx)
    parts.lead(0)
    parts.lead(1)
    more = replies(Trimmed(10, True, 0), Trimmed(2, False, 0))
    parts.executor.answer("trim", lambda call: wrong_type(0) if shard_of(call) == 0 else next(more))
    assert await trimmer.trim_once() == 12
    assert [[shard_of(c) for c in r] for r in parts.executor.rounds] == [[0, 1], [1]]
    assert trimmer.failures == 1
    assert trimmer.last_error is not None and keys(0).ready in trimmer.last_error


@pytest.mark.parametrize(
    "error", [BusyLoadingError("loading"), RedisConnectionError("Connection reset")]
)
async def test_an_outage_in_place_raises_so_the_base_pauses(
    parts: NodeParts, error: Exception
) -> None:
    trimmer = Trimmer(parts.ctx)
    parts.lead(0)
    parts.lead(1)
    parts.executor.answer(
        "trim", lambda call: error if shard_of(call) == 0 else Trimmed(5, False, 0)
    )
    with pytest.raises(type(error)):
        await trimmer.step()
    assert trimmer.failures == 0, "counted by the base, once"


async def test_a_round_that_fails_whole_raises(parts: NodeParts) -> None:
    trimmer = Trimmer(parts.ctx)
    parts.lead(0)
    parts.executor.fail_next(RedisConnectionError("Connection refused"))
    with pytest.raises(RedisConnectionError):
        await trimmer.step()


async def test_a_refused_shard_shows_until_a_round_trims_it_again(parts: NodeParts) -> None:
    parts = NodeParts.make({"trim_interval_ms": 100})
    trimmer = Trimmer(parts.ctx)
    parts.lead(0)
    refused = [True]
    parts.executor.answer(
        "trim", lambda call: wrong_type(0) if refused[0] else Trimmed(1, False, 0)
    )
    await trimmer.start()
    try:
        await until(lambda: trimmer.failures >= 2, what="two refused rounds")
        assert trimmer.status()["running"] is True
        refused[0] = False
        await until(lambda: trimmer.trimmed >= 1, what="a round that trims")
        assert trimmer.status() == {"running": True, "failures": 0, "last_error": None}
    finally:
        await trimmer.stop()
