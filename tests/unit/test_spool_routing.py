"""Where enqueues go with a spool, and the drain's steps, without a server: a scripted
executor plays Redis (answers, refusals, lost replies), the spool is a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.fakes import ScriptedExecutor
from wheelq.core.clock import ManualClock
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidDelayError, RedisUnavailableError, ScriptError
from wheelq.producer.items import EnqueueItem
from wheelq.producer.operations import PIPELINE_CALLS, Op, Producer, guarded
from wheelq.producer.spool import FENCE_MS, Drain, Spool, Spooler
from wheelq.runtime.breaker import Breaker
from wheelq.store import enqueue
from wheelq.store.call import Call
from wheelq.store.executor import drive_async
from wheelq.store.scripts import Placed

SHARDS = 2
RECORD_MS = 3_600_000


class Parts:
    """A producer with a spool, its breaker and drain, and a scripted Redis."""

    def __init__(self, path: Path, **settings: int) -> None:
        self.clock = ManualClock(1_700_000_000_000)
        self.producer = Producer(ClientSettings(default_shards=SHARDS, **settings))
        self.breaker = Breaker(1000, self.clock)
        self.spool = Spool(path)
        self.drain = Drain(self.spool, self.producer, self.breaker, self.clock)
        self.woken = 0
        self.producer.spooler = Spooler(self.spool, self.clock, self._wake)
        self.executor = ScriptedExecutor()
        self.executor.answer("HSETNX", lambda call: True)
        self.executor.answer("HGET", lambda call: SHARDS)
        self.executor.answer("enqueue", lambda call: [Placed.FIRED] * len(jobs(call)))
        self.executor.answer("ZADD", lambda call: (len(call.command) - 5) // 2)
        self.executor.answer("TIME", lambda call: float(self.clock.now_ms()))

    def _wake(self) -> None:
        self.woken += 1

    async def run(self, op: Op[Any]) -> Any:
        return await drive_async(guarded(self.breaker, op), self.executor.run)

    async def enqueue(self, topic: str, **item: Any) -> str:
        return str(await self.run(self.producer.enqueue(topic, EnqueueItem(**item))))

    async def step(self) -> int:
        async def send(calls: Sequence[Call[Any]]) -> list[Any]:
            return await self.executor.run(calls, return_exceptions=True)

        return int(await drive_async(self.drain.step(), send))


def jobs(call: Call[Any]) -> list[tuple[str, str]]:
    """(id, token) of each job of an enqueue call: a replay's own token, ``CALL:n`` in a
    spooling client's direct call (its call token recorded), '' in a plain enqueue."""
    record_ms, call_token = int(call.args[2]), str(call.args[3])
    ids = enqueue.job_ids(call)
    if record_ms and not call_token:  # a replay: six arguments per job, its token last
        return list(zip(ids, [str(t) for t in call.args[10::6]], strict=True))
    return [(i, f"{call_token}:{n}" if call_token else "") for n, i in enumerate(ids)]


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    made = Parts(tmp_path / "spool.db", spool_record_ms=RECORD_MS)
    yield made
    made.spool.close()


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (RedisConnectionError("Connection refused"), "unreachable"),
        (BusyLoadingError("LOADING Redis is loading the dataset in memory"), "loading"),
        (ReadOnlyError("READONLY You can't write against a read only replica."), "readonly"),
        (OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'."), "oom"),
        (ClusterDownError("CLUSTERDOWN The cluster is down"), "clusterdown"),
        (MasterDownError("MASTERDOWN Link with MASTER is down"), "masterdown"),
        (TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"), "tryagain"),
    ],
)
async def test_an_enqueue_redis_cannot_take_is_spooled_and_returns_its_id(
    parts: Parts, failure: Exception, reason: str
) -> None:
    parts.executor.fail_next(failure)

    job_id = await parts.enqueue("t", payload={"n": 1}, job_id="j1", delay=5)

    assert job_id == "j1"
    (row,) = parts.spool.head(10, 1 << 20)
    assert (row.topic, row.job_id, row.mode) == ("t", "j1", "d")
    assert parts.spool.depth == 1
    assert parts.woken == 1
    assert parts.drain.last_error is None  # the drain has not tried yet
    assert parts.breaker.state == ("closed" if reason not in ("unreachable", "loading") else "open")


async def test_while_the_spool_holds_jobs_enqueues_join_them_without_redis(parts: Parts) -> None:
    parts.executor.fail_next(ReadOnlyError("READONLY"))
    await parts.enqueue("t", payload=1, job_id="first")
    sent = len(parts.executor.rounds)

    await parts.enqueue("t", payload=2, job_id="second")

    assert len(parts.executor.rounds) == sent
    assert [r.job_id for r in parts.spool.head(10, 1 << 20)] == ["first", "second"]


async def test_an_open_breaker_spools_without_sending(parts: Parts) -> None:
    parts.breaker.report(False, RedisConnectionError("refused"))

    await parts.enqueue("t", payload=1, job_id="j")

    assert parts.executor.rounds == []
    assert parts.spool.depth == 1


async def test_bad_input_is_refused_at_the_call_and_never_spooled(parts: Parts) -> None:
    parts.breaker.report(False, RedisConnectionError("refused"))

    with pytest.raises(InvalidDelayError):
        await parts.enqueue("t", payload=1, delay=-1)
    assert parts.spool.depth == 0


@pytest.mark.parametrize(
    "failure", [ScriptError("enqueue.lua: key holds the wrong type"), ResponseError("ERR x")]
)
async def test_other_failures_are_raised_and_nothing_is_spooled(
    parts: Parts, failure: Exception
) -> None:
    parts.executor.fail_next(failure)

    with pytest.raises(type(failure)):
        await parts.enqueue("t", payload=1)
    assert parts.spool.depth == 0


async def test_jobs_confirmed_before_a_later_round_failed_are_not_spooled(tmp_path: Path) -> None:
    parts = Parts(tmp_path / "spool.db", batch_size=1)  # PIPELINE_CALLS jobs a round trip
    await parts.run(parts.producer.create_topic("t"))
    answer = parts.executor._answers["enqueue"]
    rounds = 0

    def second_round_fails(call: Call[Any]) -> Any:
        return RedisConnectionError("reset") if rounds == 2 else answer(call)

    parts.executor.answer("enqueue", second_round_fails)
    total = PIPELINE_CALLS + 4
    items = [EnqueueItem(payload=n, job_id=f"j{n:03}") for n in range(total)]
    op = parts.producer.enqueue_many("t", items)

    async def counting(calls: Sequence[Call[Any]]) -> list[Any]:
        nonlocal rounds
        rounds += 1
        return await parts.executor.run(calls)

    ids = await drive_async(guarded(parts.breaker, op), counting)

    assert ids == [f"j{n:03}" for n in range(total)]
    sent_first = [job_id for call in parts.executor.rounds[1] for job_id, _ in jobs(call)]
    spooled = [row.job_id for row in parts.spool.head(100, 1 << 30)]
    assert len(sent_first) == PIPELINE_CALLS
    assert sorted(spooled) == sorted(set(ids) - set(sent_first))
    parts.spool.close()


async def test_a_step_replays_each_shards_rows_in_order_with_tokens_then_deletes_them(
    parts: Parts,
) -> None:
    parts.breaker.report(False, RedisConnectionError("refused"))
    ids = [await parts.enqueue("t", payload=n, job_id=f"j{n}") for n in range(6)]
    seq = {row.job_id: row.seq for row in parts.spool.head(10, 1 << 20)}

    assert await parts.step() == 6

    calls = parts.executor.sent("enqueue")
    assert {call.keys[0] for call in calls} == {ShardKeys("t", s).delayed for s in range(SHARDS)}
    for call in calls:
        assert int(call.args[2]) == RECORD_MS
        replayed = jobs(call)
        assert [i for i, _ in replayed] == sorted((i for i, _ in replayed), key=seq.__getitem__)
        assert [t for _, t in replayed] == [f"{parts.spool.spool_id}:{seq[i]}" for i, _ in replayed]
        assert {shard_of(i, SHARDS) for i, _ in replayed} == {int(call.keys[0][3])}
    assert sorted(i for call in calls for i, _ in jobs(call)) == sorted(ids)
    assert parts.spool.depth == 0
    assert parts.breaker.state == "open"  # the runner reports the step: succeeded() closes it


def deadline_ms(call: Call[Any]) -> int:
    """A replay's deadline (ARGV[5], where a plain call has its layout)."""
    return int(call.args[4])


async def test_the_next_step_keeps_the_tokens_of_deleted_rows_only_past_any_deadline(
    parts: Parts,
) -> None:
    parts.breaker.report(False, RedisConnectionError("refused"))
    await parts.enqueue("t", payload=1, job_id="j1")
    await parts.step()
    (replay,) = parts.executor.sent("enqueue")

    assert parts.drain.pending()  # nothing spooled, but tokens to settle
    assert await parts.step() == 0

    (settle,) = parts.executor.sent("ZADD")
    key, flags, (until, token) = settle.command[1], settle.command[2:5], settle.command[5:]
    assert (key, flags, token) == (
        replay.keys[0].replace(":delayed", ":spooled"),
        ("XX", "LT", "CH"),  # shortened, never lengthened or added
        jobs(replay)[0][1],
    )
    assert int(until) >= deadline_ms(replay) + FENCE_MS  # two fences from the next step
    assert not parts.drain.pending()


async def test_each_step_sends_a_deadline_one_fence_after_the_redis_clock_it_measured(
    parts: Parts,
) -> None:
    redis_ahead_ms = 3_600_000  # the Redis clock an hour ahead of the producer's
    parts.executor.answer("TIME", lambda call: float(parts.clock.now_ms() + redis_ahead_ms))
    parts.breaker.report(False, RedisConnectionError("refused"))
    await parts.enqueue("t", payload=1, job_id="j1")
    before = parts.clock.now_ms() + redis_ahead_ms

    await parts.step()

    (replay,) = parts.executor.sent("enqueue")
    assert before + FENCE_MS <= deadline_ms(replay) <= before + FENCE_MS + 60_000


async def test_a_step_whose_reply_is_lost_keeps_its_rows_and_replays_the_same_tokens(
    parts: Parts,
) -> None:
    await parts.run(parts.producer.create_topic("t"))
    parts.breaker.report(False, RedisConnectionError("refused"))
    await parts.step()  # the clock measured: the step's one round is the replay
    await parts.enqueue("t", payload=1, job_id="j1")
    parts.executor.fail_next(RedisConnectionError("Connection reset by peer"))

    with pytest.raises(RedisConnectionError):
        await parts.step()
    assert parts.spool.depth == 1
    assert await parts.step() == 1

    first, again = parts.executor.sent("enqueue")
    assert jobs(first) == jobs(again)
    assert parts.spool.depth == 0


async def spool_six_and_refuse_one_shard(parts: Parts, shard: int, error: Exception) -> list[str]:
    """Spool six jobs (both shards), and make Redis answer `error` for `shard`'s call."""
    parts.breaker.report(False, RedisConnectionError("refused"))
    ids = [await parts.enqueue("t", payload=n, job_id=f"j{n}") for n in range(6)]
    refused = ShardKeys("t", shard).delayed
    answer = parts.executor._answers["enqueue"]
    parts.executor.answer(
        "enqueue", lambda call: error if call.keys[0] == refused else answer(call)
    )
    return ids


async def test_a_shard_refused_for_good_moves_its_rows_aside_and_the_others_go_on(
    parts: Parts,
) -> None:
    wrong_type = ScriptError("enqueue.lua: key holds the wrong type")
    ids = await spool_six_and_refuse_one_shard(parts, 0, wrong_type)

    assert await parts.step() == 6

    assert parts.spool.depth == 0
    assert parts.spool.rejected == len([i for i in ids if shard_of(i, SHARDS) == 0]) > 0


async def test_a_shard_that_cannot_take_writes_now_keeps_its_rows_and_the_step_raises(
    parts: Parts,
) -> None:
    ids = await spool_six_and_refuse_one_shard(parts, 1, TryAgainError("TRYAGAIN"))

    with pytest.raises(TryAgainError):
        await parts.step()

    left = [row.job_id for row in parts.spool.head(10, 1 << 20)]
    assert left == [i for i in ids if shard_of(i, SHARDS) == 1] != []
    assert parts.spool.rejected == 0


async def test_the_breaker_refusal_is_a_redis_unavailable_error(parts: Parts) -> None:
    parts.breaker.report(False, RedisConnectionError("refused"))

    with pytest.raises(RedisUnavailableError) as refused:
        await parts.run(parts.producer.topics())
    assert refused.value.reason == "breaker_open"
