"""The producer API against a real server: ids, dedupe, replace, get/cancel/reschedule,
topics, stats, batches, due times on the Redis clock (docs/architecture.md,
invariants 1, 6 and 8).

Every test body runs through `Client` and `AsyncClient`: the blocking client is
wrapped so that the same ``await client.method(...)`` lines drive both.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import msgpack
import pytest
import redis

from tests.support.clients import MakeClient, admin_of
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    DuplicateJobError,
    EnqueueItem,
    JobState,
    MalformedJobError,
    TopicStats,
)
from wheelq.core.ids import job_id_time_ms
from wheelq.core.job import Envelope, Field
from wheelq.core.keys import TOPICS_KEY, ShardKeys, all_shards, shard_of

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

GENERATED_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # Crockford base32, 26 chars
HOUR_MS = 3_600_000
PAYLOAD = {
    "text": "grüße ✓",
    "bytes": b"\x00\xff raw",
    "n": [0, -1, 2**63 - 1, -(2**63)],
    "f": 1.5,
    "none": None,
    "flag": True,
    "nested": {"list": [{"a": []}]},
}


@pytest.fixture
def client(make_client: MakeClient) -> Any:
    return make_client()


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def topic_keys(r: redis.Redis, topic: str) -> set[bytes]:
    return set(r.scan_iter(match=f"*{{{topic}:*", count=1000)) | (
        {k} if r.exists(k := f"wheelq:nodes:{topic}".encode()) else set()
    )


def ready_entries(
    r: redis.Redis, topic: str, shards: int
) -> list[tuple[bytes, dict[bytes, bytes]]]:
    out = []
    for keys in all_shards(topic, shards):
        out += r.xrange(keys.ready, "-", "+")
    return out


def pending_scores(r: redis.Redis, topic: str, shards: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for keys in all_shards(topic, shards):
        for member, score in r.zrange(keys.delayed, 0, -1, withscores=True):
            out[member.decode()] = int(score)
    return out


# --- ids ----------------------------------------------------------------------------------


async def test_10k_generated_ids_are_unique_url_safe_and_carry_their_creation_time(
    client: Any, admin: Any, topic: str
) -> None:
    before = time.time_ns() // 1_000_000
    ids = await client.enqueue_many(
        topic, [EnqueueItem(payload=i, delay=3600) for i in range(10_000)]
    )
    after = time.time_ns() // 1_000_000
    assert len(ids) == 10_000
    assert len(set(ids)) == 10_000, "generated ids collide"
    for job_id in ids:
        assert GENERATED_ID.fullmatch(job_id), job_id
        assert quote(job_id, safe="") == job_id, f"{job_id} is not URL-safe"
        created = job_id_time_ms(job_id)
        assert created is not None and before <= created <= after
    assert (await admin.stats(topic)).pending == 10_000


async def test_generated_ids_sort_by_creation_time(client: Any, topic: str) -> None:
    ids: list[str] = []
    # Enqueue one by one until the ids span several milliseconds (bounded).
    while len({job_id_time_ms(i) for i in ids}) < 5:
        assert len(ids) < 50_000, "the clock did not move"
        ids.append(await client.enqueue(topic, len(ids), delay=3600))
    times = [job_id_time_ms(i) for i in ids]
    assert times == sorted(times), "ids made later carry an earlier time"
    by_text = [job_id_time_ms(i) for i in sorted(ids)]
    assert by_text == sorted(by_text), "sorting ids as strings does not sort them by time"


# --- enqueue, dedupe, replace, get ----------------------------------------------------------


async def test_get_returns_payload_due_attempt_and_max_attempts(
    make_client: MakeClient, redis_sync: redis.Redis, topic: str
) -> None:
    client = make_client(default_max_attempts=7)
    before_wall = time.time_ns() // 1_000_000
    t0 = redis_ms(redis_sync)
    explicit = await client.enqueue(topic, PAYLOAD, delay=60, job_id="order-42", max_attempts=3)
    default = await client.enqueue(topic, {1: "int key"}, delay=60)
    t1 = redis_ms(redis_sync)
    after_wall = time.time_ns() // 1_000_000
    assert explicit == "order-42"

    info = await client.get(topic, explicit)
    assert info is not None
    assert (info.id, info.topic, info.state) == ("order-42", topic, JobState.PENDING)
    assert info.payload == PAYLOAD
    assert t0 + 60_000 <= info.due_ms <= t1 + 60_000
    assert info.attempt == 1
    assert info.max_attempts == 3
    assert before_wall <= info.enqueued_ms <= after_wall

    other = await client.get(topic, default)
    assert other is not None
    assert other.payload == {1: "int key"}
    assert other.max_attempts == 7, "default_max_attempts setting not applied"


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param(b"\xc1 not msgpack", id="envelope-not-msgpack"),
        pytest.param(msgpack.packb([1, "p"]), id="envelope-too-short"),
        pytest.param(Envelope(b"\xc1").pack(), id="payload-not-msgpack"),
        pytest.param(
            Envelope(msgpack.packb({(1, 2): "x"}, use_bin_type=True)).pack(),
            id="payload-with-a-tuple-key",
        ),
    ],
)
async def test_get_of_a_job_that_cannot_be_decoded_raises_malformed_job_error(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str, stored: bytes
) -> None:
    await admin.create_topic(topic, 4)
    keys = ShardKeys(topic, shard_of("bad", 4))
    redis_sync.hset(keys.jobs, "bad", stored)  # written by something other than wheelq
    redis_sync.zadd(keys.delayed, {"bad": redis_ms(redis_sync) + HOUR_MS})

    with pytest.raises(MalformedJobError) as caught:
        await client.get(topic, "bad")

    assert (caught.value.topic, caught.value.job_id) == (topic, "bad")
    assert f"job 'bad' on topic {topic!r} cannot be decoded" in str(caught.value)
    assert redis_sync.hget(keys.jobs, "bad") == stored


async def test_same_job_id_is_enqueued_once(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await client.enqueue(topic, "first", delay=60, job_id="once")
    with pytest.raises(DuplicateJobError) as caught:
        await client.enqueue(topic, "second", delay=5, job_id="once")
    assert caught.value.job_ids == ["once"]
    assert caught.value.enqueued == []
    assert caught.value.topic == topic
    info = await client.get(topic, "once")
    assert info is not None and info.payload == "first"
    assert (await admin.stats(topic)).pending == 1
    keys = ShardKeys(topic, shard_of("once", 4))
    assert redis_sync.hlen(keys.jobs) == 1


async def test_replace_true_replaces_payload_due_and_max_attempts(
    client: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await client.enqueue(topic, "old", delay=60, job_id="r", max_attempts=2)
    t0 = redis_ms(redis_sync)
    assert (
        await client.enqueue(topic, "new", delay=600, job_id="r", max_attempts=9, replace=True)
        == "r"
    )
    t1 = redis_ms(redis_sync)
    info = await client.get(topic, "r")
    assert info is not None
    assert info.payload == "new"
    assert info.max_attempts == 9
    assert t0 + 600_000 <= info.due_ms <= t1 + 600_000
    keys = ShardKeys(topic, shard_of("r", 4))
    assert redis_sync.zcard(keys.delayed) == 1
    assert redis_sync.hlen(keys.jobs) == 1


async def test_replace_true_with_a_past_due_fires_the_new_payload_once(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await client.enqueue(topic, "old", delay=60, job_id="r")
    await client.enqueue(topic, "new", at=1.0, job_id="r", replace=True)
    assert (await client.get(topic, "r")).state is JobState.READY
    entries = ready_entries(redis_sync, topic, 4)
    assert [msgpack.unpackb(f[Field.PAYLOAD]) for _, f in entries] == ["new"]
    assert (await admin.stats(topic)).pending == 0


async def test_replace_true_without_a_pending_job_just_enqueues(client: Any, topic: str) -> None:
    assert await client.enqueue(topic, "x", delay=60, job_id="fresh", replace=True) == "fresh"
    info = await client.get(topic, "fresh")
    assert info is not None and info.payload == "x"


# --- due times --------------------------------------------------------------------------


async def test_delay_timedelta_is_added_to_the_redis_clock(
    client: Any, redis_sync: redis.Redis, topic: str
) -> None:
    t0 = redis_ms(redis_sync)
    job = await client.enqueue(topic, "x", delay=timedelta(minutes=2, milliseconds=250))
    t1 = redis_ms(redis_sync)
    info = await client.get(topic, job)
    assert info is not None
    assert t0 + 120_250 <= info.due_ms <= t1 + 120_250


@pytest.mark.parametrize(
    "at",
    [
        datetime(2034, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC),
        datetime(2034, 1, 2, 8, 34, 5, 678_000, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        datetime(2034, 1, 1, 22, 4, 5, 678_000, tzinfo=timezone(timedelta(hours=-5))),
    ],
    ids=["utc", "plus-0530", "minus-0500"],
)
async def test_at_aware_datetime_is_the_exact_due_ms(client: Any, topic: str, at: datetime) -> None:
    expected = int(datetime(2034, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()) * 1000 + 678
    job = await client.enqueue(topic, "x", at=at)
    info = await client.get(topic, job)
    assert info is not None
    assert info.due_ms == expected


async def test_at_epoch_seconds_is_the_exact_due_ms(client: Any, topic: str) -> None:
    job = await client.enqueue(topic, "x", at=2_019_686_400.125)
    info = await client.get(topic, job)
    assert info is not None
    assert info.due_ms == 2_019_686_400_125


@pytest.mark.parametrize(
    "when",
    [{"at": datetime(2001, 9, 9, 1, 46, 40, tzinfo=UTC)}, {"at": 1_000_000_000}, {"delay": 0}, {}],
    ids=["at-datetime", "at-epoch", "delay-0", "no-due"],
)
async def test_a_job_due_now_or_in_the_past_goes_straight_to_the_stream(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str, when: dict[str, Any]
) -> None:
    t0 = redis_ms(redis_sync)
    job = await client.enqueue(topic, PAYLOAD, max_attempts=4, **when)
    t1 = redis_ms(redis_sync)
    assert (await client.get(topic, job)).state is JobState.READY
    assert (await admin.stats(topic)).pending == 0
    keys = ShardKeys(topic, shard_of(job, 4))
    entries = redis_sync.xrange(keys.ready, "-", "+")
    assert len(entries) == 1, "not exactly one stream entry in the job's shard"
    entry_id, fields = entries[0]
    assert {b"id", b"topic", b"due", b"attempt", b"payload"} <= fields.keys()
    assert fields[Field.ID].decode() == job
    assert fields[Field.TOPIC].decode() == topic
    assert fields[Field.ATTEMPT] == b"1"
    assert fields[Field.MAX_ATTEMPTS] == b"4"
    if "at" in when:
        assert int(fields[Field.DUE]) == 1_000_000_000_000
    else:
        assert t0 <= int(fields[Field.DUE]) <= t1
    assert t0 <= int(entry_id.split(b"-")[0]) <= t1
    assert msgpack.unpackb(fields[Field.PAYLOAD], raw=False) == PAYLOAD
    assert redis_sync.hlen(keys.jobs) == 0


async def test_due_is_computed_on_the_redis_clock_not_the_local_one(
    client: Any, redis_sync: redis.Redis, topic: str
) -> None:
    # The local wall clock is an hour ahead: a due time taken from it would be an hour late.
    real_time, real_time_ns = time.time, time.time_ns
    with pytest.MonkeyPatch.context() as skewed:
        skewed.setattr(time, "time", lambda: real_time() + 3600)
        skewed.setattr(time, "time_ns", lambda: real_time_ns() + 3600 * 10**9)
        t0 = redis_ms(redis_sync)
        later = await client.enqueue(topic, "later", delay=10)
        now = await client.enqueue(topic, "now", delay=0)
        t1 = redis_ms(redis_sync)
        assert job_id_time_ms(later) >= t0 + 3_000_000, "the local clock was not skewed"
    info = await client.get(topic, later)
    assert info is not None
    assert t0 + 10_000 <= info.due_ms <= t1 + 10_000
    assert (await client.get(topic, now)).state is JobState.READY, (
        "a job due now waited for the local clock"
    )
    (entry,) = redis_sync.xrange(ShardKeys(topic, shard_of(now, 4)).ready, "-", "+")
    assert t0 <= int(entry[1][Field.DUE]) <= t1


# --- cancel, reschedule, unknown topics and ids --------------------------------------------


async def test_cancel_removes_a_pending_job_once(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    job = await client.enqueue(topic, "x", delay=60)
    keep = await client.enqueue(topic, "y", delay=60)
    assert await client.cancel(topic, job) is True
    assert (await client.get(topic, job)).state is JobState.CANCELLED
    assert await client.cancel(topic, job) is False
    assert await client.get(topic, keep) is not None
    keys = ShardKeys(topic, shard_of(job, 4))
    assert redis_sync.zscore(keys.delayed, job) is None
    assert redis_sync.hexists(keys.jobs, job) == 0
    assert (await admin.stats(topic)).pending == 1


async def test_cancel_of_a_fired_job_is_false(client: Any, topic: str) -> None:
    job = await client.enqueue(topic, "x")
    assert await client.cancel(topic, job) is False


async def test_reschedule_moves_the_due_time_later_and_earlier(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    job = await client.enqueue(topic, "x", delay=60, max_attempts=3)
    t0 = redis_ms(redis_sync)
    assert await client.reschedule(topic, job, delay=timedelta(hours=2)) is True
    t1 = redis_ms(redis_sync)
    info = await client.get(topic, job)
    assert info is not None
    assert t0 + 2 * HOUR_MS <= info.due_ms <= t1 + 2 * HOUR_MS
    assert await client.reschedule(topic, job, at=2_019_686_400) is True
    info = await client.get(topic, job)
    assert info is not None
    assert info.due_ms == 2_019_686_400_000
    assert (info.payload, info.max_attempts) == ("x", 3)
    assert (await admin.stats(topic)).pending == 1


async def test_reschedule_into_the_past_fires_now(
    client: Any, redis_sync: redis.Redis, topic: str
) -> None:
    job = await client.enqueue(topic, {"k": "v"}, delay=60)
    assert await client.reschedule(topic, job, at=datetime(2020, 1, 1, tzinfo=UTC)) is True
    assert (await client.get(topic, job)).state is JobState.READY
    (entry,) = ready_entries(redis_sync, topic, 4)
    assert entry[1][Field.ID].decode() == job
    assert msgpack.unpackb(entry[1][Field.PAYLOAD]) == {"k": "v"}
    assert await client.reschedule(topic, job, delay=5) is False, "a fired job was rescheduled"


async def test_get_cancel_reschedule_stats_on_an_unknown_topic_create_nothing(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    assert (await client.get(topic, "nope")).state is JobState.UNKNOWN
    assert await client.cancel(topic, "nope") is False
    assert await client.reschedule(topic, "nope", delay=5) is False
    assert await admin.stats(topic) is None
    assert redis_sync.hexists(TOPICS_KEY, topic) == 0, "the topic was created"
    assert topic not in await admin.topics()
    assert topic_keys(redis_sync, topic) == set()


async def test_get_cancel_reschedule_of_an_unknown_id_change_nothing(
    client: Any, redis_sync: redis.Redis, topic: str
) -> None:
    job = await client.enqueue(topic, "x", delay=60)
    before = {k: redis_sync.dump(k) for k in topic_keys(redis_sync, topic)}
    assert (await client.get(topic, "nope")).state is JobState.UNKNOWN
    assert await client.cancel(topic, "nope") is False
    assert await client.reschedule(topic, "nope", delay=5) is False
    assert await client.reschedule(topic, "nope", at=1) is False
    assert {k: redis_sync.dump(k) for k in topic_keys(redis_sync, topic)} == before
    assert await client.get(topic, job) is not None


# --- topics and stats ---------------------------------------------------------------------


async def test_a_topic_is_created_on_first_use_with_default_shards(
    make_client: MakeClient, redis_sync: redis.Redis, topic: str
) -> None:
    client = make_client(default_shards=3)
    admin = admin_of(client)
    assert topic not in await admin.topics()
    ids = await client.enqueue_many(topic, [EnqueueItem(payload=i, delay=60) for i in range(300)])
    assert redis_sync.hget(TOPICS_KEY, topic) == b"3"
    assert (await admin.topics())[topic] == 3
    stats = await admin.stats(topic)
    assert [s.shard for s in stats.shards] == [0, 1, 2]
    for keys in all_shards(topic, 3):
        members = {m.decode() for m in redis_sync.zrange(keys.delayed, 0, -1)}
        assert members == {j for j in ids if shard_of(j, 3) == keys.shard}
    assert not redis_sync.exists(ShardKeys(topic, 3).delayed)
    # A client with another default reads the registry, not its own setting.
    other = make_client(default_shards=8)
    other_admin = admin_of(other)
    job = await other.enqueue(topic, "x", delay=60)
    assert redis_sync.zscore(ShardKeys(topic, shard_of(job, 3)).delayed, job) is not None
    assert await other_admin.create_topic(topic) == 3


async def test_create_topic_is_idempotent_with_the_same_count(
    make_client: MakeClient, redis_sync: redis.Redis, topic: str
) -> None:
    client = make_client()
    admin = admin_of(client)
    assert await admin.create_topic(topic, 7) == 7
    assert await admin.create_topic(topic, 7) == 7
    assert await admin_of(make_client()).create_topic(topic, 7) == 7, "a fresh one disagrees"
    assert await admin_of(make_client()).create_topic(topic) == 7
    assert redis_sync.hget(TOPICS_KEY, topic) == b"7"
    assert (await admin.stats(topic)).shards[-1].shard == 6


async def test_topics_lists_every_topic_with_its_shard_count(
    make_client: MakeClient, topic: str
) -> None:
    client = make_client(default_shards=2)
    admin = admin_of(client)
    await admin.create_topic(f"{topic}.a", 5)
    await client.enqueue(f"{topic}.b", "x", delay=60)
    found = await admin_of(make_client()).topics()
    assert found[f"{topic}.a"] == 5
    assert found[f"{topic}.b"] == 2
    assert topic not in found


async def test_stats_counts_pending_and_ready_per_shard(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await admin.create_topic(topic, 4)
    pending = await client.enqueue_many(
        topic, [EnqueueItem(payload=i, delay=60) for i in range(200)]
    )
    fired = await client.enqueue_many(topic, [EnqueueItem(payload=i) for i in range(50)])
    stats = await admin.stats(topic)
    assert isinstance(stats, TopicStats)
    assert stats.topic == topic
    assert [s.shard for s in stats.shards] == [0, 1, 2, 3]
    for s in stats.shards:
        assert s.pending == sum(1 for j in pending if shard_of(j, 4) == s.shard)
        assert s.ready == sum(1 for j in fired if shard_of(j, 4) == s.shard)
        assert s.pending == redis_sync.zcard(ShardKeys(topic, s.shard).delayed)
    assert stats.pending == 200
    assert stats.ready == 50
    assert sum(1 for s in stats.shards if s.pending) > 1, "all jobs landed in one shard"


# --- batches ------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [500, 37])
async def test_enqueue_many_20k_mixed_dues_returns_ids_in_order_and_places_each_job(
    make_client: MakeClient, redis_sync: redis.Redis, topic: str, batch_size: int
) -> None:
    client = make_client(batch_size=batch_size)
    for shard in range(4):  # the sorted set holds every pending job: no far tier
        redis_sync.hset(ShardKeys(topic, shard).limits, "far", 0)
    n = 20_000
    future_s = int(time.time()) + 3600
    items: list[EnqueueItem | dict[str, Any]] = []
    expected_due: dict[int, int] = {}  # index -> exact due ms, where known in advance
    for i in range(n):
        job_id = f"job-{i}" if i % 2 else None
        kind = i % 4
        if kind == 0:
            items.append(EnqueueItem(payload=i, job_id=job_id))  # due now: fires
        elif kind == 1:
            items.append({"payload": i, "at": 1_000_000 + i, "job_id": job_id})  # past: fires
            expected_due[i] = (1_000_000 + i) * 1000
        elif kind == 2:
            items.append(EnqueueItem(payload=i, at=future_s + i, job_id=job_id, max_attempts=2))
            expected_due[i] = (future_s + i) * 1000
        else:
            items.append(
                {"payload": i, "delay": timedelta(hours=1, milliseconds=i), "job_id": job_id}
            )
    t0 = redis_ms(redis_sync)
    ids = await client.enqueue_many(topic, items)
    t1 = redis_ms(redis_sync)

    assert len(ids) == n
    assert len(set(ids)) == n
    for i, job_id in enumerate(ids):
        if i % 2:
            assert job_id == f"job-{i}", f"id {i} out of order"
        else:
            assert GENERATED_ID.fullmatch(job_id)
    pending = pending_scores(redis_sync, topic, 4)
    fired = {f[Field.ID].decode(): f for _, f in ready_entries(redis_sync, topic, 4)}
    assert len(fired) == n // 2
    assert pending.keys() == {ids[i] for i in range(n) if i % 4 >= 2}
    assert fired.keys() == {ids[i] for i in range(n) if i % 4 < 2}
    for i, job_id in enumerate(ids):
        if i % 4 == 0:
            assert t0 <= int(fired[job_id][Field.DUE]) <= t1
        elif i % 4 == 1:
            assert int(fired[job_id][Field.DUE]) == expected_due[i]
        elif i % 4 == 2:
            assert pending[job_id] == expected_due[i]
        else:
            assert t0 + HOUR_MS + i <= pending[job_id] <= t1 + HOUR_MS + i
        if i % 4 < 2:
            assert msgpack.unpackb(fired[job_id][Field.PAYLOAD]) == i
    sample = await client.get(topic, ids[2])
    assert sample is not None and sample.payload == 2 and sample.max_attempts == 2


async def test_enqueue_many_accepts_a_generator_and_an_empty_batch(
    client: Any, admin: Any, topic: str
) -> None:
    ids = await client.enqueue_many(topic, ({"payload": i, "delay": 60} for i in range(10)))
    assert len(ids) == 10
    assert (await admin.stats(topic)).pending == 10
    assert await client.enqueue_many(topic, []) == []


async def test_duplicate_in_enqueue_many_names_duplicates_and_enqueues_the_rest(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await client.enqueue(topic, "old-a", delay=60, job_id="dup-a")
    await client.enqueue(topic, "old-b", delay=60, job_id="dup-b")
    items = [
        EnqueueItem(payload="new-1", delay=60, job_id="new-1"),
        EnqueueItem(payload="again-a", delay=5, job_id="dup-a"),
        EnqueueItem(payload="generated", delay=60),
        {"payload": "again-b", "delay": 5, "job_id": "dup-b"},
        EnqueueItem(payload="new-2", job_id="new-2"),  # due now: fires
    ]
    with pytest.raises(DuplicateJobError) as caught:
        await client.enqueue_many(topic, items)
    err = caught.value
    assert sorted(err.job_ids) == ["dup-a", "dup-b"]
    assert len(err.enqueued) == 3
    assert err.enqueued[0] == "new-1"
    assert GENERATED_ID.fullmatch(err.enqueued[1])
    assert err.enqueued[2] == "new-2"
    assert "dup-a" in str(err) and "dup-b" in str(err)

    for job_id, payload in [("dup-a", "old-a"), ("dup-b", "old-b")]:
        info = await client.get(topic, job_id)
        assert info is not None and info.payload == payload, f"{job_id} was overwritten"
    new_1 = await client.get(topic, "new-1")
    generated = await client.get(topic, err.enqueued[1])
    assert new_1 is not None and new_1.payload == "new-1"
    assert generated is not None and generated.payload == "generated"
    (entry,) = ready_entries(redis_sync, topic, 4)
    assert entry[1][Field.ID] == b"new-2"
    assert (await admin.stats(topic)).pending == 4


async def test_duplicates_in_later_pipeline_rounds_still_enqueue_every_other_job(
    make_client: MakeClient, redis_sync: redis.Redis, topic: str
) -> None:
    client = make_client(batch_size=7)  # ~290 script calls: many pipeline rounds
    dups = ["job-5", "job-1000", "job-1999"]
    for job_id in dups:
        await client.enqueue(topic, "old", delay=60, job_id=job_id)
    items = [EnqueueItem(payload=i, delay=60, job_id=f"job-{i}") for i in range(2000)]
    with pytest.raises(DuplicateJobError) as caught:
        await client.enqueue_many(topic, items)
    assert sorted(caught.value.job_ids) == sorted(dups)
    assert caught.value.enqueued == [f"job-{i}" for i in range(2000) if f"job-{i}" not in dups]
    pending = pending_scores(redis_sync, topic, 4)
    assert pending.keys() == {f"job-{i}" for i in range(2000)}
    for job_id in dups:
        info = await client.get(topic, job_id)
        assert info is not None and info.payload == "old"


# --- edges that are valid -------------------------------------------------------------------


@pytest.mark.parametrize(
    "job_id",
    ["a:b", "{braces}", "x}:{y", "with space", "ünï©ødé/ok", "é" * 128, "j" * 256, "1:2:3"],
    ids=[
        "colon",
        "braces",
        "hash-tag-like",
        "space",
        "unicode",
        "256-utf8-bytes",
        "256-ascii",
        "colons",
    ],
)
async def test_unusual_but_valid_job_ids_work_end_to_end(
    client: Any, redis_sync: redis.Redis, topic: str, job_id: str
) -> None:
    assert await client.enqueue(topic, "x", delay=60, job_id=job_id) == job_id
    info = await client.get(topic, job_id)
    assert info is not None and info.id == job_id
    assert await client.reschedule(topic, job_id, delay=120) is True
    assert await client.cancel(topic, job_id) is True
    assert await client.enqueue(topic, "y", job_id=job_id) == job_id  # fires now
    (entry,) = ready_entries(redis_sync, topic, 4)
    assert entry[1][Field.ID].decode() == job_id


async def test_longest_topic_name_and_every_allowed_character_work(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    name = f"{topic}_A.z-9".ljust(100, "x")
    assert len(name) == 100
    job = await client.enqueue(name, "x", delay=60)
    info = await client.get(name, job)
    assert info is not None and info.topic == name
    assert (await admin.topics())[name] == 4


async def test_payload_at_the_size_limit_is_accepted(make_client: MakeClient, topic: str) -> None:
    client = make_client(max_payload_bytes=100)
    body = "x" * 98  # str8 header (2 bytes) + 98 = exactly 100 bytes of msgpack
    assert len(msgpack.packb(body)) == 100
    job = await client.enqueue(topic, body, delay=60)
    info = await client.get(topic, job)
    assert info is not None and info.payload == body


@pytest.mark.parametrize("size", [31, 32, 255, 256, 65_535, 65_536, 1024 * 1024 - 5])
async def test_payloads_of_every_msgpack_length_class_fire_intact(
    client: Any, redis_sync: redis.Redis, topic: str, size: int
) -> None:
    """The emit and enqueue scripts unpack envelopes with Redis's Lua cmsgpack: every raw
    length header (fix, 16 and 32 bit) must survive it, up to the 1 MiB default limit."""
    body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    assert len(msgpack.packb(body)) <= 1024 * 1024
    pending = await client.enqueue(topic, body, delay=60)
    info = await client.get(topic, pending)
    assert info is not None and info.payload == body
    fired = await client.enqueue(topic, body)
    (entry,) = ready_entries(redis_sync, topic, 4)
    assert entry[1][Field.ID].decode() == fired
    assert msgpack.unpackb(entry[1][Field.PAYLOAD]) == body


async def test_concurrent_calls_on_one_async_client_share_one_topic_config(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url, default_shards=5) as client:
        admin = AsyncAdmin.of(client)
        batches = await asyncio.gather(
            *[
                client.enqueue_many(topic, [EnqueueItem(payload=i, delay=60) for i in range(100)])
                for _ in range(20)
            ]
        )
        assert len({j for ids in batches for j in ids}) == 2000
        assert (await admin.stats(topic)).pending == 2000
    assert redis_sync.hget(TOPICS_KEY, topic) == b"5"
