"""web.coalescer.Coalescer with a scripted enqueue_many: one turn's enqueues go together,
each request still gets its own answer (its id, its own bad value, its own duplicate), and
a failure of the batch reaches every request in it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    RedisUnavailableError,
)
from wheelq.producer.items import EnqueueItem
from wheelq.web.coalescer import MAX_BATCH, Coalescer


class FakeRedis:
    """enqueue_many that records its batches and keeps ids pending, as Redis would."""

    def __init__(self) -> None:
        self.batches: list[list[EnqueueItem]] = []
        self.pending: set[str] = set()
        self.fail: Exception | None = None
        self.counter = 0

    async def enqueue_many(self, topic: str, items: Sequence[EnqueueItem]) -> list[str]:
        self.batches.append(list(items))
        if self.fail is not None:
            raise self.fail
        for i, item in enumerate(items):
            if item.payload == "bad":
                raise InvalidArgumentError("delay", f"items[{i}]: delay must be >= 0")
        ids, dups = [], []
        for item in items:
            self.counter += 1
            job_id = item.job_id or f"gen-{self.counter}"
            if job_id in self.pending:
                dups.append(job_id)
                continue
            self.pending.add(job_id)
            ids.append(job_id)
        if dups:
            raise DuplicateJobError(topic, dups, ids)
        return ids


async def enqueue_all(c: Coalescer, items: list[EnqueueItem]) -> list[object]:
    return await asyncio.gather(*(c.enqueue("t", i) for i in items), return_exceptions=True)


async def test_one_turns_enqueues_go_as_one_batch_and_each_gets_its_id() -> None:
    redis = FakeRedis()
    got = await enqueue_all(
        Coalescer(redis.enqueue_many), [EnqueueItem(payload=i) for i in range(5)]
    )
    assert len(redis.batches) == 1
    assert got == [f"gen-{i}" for i in range(1, 6)]


async def test_a_bad_job_fails_alone_with_its_own_error() -> None:
    redis = FakeRedis()
    items = [EnqueueItem(payload=1), EnqueueItem(payload="bad"), EnqueueItem(payload=3)]
    got = await enqueue_all(Coalescer(redis.enqueue_many), items)
    assert isinstance(got[1], InvalidArgumentError)
    assert str(got[1]) == "delay must be >= 0" and got[1].parameter == "delay"
    assert isinstance(got[0], str) and isinstance(got[2], str)
    assert [len(b) for b in redis.batches] == [3, 2], "the rest was sent again without it"


async def test_a_pending_id_fails_alone_and_one_id_twice_in_a_turn_is_a_duplicate() -> None:
    redis = FakeRedis()
    redis.pending.add("taken")
    items = [
        EnqueueItem(payload=1, job_id="taken"),
        EnqueueItem(payload=2, job_id="a"),
        EnqueueItem(payload=3),
    ]
    items.append(EnqueueItem(payload=4, job_id="a"))
    got = await enqueue_all(Coalescer(redis.enqueue_many), items)
    assert isinstance(got[0], DuplicateJobError) and got[0].job_ids == ["taken"]
    assert got[1] == "a" and isinstance(got[2], str)
    assert isinstance(got[3], DuplicateJobError) and got[3].job_ids == ["a"]
    assert all(
        len({i.job_id for i in b if i.job_id}) == sum(1 for i in b if i.job_id)
        for b in redis.batches
    ), "an id went twice in one batch"


async def test_a_batch_failure_reaches_every_request_in_it() -> None:
    redis = FakeRedis()
    redis.fail = RedisUnavailableError("redis at 127.0.0.1:1: refused")
    got = await enqueue_all(
        Coalescer(redis.enqueue_many), [EnqueueItem(payload=i) for i in range(3)]
    )
    assert all(isinstance(g, RedisUnavailableError) for g in got)


async def test_batches_are_at_most_max_batch() -> None:
    redis = FakeRedis()
    n = MAX_BATCH * 2 + 1
    got = await enqueue_all(
        Coalescer(redis.enqueue_many), [EnqueueItem(payload=i) for i in range(n)]
    )
    assert sorted(len(b) for b in redis.batches) == [1, MAX_BATCH, MAX_BATCH]
    assert len(set(got)) == n


@pytest.mark.parametrize("turns", [2, 3])
async def test_separate_turns_are_separate_batches(turns: int) -> None:
    redis = FakeRedis()
    c = Coalescer(redis.enqueue_many)
    for i in range(turns):
        assert (await c.enqueue("t", EnqueueItem(payload=i))).startswith("gen-")
    assert len(redis.batches) == turns
