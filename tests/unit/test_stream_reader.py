"""The stream reader without Redis: its step against a scripted executor.

It reads only when there are free slots (else it waits for one), asks each shard for its
share of them, recreates a vanished group on NOGROUP, and raises any other error for the
base to count and pause on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from tests.support.fakes import ScriptedExecutor
from tests.support.worker_parts import GROUP, TOPIC, WAIT_S, consumer, entry
from wheelq.core.clock import ManualClock
from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call
from wheelq.store.streams import Entry
from wheelq.worker.stream_reader import SHARED_BLOCK_MS, ReadSlots, StreamReader

BLOCK_MS = 2000


class Reader:
    def __init__(self, shards: int, free: int) -> None:
        self.executor = ScriptedExecutor()
        self.free = free
        self.room = asyncio.Event()
        self.accepted: list[tuple[int, list[Entry]]] = []
        self.joins = 0
        self.reader = StreamReader(
            consumer(self.executor, shards=shards),
            BLOCK_MS,
            slots=ReadSlots(lambda: self.free, self.room, shards),
            accept=lambda shard, entries: self.accepted.append((shard, entries)),
            ensure_groups=self.join,
            clock=ManualClock(),
        )

    async def join(self) -> None:
        self.joins += 1

    def answer(self, reply: Any) -> None:
        self.executor.answer("XREADGROUP", lambda call: reply)

    def counts(self) -> list[int]:
        """The COUNT of each read sent."""
        out = []
        for call in self.executor.sent("XREADGROUP"):
            command = list(call.command)
            out.append(int(command[command.index("COUNT") + 1]))
        return out


async def test_it_reads_only_into_free_slots() -> None:
    r = Reader(shards=2, free=0)
    r.answer([])
    step = asyncio.ensure_future(r.reader.step())
    await asyncio.sleep(0)  # one turn of the loop: the step reaches its wait for room
    assert not step.done()
    assert r.executor.rounds == []

    r.free = 4
    r.room.set()  # a slot freed up: the step reads at once
    assert await asyncio.wait_for(step, WAIT_S) == 0.0
    assert r.counts() == [2]


@pytest.mark.parametrize(("shards", "free", "count"), [(4, 10, 2), (4, 3, 1), (1, 7, 7)])
async def test_each_shard_is_asked_for_its_share_of_the_free_slots(
    shards: int, free: int, count: int
) -> None:
    r = Reader(shards=shards, free=free)
    r.answer([])
    await r.reader.step()
    await r.reader.step()
    first, then = r.executor.sent("XREADGROUP")
    keys = [ShardKeys(TOPIC, s).ready for s in range(shards)]
    head = ["XREADGROUP", "GROUP", GROUP, "me", "COUNT", count]
    tail = ["STREAMS", *keys, *[">"] * shards]
    # the first read answers at once: the worker's slots learn whether the topic has entries
    assert list(first.command) == [*head, *tail]
    assert list(then.command) == [*head, "BLOCK", BLOCK_MS, *tail]


async def test_only_a_read_after_a_short_one_blocks() -> None:
    """A topic whose entries are on their way keeps its turn of the worker's slots (issue 43
    item 1): a read after a full one (or the first) answers at once, so the slots learn that
    a stream ran dry without waiting out a blocking read; after a short read, reads block."""
    r = Reader(shards=1, free=2)
    noted: list[bool] = []
    r.reader._noted = noted.append
    replies = iter([[(0, entry("a1")), (0, entry("a2"))], [], [], [(0, entry("a3"))], []])
    r.executor.answer("XREADGROUP", lambda call: next(replies))
    for _ in range(5):
        await r.reader.step()
    blocked = ["BLOCK" in list(c.command) for c in r.executor.sent("XREADGROUP")]
    assert blocked == [False, False, True, True, True]
    assert noted == [False, True, True, True, True]  # full, then short (one of two: short)


async def test_entries_read_are_accepted_by_shard() -> None:
    r = Reader(shards=2, free=10)
    a, b, c = entry("a1"), entry("b2"), entry("c3")
    r.answer([(0, a), (1, b), (0, c)])
    assert await r.reader.step() == 0.0
    assert r.accepted == [(0, [a, c]), (1, [b])]
    assert r.reader.read == 3


async def test_nogroup_makes_the_group_again() -> None:
    r = Reader(shards=2, free=10)
    r.answer(ResponseError("NOGROUP No such key or consumer group"))
    assert await r.reader.step() == 0.0
    assert r.joins == 1
    assert r.accepted == []


@pytest.mark.parametrize(
    "error",
    [
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        RedisConnectionError("Connection reset by peer"),
    ],
    ids=["refused", "connection"],
)
async def test_other_errors_raise_for_the_base_to_count(error: Exception) -> None:
    r = Reader(shards=2, free=10)

    def fail(call: Call[Any]) -> Exception:
        return error

    r.executor.answer("XREADGROUP", fail)
    with pytest.raises(type(error)):
        await r.reader.step()
    assert r.joins == 0


# --- slots shared by the per-shard readers of a cluster ---------------------------------------


def test_reads_together_never_take_more_than_the_free_slots() -> None:
    free = 3
    slots = ReadSlots(lambda: free, asyncio.Event(), shards=4)
    assert [slots.take() for _ in range(5)] == [1, 1, 1, 0, 0]
    assert slots.reserved == 3
    slots.give_back(1)
    free = 2  # the two other reads came back with one entry each, now held
    slots.give_back(1)
    slots.give_back(1)
    assert slots.reserved == 0
    assert slots.take() == 1  # a share of the 2 free over 4 shards is still one


def test_a_read_takes_its_shards_share_of_what_is_left() -> None:
    slots = ReadSlots(lambda: 40, asyncio.Event(), shards=4)
    assert [slots.take() for _ in range(4)] == [10, 7, 5, 4]
    assert slots.reserved == 26


async def test_a_waiting_reader_wakes_when_a_read_gives_its_slot_back() -> None:
    room = asyncio.Event()
    slots = ReadSlots(lambda: 1, room, shards=2)
    assert slots.take() == 1
    waiter = asyncio.ensure_future(slots.wait())
    await asyncio.sleep(0)
    assert slots.waiting == 1 and not waiter.done()
    slots.give_back(1)
    await asyncio.wait_for(waiter, timeout=1)
    assert slots.waiting == 0 and slots.take() == 1


async def test_reads_block_briefly_while_another_reader_has_no_slot() -> None:
    r = Reader(shards=3, free=2)
    r.answer([])
    await r.reader.step()  # the first read answers at once, whatever the slots
    await r.reader.step()  # the worker's only reader: it blocks as long as it likes
    r.reader._slots = slots = ReadSlots(lambda: r.free, r.room, shards=3, readers=3)
    assert slots.take() == 1  # a second reader reads with one slot
    await r.reader.step()  # this one takes the last: the third reader has none
    blocks = [
        int(list(c.command)[list(c.command).index("BLOCK") + 1])
        for c in r.executor.sent("XREADGROUP")[1:]
    ]
    assert blocks == [BLOCK_MS, SHARED_BLOCK_MS]
