"""enqueue.lua in replay mode (a producer spool's drain), called directly on a real server:
each write's token is checked against and added to the shard's record (``{T:s}:spooled``),
so replaying the same batch twice writes each job once, even one that fired in between."""

from __future__ import annotations

import pytest
import redis

from tests.support.scripts import Runner
from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys
from wheelq.errors import LateReplayError, MalformedJobError, ScriptError
from wheelq.store import enqueue
from wheelq.store.enqueue import JobWrite
from wheelq.store.scripts import Placed

pytestmark = pytest.mark.both_servers  # a Lua script, called directly

RECORD_MS = 600_000
HOUR_MS = 3_600_000


def write(job_id: str, token: str, delay_ms: int = 0, replace: bool = False) -> JobWrite:
    envelope = Envelope(job_id.encode(), 1, 5, 1_700_000_000_000).pack()
    return JobWrite(job_id, DueSpec("delay", delay_ms), replace, envelope, token)


def fired_ids(r: redis.Redis, keys: ShardKeys) -> list[str]:
    return [fields[b"id"].decode() for _, fields in r.xrange(keys.ready)]


def server_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def test_a_batch_replayed_twice_fires_each_job_due_now_once(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    batch = [write("a", "s:1"), write("b", "s:2"), write("c", "s:3", delay_ms=HOUR_MS)]

    first = run(enqueue.enqueue(keys, batch, RECORD_MS))
    again = run(enqueue.enqueue(keys, batch, RECORD_MS))

    assert first == [Placed.FIRED, Placed.FIRED, Placed.SCHEDULED]
    assert again == [Placed.APPLIED] * 3
    assert fired_ids(redis_sync, keys) == ["a", "b"]
    assert redis_sync.zrange(keys.delayed, 0, -1) == [b"c"]


def test_the_record_keeps_each_token_until_the_server_time_it_expires(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    before = server_ms(redis_sync)
    run(enqueue.enqueue(keys, [write("a", "s:1"), write("b", "s:2", delay_ms=HOUR_MS)], RECORD_MS))
    after = server_ms(redis_sync)

    record = dict(redis_sync.zrange(keys.spooled, 0, -1, withscores=True))
    assert set(record) == {b"s:1", b"s:2"}
    assert all(before + RECORD_MS <= score <= after + RECORD_MS for score in record.values())
    assert 0 < redis_sync.pttl(keys.spooled) <= RECORD_MS


def test_a_duplicate_decided_once_stays_decided(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(enqueue.enqueue(keys, [write("x", "", delay_ms=HOUR_MS)]))  # pending, plain enqueue
    batch = [write("x", "s:9")]

    assert run(enqueue.enqueue(keys, batch, RECORD_MS)) == [Placed.DUPLICATE]
    redis_sync.zrem(keys.delayed, "x")  # the pending job fired or was cancelled meanwhile
    redis_sync.hdel(keys.jobs, "x")
    assert run(enqueue.enqueue(keys, batch, RECORD_MS)) == [Placed.APPLIED]
    assert redis_sync.exists(keys.jobs, keys.delayed) == 0


def test_the_same_id_under_two_tokens_is_two_writes_in_order(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    first = write("x", "s:1", delay_ms=HOUR_MS // 6)  # within the far horizon: the sorted set
    replaced = write("x", "s:2", delay_ms=HOUR_MS // 3, replace=True)

    placed = run(enqueue.enqueue(keys, [first, replaced], RECORD_MS))

    assert placed == [Placed.SCHEDULED, Placed.SCHEDULED]
    assert redis_sync.zscore(keys.delayed, "x") > server_ms(redis_sync) + HOUR_MS // 4
    assert run(enqueue.enqueue(keys, [first, replaced], RECORD_MS)) == [Placed.APPLIED] * 2


def test_a_plain_enqueue_neither_reads_nor_writes_the_record(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    redis_sync.set(keys.spooled, "not a zset")

    assert run(enqueue.enqueue(keys, [write("a", "s:1")])) == [Placed.FIRED]
    assert redis_sync.get(keys.spooled) == b"not a zset"


def test_a_replay_into_a_record_of_the_wrong_type_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    redis_sync.set(keys.spooled, "not a zset")

    with pytest.raises(ScriptError, match="spooled"):
        run(enqueue.enqueue(keys, [write("a", "s:1")], RECORD_MS))
    assert redis_sync.exists(keys.ready, keys.delayed, keys.jobs) == 0


def test_each_replay_removes_at_most_twice_as_many_expired_tokens_as_it_adds(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    expired = server_ms(redis_sync) - RECORD_MS  # their expiry time passed
    redis_sync.zadd(keys.spooled, {f"old:{n}": expired + n for n in range(5)})

    run(enqueue.enqueue(keys, [write("a", "s:1")], RECORD_MS))

    left = [m.decode() for m in redis_sync.zrange(keys.spooled, 0, -1)]
    assert left == ["old:2", "old:3", "old:4", "s:1"]  # the oldest two went


def test_settle_replayed_shortens_only_the_tokens_given_and_adds_none(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(enqueue.enqueue(keys, [write("a", "s:1"), write("b", "s:2")], RECORD_MS))
    until = server_ms(redis_sync) + 30_000

    assert run(enqueue.settle_replayed(keys, ["s:1", "s:7"], until)) == 1

    record = dict(redis_sync.zrange(keys.spooled, 0, -1, withscores=True))
    assert set(record) == {b"s:1", b"s:2"}  # s:7 was not there: not added
    assert record[b"s:1"] == until and record[b"s:2"] > until + RECORD_MS // 2
    assert run(enqueue.settle_replayed(keys, ["s:1"], until + 60_000)) == 0  # never later
    assert redis_sync.zscore(keys.spooled, "s:1") == until
    assert run(enqueue.enqueue(keys, [write("a", "s:1")], RECORD_MS)) == [Placed.APPLIED]


def test_a_settled_token_stays_applied_until_it_expires_then_goes_with_later_replays(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(enqueue.enqueue(keys, [write("a", "s:1")], RECORD_MS))
    run(enqueue.settle_replayed(keys, ["s:1"], server_ms(redis_sync) - 1))  # expired now

    run(enqueue.enqueue(keys, [write("b", "s:2", delay_ms=HOUR_MS)], RECORD_MS))

    assert redis_sync.zrange(keys.spooled, 0, -1) == [b"s:2"]  # the expired one collected


# --- the fence: a replay's deadline ---------------------------------------------------------


@pytest.mark.cluster_too
def test_a_replay_past_its_deadline_is_refused_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    deadline = server_ms(redis_sync) - 1
    batch = [write("a", "s:1"), write("b", "s:2", delay_ms=HOUR_MS)]

    with pytest.raises(LateReplayError) as late:
        run(enqueue.enqueue(keys, batch, RECORD_MS, deadline_ms=deadline))

    assert late.value.deadline_ms == deadline and late.value.now_ms > deadline
    assert late.value.topic == keys.topic
    assert redis_sync.exists(keys.ready, keys.delayed, keys.jobs, keys.spooled) == 0
    assert fired_ids(redis_sync, keys) == []


@pytest.mark.cluster_too
def test_a_replay_within_its_deadline_is_written_and_recorded(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    deadline = server_ms(redis_sync) + 60_000
    batch = [write("a", "s:1"), write("b", "s:2", delay_ms=HOUR_MS)]

    placed = run(enqueue.enqueue(keys, batch, RECORD_MS, deadline_ms=deadline))

    assert placed == [Placed.FIRED, Placed.SCHEDULED]
    assert redis_sync.zcard(keys.spooled) == 2


def test_a_late_write_of_settled_rows_is_applied_before_its_deadline_and_refused_after(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    """The relay's fence (docs/architecture.md, "The outbox relay"): relay A took rows at
    Redis time t with a deadline t + fence; relay B took them later, placed and settled them
    (their tokens kept until B's time + 2 fences). A's write then lands: within its deadline
    it finds the tokens (APPLIED), after it is refused: never a second job."""
    fence_ms = 5_000
    t = server_ms(redis_sync)
    batch = [write("a", "s:1"), write("b", "s:2")]
    assert (
        run(enqueue.enqueue(keys, batch, RECORD_MS, deadline_ms=t + 60_000)) == [Placed.FIRED] * 2
    )  # relay B
    run(enqueue.settle_replayed(keys, ["s:1", "s:2"], server_ms(redis_sync) + 2 * fence_ms))

    in_time = run(enqueue.enqueue(keys, batch, RECORD_MS, deadline_ms=t + fence_ms))
    with pytest.raises(LateReplayError):
        run(enqueue.enqueue(keys, batch, RECORD_MS, deadline_ms=t - 1))

    assert in_time == [Placed.APPLIED] * 2
    assert fired_ids(redis_sync, keys) == ["a", "b"]


def test_a_plain_enqueue_and_a_direct_call_ignore_the_deadline(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    past = server_ms(redis_sync) - 60_000

    plain = run(enqueue.enqueue(keys, [write("a", "")], deadline_ms=past))
    direct = run(enqueue.enqueue(keys, [write("b", "")], RECORD_MS, "c1", deadline_ms=past))

    assert plain == direct == [Placed.FIRED]


def test_a_replay_refused_as_malformed_records_only_what_it_wrote(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    """A job due now whose envelope cannot be decoded ends the call: the jobs before it that
    fired keep their tokens (a replay fires none twice); one gathered to be scheduled at the
    end was not written, so its token is not recorded and a replay writes it."""
    bad = JobWrite("bad", DueSpec("delay", 0), False, b"\xc1", "s:3")
    batch = [write("now", "s:1"), write("later", "s:2", delay_ms=HOUR_MS), bad]

    with pytest.raises(MalformedJobError):
        run(enqueue.enqueue(keys, batch, RECORD_MS))
    assert fired_ids(redis_sync, keys) == ["now"]
    assert redis_sync.zrange(keys.spooled, 0, -1) == [b"s:1"]

    again = run(enqueue.enqueue(keys, batch[:2], RECORD_MS))

    assert again == [Placed.APPLIED, Placed.SCHEDULED]
    assert fired_ids(redis_sync, keys) == ["now"]
    assert redis_sync.zrange(keys.delayed, 0, -1) == [b"later"]
