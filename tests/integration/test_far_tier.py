"""The far tier (docs/architecture.md, "The far tier", invariant 14): a job due beyond its
topic's horizon is kept in a bucket, not in the sorted set, and every operation by id means
what it means for any pending job: dedupe, replace, get, cancel, reschedule into the hot
window and out of it; promotion moves each far job into the sorted set once, fenced by the
lease, however often it is called and by whom, and the job then fires on time, never early;
a leaf is promoted the horizon before its start (jobs due at the start fire within 50 ms at
p99), and the promoter sleeps between rounds, never calling back to back;
the pending list (the library's, HTTP's and the console's) merges far jobs with the sorted
set's in due order through every page boundary and due range, a page the far records' bound
cuts short goes on from the next leaf, and bulk actions select and act on far jobs. On both
servers, one server and a cluster."""

from __future__ import annotations

import itertools
import math
import re
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from tests.integration.test_job_lists import every_page
from tests.integration.test_web_dashboard import get
from tests.support.clients import SyncAsAsync
from tests.support.entries import ENQUEUED_MS, ready_fields
from tests.support.node_proc import NodeProcess
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually, eventually_sync, until
from tests.support.web import serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, Scheduler
from wheelq.core import far_tier as ft
from wheelq.core.history import SEPARATOR, JobState
from wheelq.core.job import Envelope, Field, entry_ms
from wheelq.core.job_list import PREVIEW_CHARS
from wheelq.core.keys import (
    ShardKeys,
    all_shards,
    far_buckets_key,
    far_index_key,
    far_leaf_key,
    shard_of,
)
from wheelq.core.payload import payload_text, read_payload
from wheelq.embedded import ServerBinary
from wheelq.errors import DuplicateJobError, LeaseLostError, TopicNotEmptyError
from wheelq.store import far_tier, job_lists, observe, schedules, settle, topics
from wheelq.store.executor import AsyncExecutor, SyncExecutor

pytestmark = pytest.mark.cluster_too

HOUR_S = 3600
HORIZON_MS = 600_000
SHARDS = 2


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        yield c


async def far_topic(
    client: AsyncClient,
    topic: str,
    horizon_ms: int = HORIZON_MS,
    width_ms: int | None = None,
    shards: int = SHARDS,
) -> list[ShardKeys]:
    """`topic` of `shards` with a far tier beyond `horizon_ms` (buckets of `width_ms`)."""
    await AsyncAdmin.of(client).create_topic(topic, shards)
    universe = all_shards(topic, shards)
    r = client.redis
    for keys in universe:
        await r.hset(keys.limits, "far", horizon_ms)
        if width_ms is not None:
            await r.hset(keys.far, "width", width_ms)
    return universe


async def in_sorted_set(r: redis.asyncio.Redis, topic: str, job_id: str) -> bool:
    keys = ShardKeys(topic, shard_of(job_id, SHARDS))
    return await r.zscore(keys.delayed, job_id) is not None


async def far_entries(r: redis.asyncio.Redis, shards: list[ShardKeys]) -> int:
    return sum([int(await r.hget(keys.far, "entries") or 0) for keys in shards])


async def test_a_far_job_is_kept_out_of_the_sorted_set_and_found_by_id(
    client: AsyncClient, topic: str
) -> None:
    shards = await far_topic(client, topic)
    r = client.redis
    await client.enqueue(topic, {"v": 1}, delay=2 * HOUR_S, job_id="far")
    await client.enqueue(topic, {"v": 2}, delay=60, job_id="near")
    assert not await in_sorted_set(r, topic, "far")
    assert await in_sorted_set(r, topic, "near")
    assert await far_entries(r, shards) == 1
    assert (await AsyncAdmin.of(client).stats(topic)).pending == 2  # both tiers counted
    info = await client.get(topic, "far")
    assert info is not None and info.state is JobState.PENDING
    assert info.payload == {"v": 1}
    with pytest.raises(DuplicateJobError):
        await client.enqueue(topic, {"v": 3}, delay=3 * HOUR_S, job_id="far")
    assert (await client.get(topic, "far")).payload == {"v": 1}  # changed nothing
    await client.enqueue(topic, {"v": 4}, delay=3 * HOUR_S, job_id="far", replace=True)
    replaced = await client.get(topic, "far")
    assert replaced.payload == {"v": 4} and replaced.due_ms > info.due_ms
    assert await far_entries(r, shards) == 1  # one job, one index entry
    assert await client.cancel(topic, "far") is True
    assert await client.cancel(topic, "far") is False
    assert (await client.get(topic, "far")).state is JobState.CANCELLED
    assert await far_entries(r, shards) == 0
    await client.enqueue(topic, {"v": 5}, delay=2 * HOUR_S, job_id="far")  # the id is free
    assert (await client.get(topic, "far")).payload == {"v": 5}


async def test_a_job_moves_between_tiers_when_rescheduled(client: AsyncClient, topic: str) -> None:
    shards = await far_topic(client, topic)
    r = client.redis
    await client.enqueue(topic, {"v": 1}, delay=2 * HOUR_S, job_id="j")
    assert await client.reschedule(topic, "j", delay=30)  # into the hot window
    assert await in_sorted_set(r, topic, "j") and await far_entries(r, shards) == 0
    info = await client.get(topic, "j")
    assert await client.reschedule(topic, "j", delay=5 * HOUR_S)  # and out again
    assert not await in_sorted_set(r, topic, "j") and await far_entries(r, shards) == 1
    moved = await client.get(topic, "j")
    assert moved.state is JobState.PENDING and moved.due_ms - info.due_ms > 4 * HOUR_S * 1000
    assert moved.payload == {"v": 1}
    assert await client.reschedule(topic, "j", delay=6 * HOUR_S)  # far to far
    assert await far_entries(r, shards) == 1
    assert (await client.get(topic, "j")).due_ms - moved.due_ms >= HOUR_S * 1000 - 1000


async def test_a_debounced_call_writes_over_a_job_of_its_id_pending_far(
    client: AsyncClient, topic: str
) -> None:
    """A debounce finds the id pending in the far tier as in the sorted set: the call's job
    replaces it, so the id fires once, not again when the far record is promoted."""
    shards = await far_topic(client, topic)
    r = client.redis
    await client.enqueue(topic, {"v": 1}, delay=2 * HOUR_S, job_id="d")
    assert await far_entries(r, shards) == 1
    await client.enqueue(topic, {"v": 2}, job_id="d", debounce_ms=60_000)
    assert await far_entries(r, shards) == 0  # written over, not left to fire later
    assert await in_sorted_set(r, topic, "d")
    info = await client.get(topic, "d")
    assert info is not None and info.payload == {"v": 2}
    assert info.due_ms is not None and info.due_ms < info.enqueued_ms + 2 * 60_000


async def test_a_retry_of_an_id_pending_far_waits_under_an_alias(
    client: AsyncClient, topic: str
) -> None:
    """A failed run whose id is pending again in the far tier is retried under an alias
    member, as when the id is pending in the sorted set: neither job replaces the other."""
    shards = await far_topic(client, topic)
    r = client.redis
    keys = ShardKeys(topic, shard_of("j", SHARDS))
    await r.xgroup_create(keys.ready, "g", id="0", mkstream=True)
    entry = (await r.xadd(keys.ready, ready_fields("j", topic=topic))).decode()
    await r.xreadgroup("g", "w", {keys.ready: ">"})
    await client.enqueue(topic, {"v": "again"}, delay=2 * HOUR_S, job_id="j")  # the id is free
    retry = Envelope(b"p", 2, 5, ENQUEUED_MS, "g", "j").pack()
    (retried,) = await AsyncExecutor(r).run([settle.retry(keys, "g", entry, "j", 60_000, retry)])
    assert retried.member == f"j{SEPARATOR}g{SEPARATOR}{entry}"
    assert await r.hget(keys.jobs, retried.member) == retry
    assert not await in_sorted_set(r, topic, "j") and await far_entries(r, shards) == 1
    info = await client.get(topic, "j")
    assert info is not None and info.payload == {"v": "again"}


async def test_a_schedule_run_is_not_written_again_when_its_id_is_pending_far(
    client: AsyncClient, topic: str
) -> None:
    """Materializing a run whose id is already pending in the far tier writes nothing, as
    when it is pending in the sorted set: each run exists once."""
    shards = await far_topic(client, topic)
    r = client.redis
    seconds, micros = await r.time()
    due_ms = seconds * 1000 + micros // 1000 + 3 * HOUR_S * 1000
    run_id = f"s@{due_ms}"
    await client.enqueue(topic, {"v": 1}, at=due_ms / 1000, job_id=run_id)
    assert await far_entries(r, shards) == 1
    keys = ShardKeys(topic, shard_of(run_id, SHARDS))
    run = Envelope(b"r", 1, 5, ENQUEUED_MS, "", run_id).pack()
    (written,) = await AsyncExecutor(r).run([schedules.materialize(keys, 1, "s", [(due_ms, run)])])
    assert written == 0
    assert not await in_sorted_set(r, topic, run_id)
    info = await client.get(topic, run_id)
    assert info is not None and info.payload == {"v": 1}


async def test_promotion_moves_each_far_job_once_fenced_by_the_lease(
    client: AsyncClient, topic: str
) -> None:
    shards = await far_topic(client, topic)
    r = client.redis
    ids = [f"j{i}" for i in range(1500)]
    # Due over 15 minutes: at most about 64 a shard in any minute leaf, so every job goes far
    # whatever the millisecond the test starts at (over 90 s, a minute of one shard could be
    # given 514: a full leaf of level 0 leaves the rest hot, as test_jobs_due_at_one_instant_
    # fill_a_minute_leaf_and_the_rest_stay_hot shows).
    items = [
        {"payload": i, "delay": 2 * HOUR_S + i % 900, "job_id": job_id}
        for i, job_id in enumerate(ids)
    ]
    await client.enqueue_many(topic, items)
    await client.cancel(topic, "j7")  # a dead record promotion passes over
    assert await far_entries(r, shards) == len(ids) - 1
    executor = AsyncExecutor(r)
    for keys in shards:
        await r.set(keys.lease, "a")
        with pytest.raises(LeaseLostError):  # not the leader: nothing moves
            await executor.run([far_tier.promote(keys, "b")])
        await r.hset(keys.limits, "far", 0)  # no far tier now: every bucket is promoted
        # Two leaders in turn, a batch each, the lease handed over between them.
        moved = skipped = 0
        holder = "a"
        while True:
            (done,) = await executor.run([far_tier.promote(keys, holder, 100)])
            moved, skipped = moved + done.moved, skipped + done.skipped
            if not done.more:
                break
            holder = "b" if holder == "a" else "a"
            await r.set(keys.lease, holder)
        (again,) = await executor.run([far_tier.promote(keys, holder)])
        assert (again.moved, again.more, again.next_ms) == (0, False, None)
    assert await far_entries(r, shards) == 0
    for job_id in ids:
        assert await in_sorted_set(r, topic, job_id) is (job_id != "j7"), job_id
        info = await client.get(topic, job_id)
        expected = JobState.CANCELLED if job_id == "j7" else JobState.PENDING
        assert info.state is expected, job_id
    assert sum([await r.zcard(keys.delayed) for keys in shards]) == len(ids) - 1


async def test_a_promoted_job_fires_on_time_never_early(
    client: AsyncClient, topic: str, redis_url: str
) -> None:
    shards = await far_topic(client, topic, horizon_ms=2000, width_ms=1000)
    r = client.redis
    seconds, micros = await r.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    due = (now_ms // 1000 + 5) * 1000  # the start of a bucket 4-5 s ahead: beyond the horizon
    ids = [f"p{i}" for i in range(20)]
    await client.enqueue_many(
        topic, [{"payload": i, "at": due / 1000, "job_id": j} for i, j in enumerate(ids)]
    )
    assert await far_entries(r, shards) == len(ids)
    node = Scheduler.from_url(redis_url, [topic])
    await node.start()
    try:

        async def fired() -> bool:
            return all([(await client.get(topic, j)).state is JobState.READY for j in ids])

        await eventually(fired, timeout_s=15, what="the far jobs fired")
    finally:
        await node.stop()
    for job_id in ids:
        info = await client.get(topic, job_id)
        assert info.fired_ms is not None and info.fired_ms >= due, job_id  # never early
    assert await far_entries(r, shards) == 0
    assert node.promoter.promoted == len(ids)


EDGE_HORIZON_MS = 2000
EDGE_WIDTH_MS = 250
"""Leaves of a quarter second (16 to a level-1 leaf of 4 s): the edge tests' leaves come
within the horizon a few hundred ms apart."""


async def leaf_of_due(r: Any, keys: ShardKeys, due_ms: int) -> tuple[int, int]:
    """(start ms, level) of the far leaf of `keys` covering `due_ms`."""
    (leaf,) = await r.zrange(
        far_buckets_key(keys), due_ms, "-inf", byscore=True, desc=True, num=1, offset=0
    )
    return ft.leaf_of(int(leaf), EDGE_WIDTH_MS)


async def jobs_at_leaf_starts(
    client: AsyncClient, keys: ShardKeys, first_ms: int, leaves: int, per_leaf: int
) -> dict[str, int]:
    """Enqueue jobs due at the starts of up to `leaves` consecutive far leaves of a one-shard
    topic, those starting within 4 s of `first_ms` (half of `per_leaf` at a start exactly,
    the rest 1 ms apart after it, and a probe); returns id -> due ms. A leaf's start is read
    back from the far tier: the probe due at `first_ms` is filed in the widest free leaf
    beyond the horizon, which may start before it; each next leaf starts where the one
    before ends (at a 4 s or 64 s boundary it is that wide), its probe at its start."""
    dues: dict[str, int] = {}
    at = first_ms
    for k in range(leaves):
        await client.enqueue(keys.topic, 0, at=at_ms(at), job_id=f"probe{k}")
        dues[f"probe{k}"] = at
        start, level = await leaf_of_due(client.redis, keys, at)
        group = {f"e{k}-{i}": start + max(0, i + 1 - per_leaf // 2) for i in range(per_leaf)}
        await client.enqueue_many(
            keys.topic, [{"payload": 0, "at": at_ms(d), "job_id": j} for j, d in group.items()]
        )
        dues |= group
        at = start + ft.span(level, EDGE_WIDTH_MS)
        if at > first_ms + 4000:
            break
    return dues


async def fired_lateness(r: Any, keys: ShardKeys) -> dict[str, int]:
    """Job id -> lateness of every job fired into the shard's stream: its entry's id (the
    Redis ms it fired at) minus its due time."""
    return {
        fields[Field.ID].decode(): entry_ms(entry_id) - int(fields[Field.DUE])
        for entry_id, fields in await r.xrange(keys.ready)
    }


async def test_jobs_due_at_a_leafs_start_are_promoted_a_horizon_ahead_and_fire_on_time(
    client: AsyncClient, topic: str, redis_url: str, tmp_path: Path
) -> None:
    """The promotion edge: the leaves of jobs due exactly at (and just after) their start
    are promoted the horizon before it, not at it, and the jobs fire on time: p99 lateness
    <= 250 ms on the Redis clock (a stream entry's id against its due time). A leaf promoted
    at its start would add up to the promote interval (1 s) to every job of it; the bound
    leaves room for the other test worker on a 2-core machine (p99 here is ~20-50 ms when
    quiet; loadtest/lateness_at_scale.py measures it). The node runs in a process of its own:
    the test process's collector pauses are not the promoter's."""
    (keys,) = await far_topic(
        client, topic, horizon_ms=EDGE_HORIZON_MS, width_ms=EDGE_WIDTH_MS, shards=1
    )
    r = client.redis
    node = NodeProcess(redis_url, topic, "edge", tmp_path, {"far_promote_interval_ms": 1000})
    try:
        await until(lambda: node.events("acquired"), timeout_s=30, what="the node leading")
        first_ms = await server_ms(r) + EDGE_HORIZON_MS + 1500
        dues = await jobs_at_leaf_starts(client, keys, first_ms, leaves=6, per_leaf=40)
        assert int(await r.hget(keys.far, "entries")) == len(dues)  # all far

        async def fired() -> bool:
            return len(await fired_lateness(r, keys)) == len(dues)

        await eventually(fired, timeout_s=30, what="the far jobs fired")
    finally:
        node.finish()
    late = sorted((await fired_lateness(r, keys)).values())
    assert late[0] >= 0  # never early
    p99 = late[math.ceil(len(late) * 0.99) - 1]
    assert p99 <= 250, f"p99 lateness {p99} ms; the latest {late[-5:]}"
    # A call a leaf, in time order: each the horizon (2 s) before the leaf's start, give or
    # take a busy machine's delays; a leaf promoted at its start would show <= 0 here.
    starts = sorted({due for job_id, due in dues.items() if job_id.endswith("-0")})
    promoted = node.events("promoted")
    assert [e["count"] for e in promoted] == [41] * len(starts)  # its group and its probe
    ahead = [start - e["t"] for start, e in zip(starts, promoted, strict=True)]
    assert min(ahead) >= EDGE_HORIZON_MS // 2, ahead


async def test_the_promoter_looks_once_an_interval_and_once_a_leaf_never_back_to_back(
    client: AsyncClient, topic: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over a few seconds in which leaves come within the horizon one after another and the
    rest of the far tier is an hour off, the promoter calls each shard about once an
    interval and once a leaf: it sleeps until the next leaf is due for promotion, never
    spinning on one that is within the horizon, or between rounds."""
    calls: Counter[ShardKeys] = Counter()
    promote = far_tier.promote

    def counted(keys: ShardKeys, token: str, limit: int = far_tier.PROMOTE_BATCH) -> Any:
        calls[keys] += 1
        return promote(keys, token, limit)

    monkeypatch.setattr(far_tier, "promote", counted)
    shards = await far_topic(client, topic, horizon_ms=EDGE_HORIZON_MS, width_ms=EDGE_WIDTH_MS)
    r = client.redis
    interval_ms = 500
    node = Scheduler.from_url(redis_url, [topic], far_promote_interval_ms=interval_ms)
    await node.start()
    try:
        await until(lambda: len(calls) == len(shards), what="a first round on each shard")
        first_ms = await server_ms(r) + EDGE_HORIZON_MS + 1000
        starts = [first_ms + k * 300 for k in range(4)]
        dues = {f"l{k}-{i}": start for k, start in enumerate(starts) for i in range(10)}
        dues |= {f"hour-{i}": first_ms + 3_600_000 + i for i in range(10)}
        await client.enqueue_many(
            topic, [{"payload": 0, "at": at_ms(due), "job_id": j} for j, due in dues.items()]
        )
        assert await far_entries(r, shards) == len(dues)
        calls.clear()
        began = time.monotonic()
        await until(
            lambda: node.promoter.promoted == len(dues) - 10,
            timeout_s=30,
            what="the leaves promoted",
        )
        # Then idle (the rest an hour off) for a few intervals: a look each interval.
        idle_until = starts[-1] + 4 * interval_ms

        async def idle_over() -> bool:
            return await server_ms(r) >= idle_until

        await eventually(idle_over, timeout_s=30, what="a few idle intervals")
        elapsed_ms = (time.monotonic() - began) * 1000
    finally:
        await node.stop()
    # A round each interval, and sooner for each leaf (two calls a leaf: a round may wake a
    # ms early by the node's clock, then looks again at once), and two to spare.
    most = elapsed_ms / interval_ms + 2 * len(starts) + 2
    assert set(calls) == set(shards)
    assert all(n <= most for n in calls.values()), (dict(calls), round(elapsed_ms))
    assert node.promoter.promoted == len(dues) - 10


async def test_dropping_a_topic_counts_far_jobs_as_pending_and_deletes_their_keys(
    client: AsyncClient, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topics, "DROP_STEP", 2)  # the far keys go in several calls a shard
    shards = await far_topic(client, topic)
    r = client.redis
    admin = AsyncAdmin.of(client)
    ids = await client.enqueue_many(
        topic, [{"payload": i, "delay": 2 * HOUR_S + i} for i in range(300)]
    )
    assert await far_entries(r, shards) == len(ids)
    with pytest.raises(TopicNotEmptyError) as refused:
        await admin.drop_topic(topic)
    assert refused.value.pending == len(ids)
    assert await admin.drop_topic(topic, force=True) is True
    for keys in shards:  # every key of the shard is gone, the far tier's too
        assert [key async for key in r.scan_iter(match=keys.tag + "*")] == []


async def test_a_far_tier_is_dropped_a_bounded_step_a_call(client: AsyncClient, topic: str) -> None:
    """Dropping a shard deletes at most `step` far-tier keys a call (a tier of millions of
    jobs has tens of thousands), its jobs gone from the first call, every key by the last."""
    (keys,) = await far_topic(client, topic, shards=1)
    r = client.redis
    ids = await client.enqueue_many(
        topic, [{"payload": i, "delay": 2 * HOUR_S + 97 * i} for i in range(3000)]
    )
    meta = await r.hgetall(keys.far)
    far_keys = [
        far_leaf_key(keys, int(leaf)) for leaf in await r.zrange(far_buckets_key(keys), 0, -1)
    ]
    far_keys += [
        far_index_key(keys, n) for n in range(2 ** int(meta[b"level"]) + int(meta[b"split"]))
    ]
    assert len(far_keys) > 20
    executor, step, calls = AsyncExecutor(r), 5, 0
    left = len(far_keys)
    while True:
        (outcome,) = await executor.run([topics.drop_shard(keys, "force", step)])
        calls += 1
        now_left = sum([await r.exists(key) for key in far_keys])
        assert 0 < left - now_left <= step or (outcome.dropped and now_left == 0)
        left = now_left
        if not outcome.more:
            break
        assert not outcome.dropped and await r.hget(keys.far, "entries") == b"0"
        assert (await client.get(topic, ids[-1])).state is not JobState.PENDING
    assert outcome.dropped and calls >= len(far_keys) // step
    assert [key async for key in r.scan_iter(match=keys.tag + "*")] == []


async def test_an_id_whose_fingerprint_another_id_holds_stays_hot_and_leaves_it_alone(
    client: AsyncClient, topic: str
) -> None:
    """The index keeps one id a fingerprint: a job whose fingerprint is taken (by another
    id's entry, as a 48-bit collision would have it) goes in the sorted set, the entry kept."""
    shards = await far_topic(client, topic)
    r = client.redis
    await client.enqueue(topic, "first", delay=2 * HOUR_S, job_id="holder")  # the tier exists
    keys = shards[shard_of("clash", SHARDS)]
    level, split = (int(v or 0) for v in await r.hmget(keys.far, ["level", "split"]))
    fp = ft.fingerprint("clash")
    ix = far_index_key(keys, ft.index_address(fp, level, split))
    taken = ft.location(ft.leaf_id(ft.EPOCH_MS + 100 * ft.WIDTH_MS, 0), 7).to_bytes(5, "big")
    await r.hset(ix, fp, taken)  # another id's entry under the fingerprint of "clash"
    entries = await far_entries(r, shards)
    await client.enqueue_many(
        topic, [{"payload": "second", "delay": 2 * HOUR_S, "job_id": "clash"}]
    )
    assert await in_sorted_set(r, topic, "clash")
    assert await r.hget(ix, fp) == taken
    assert await far_entries(r, shards) == entries
    assert (await client.get(topic, "clash")).payload == "second"


async def test_the_python_arithmetic_finds_what_the_scripts_filed(
    client: AsyncClient, topic: str
) -> None:
    """wheelq.core.far_tier reads the index and records the scripts wrote (after splits)."""
    shards = await far_topic(client, topic)
    r = client.redis
    ids = [f"job-{i}" for i in range(200)]  # with the others, past 64 a hash: it has split
    await client.enqueue_many(
        topic,
        [{"payload": {"i": i}, "delay": 2 * HOUR_S + i, "job_id": j} for i, j in enumerate(ids)],
    )
    # generated ids: kept as their 128 bits, read back as the same 26 characters
    ids += await client.enqueue_many(
        topic, [{"payload": {"i": i}, "delay": 3 * HOUR_S + i} for i in range(200)]
    )
    for job_id in ids:
        keys = shards[shard_of(job_id, SHARDS)]
        level, split = (int(v or 0) for v in await r.hmget(keys.far, ["level", "split"]))
        fp = ft.fingerprint(job_id)
        loc = await r.hget(far_index_key(keys, ft.index_address(fp, level, split)), fp)
        assert loc is not None, job_id
        leaf, position = ft.split_location(loc)
        start, level = ft.leaf_of(leaf)
        raw = await r.lindex(far_leaf_key(keys, leaf), position)
        record = ft.unpack_record(raw, start, level)
        info = await client.get(topic, job_id)
        assert (record.job_id, record.due_ms) == (job_id, info.due_ms)
    assert max([int(await r.hget(k.far, "level") or 0) for k in shards]) >= 1


async def test_an_index_filled_under_a_larger_load_catches_up_a_few_hashes_a_call(
    client: AsyncClient, topic: str
) -> None:
    """A tier whose index has fewer hashes than `INDEX_LOAD` asks (filled by a version that
    put more entries in a hash) grows a bounded number of hashes a call, not all at once,
    and every job stays found."""
    shards = await far_topic(client, topic, shards=1)
    keys, r = shards[0], client.redis
    ids = await client.enqueue_many(
        topic, [{"payload": i, "delay": 2 * HOUR_S + i * 60} for i in range(1_000)]
    )
    # Re-file the index as a load of 8 * INDEX_LOAD would have it: one hash, level 0.
    moved: dict[bytes, bytes] = {}
    for n in range(await hashes(r, keys)):
        moved.update(await r.hgetall(far_index_key(keys, n)))
        await r.delete(far_index_key(keys, n))
    await r.hset(far_index_key(keys, 0), mapping=moved)
    await r.hset(keys.far, mapping={"level": 0, "split": 0})
    assert len(moved) == 1_000
    added, grown = 100, []
    for call in range(40):
        before = await hashes(r, keys)
        ids += await client.enqueue_many(
            topic,  # a minute apart, as the first: no leaf of a minute fills
            [{"payload": call, "delay": 2 * HOUR_S + len(ids) + i * 60} for i in range(added)],
        )
        grown.append(await hashes(r, keys) - before)
        entries = int(await r.hget(keys.far, "entries"))
        if entries <= ft.INDEX_LOAD * await hashes(r, keys):
            break
    assert 0 < max(grown) <= added // ft.INDEX_LOAD + 2, grown  # a few a call
    assert entries <= ft.INDEX_LOAD * await hashes(r, keys), grown  # and it caught up
    infos = [await client.get(topic, job_id) for job_id in ids]
    assert all(info is not None and info.state is JobState.PENDING for info in infos)
    assert await far_entries(r, shards) == len(ids)


async def hashes(r: redis.asyncio.Redis, keys: ShardKeys) -> int:
    """The index hashes of a shard's far tier: 2^level + split."""
    level, split = (int(v or 0) for v in await r.hmget(keys.far, ["level", "split"]))
    return 2**level + split


def settle_far(r: redis.Redis, topic: str) -> tuple[list[str], int, int]:
    """Every member of the topic's sorted sets, its far entries, and its leaves left."""
    members: list[str] = []
    entries = leaves = 0
    for keys in all_shards(topic, SHARDS):
        members += [m.decode() for m in r.zrange(keys.delayed, 0, -1)]
        entries += int(r.hget(keys.far, "entries") or 0)
        leaves += r.zcard(far_buckets_key(keys))
    return members, entries, leaves


@pytest.mark.slow
def test_a_node_killed_mid_promotion_leaves_every_job_promoted_once_by_the_next(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    r = redis_sync
    with Client.from_url(redis_url) as client:
        Admin.of(client).create_topic(topic, SHARDS)
        shards = all_shards(topic, SHARDS)
        for keys in shards:
            r.hset(keys.limits, "far", HORIZON_MS)
        ids = client.enqueue_many(  # due in 11-21 minutes: far, and nothing fires meanwhile
            topic, [{"payload": i, "delay": 660 + i / 5} for i in range(3000)]
        )
        assert int(sum(int(r.hget(k.far, "entries") or 0) for k in shards)) == len(ids)
        for keys in shards:
            r.hset(keys.limits, "far", 0)  # no far tier now: the leader promotes it all
        doomed = NodeProcess(redis_url, topic, "doomed", tmp_path, {}, "promote.after_reply:2")
        other: NodeProcess | None = None
        try:
            eventually_sync(lambda: not doomed.alive(), timeout_s=20, what="the crash point")
            members, entries, _ = settle_far(r, topic)
            assert 0 < len(members) < len(ids)  # it died half way
            assert len(members) + entries == len(ids)  # and each job is in one tier
            other = NodeProcess(redis_url, topic, "other", tmp_path, {})
            eventually_sync(
                lambda: settle_far(r, topic)[1:] == (0, 0), timeout_s=20, what="the rest promoted"
            )
        finally:
            doomed.finish()
            if other is not None:
                other.finish()
        assert doomed.proc.returncode == -signal.SIGKILL, doomed.log_tail()
        members, _, _ = settle_far(r, topic)
        assert sorted(members) == sorted(ids)  # each once: none lost, none twice
        assert all(client.get(topic, job_id).state is JobState.PENDING for job_id in ids[::97])


def leaves_of(r: redis.Redis, keys: ShardKeys) -> dict[int, int]:
    """Each leaf of a shard's far tier: its level -> records, summed over the leaves."""
    out: Counter[int] = Counter()
    for leaf in r.zrange(far_buckets_key(keys), 0, -1):
        out[ft.leaf_of(int(leaf))[1]] += r.llen(far_leaf_key(keys, leaf.decode()))
    return dict(out)


def test_a_split_moves_each_record_once_however_many_levels_it_goes_down(
    server_binary: ServerBinary, topic: str
) -> None:
    """512 far jobs due in one minute fill one wide leaf; the next one splits it: straight
    to that minute's leaf, each record and index entry written once (not once a level)."""
    with dedicated_server(server_binary) as server, Client.from_url(server.url) as client:
        Admin.of(client).create_topic(topic, 1)
        r = redis.Redis.from_url(server.url)
        (keys,) = all_shards(topic, 1)
        r.hset(keys.limits, "far", HORIZON_MS)
        minute = (r.time()[0] * 1000 // 86_400_000 + 30) * 86_400_000  # a day boundary
        client.enqueue_many(topic, [{"payload": i, "at": at_ms(minute + i)} for i in range(512)])
        (wide,) = leaves_of(r, keys).items()  # the widest free span took them
        assert wide[0] > 0 and wide[1] == 512
        r.config_resetstat()
        client.enqueue(topic, "one more", at=at_ms(minute + 600))
        writes = r.info("commandstats")["cmdstat_hset"]["calls"]
        assert leaves_of(r, keys) == {0: 512}  # the minute's leaf, full: the last one is hot
        assert writes <= 512 + 2, writes  # each index entry moved once (and a grow's)


def test_a_split_drops_the_dead_records_and_keeps_every_live_one(
    server_binary: ServerBinary, topic: str
) -> None:
    with dedicated_server(server_binary) as server, Client.from_url(server.url) as client:
        Admin.of(client).create_topic(topic, 1)
        r = redis.Redis.from_url(server.url)
        (keys,) = all_shards(topic, 1)
        r.hset(keys.limits, "far", HORIZON_MS)
        day = (r.time()[0] * 1000 // 86_400_000 + 30) * 86_400_000
        ids = client.enqueue_many(
            topic, [{"payload": i, "at": at_ms(day + i * 60_000)} for i in range(512)]
        )
        for job_id in ids[::50]:  # dead records in the full leaf
            assert client.cancel(topic, job_id)
        extra = client.enqueue(topic, "one more", at=at_ms(day + 5))  # a split, then a leaf
        live = [j for j in ids if j not in ids[::50]] + [extra]
        assert sum(leaves_of(r, keys).values()) == len(live)  # the dead ones are gone
        assert int(r.hget(keys.far, "entries")) == len(live)
        for job_id in live[::37]:
            info = client.get(topic, job_id)
            assert info is not None and info.state is JobState.PENDING
        assert all(client.get(topic, j).state is JobState.CANCELLED for j in ids[::50])


@pytest.mark.slow
def test_promotion_goes_on_where_it_was_after_a_server_restart(
    server_binary: ServerBinary, topic: str
) -> None:
    with (
        dedicated_server(server_binary, appendonly=True) as server,
        Client.from_url(server.url) as client,
    ):
        Admin.of(client).create_topic(topic, SHARDS)
        r = redis.Redis.from_url(server.url)
        shards = all_shards(topic, SHARDS)
        for keys in shards:
            r.hset(keys.limits, "far", HORIZON_MS)
        ids = client.enqueue_many(
            topic, [{"payload": i, "delay": 660 + i / 5} for i in range(2000)]
        )
        client.cancel(topic, ids[5])
        assert settle_far(r, topic)[1] == len(ids) - 1
        for keys in shards:
            r.hset(keys.limits, "far", 0)
            r.set(keys.lease, "leader")
        executor = SyncExecutor(r)
        for keys in shards:  # a batch each, then the server goes down and comes back
            executor.run([far_tier.promote(keys, "leader", 300)])
        assert 0 < settle_far(r, topic)[1] < len(ids) - 1  # part way
        r.close()
        server.restart()
        r = redis.Redis.from_url(server.url)
        executor = SyncExecutor(r)
        for keys in shards:
            r.set(keys.lease, "leader")
            while executor.run([far_tier.promote(keys, "leader", 300)])[0].more:
                pass
        members, entries, leaves = settle_far(r, topic)
        r.close()
    assert (entries, leaves) == (0, 0)
    assert sorted(members) == sorted(ids[:5] + ids[6:])  # once each; the cancelled one not


async def test_jobs_due_at_one_instant_fill_a_minute_leaf_and_the_rest_stay_hot(
    client: AsyncClient, topic: str
) -> None:
    shards = await far_topic(client, topic)
    r = client.redis
    seconds, _ = await r.time()
    at = (int(seconds) // 60 + 180) * 60  # a minute's start, three hours ahead
    ids = [f"burst-{i}" for i in range(1500)]
    await client.enqueue_many(
        topic, [{"payload": i, "at": at, "job_id": j} for i, j in enumerate(ids)]
    )
    entries = [int(await r.hget(keys.far, "entries") or 0) for keys in shards]
    assert all(0 < n <= ft.LEAF_CAP for n in entries)  # one full minute leaf a shard at most
    hot = sum([await r.zcard(keys.delayed) for keys in shards])
    assert hot + sum(entries) == len(ids)
    assert (await AsyncAdmin.of(client).stats(topic)).pending == len(ids)
    for job_id in ids[::50]:
        info = await client.get(topic, job_id)
        assert info.state is JobState.PENDING and info.due_ms == at * 1000, job_id


# --- job lists and bulk actions ---------------------------------------------------------------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MINUTE_MS = 60_000
Expected = dict[str, tuple[int, Any]]
"""Job id -> (due ms, payload) of every job a topic holds pending."""


def at_ms(ms: int) -> datetime:
    """Epoch ms as a due time, exactly."""
    return EPOCH + timedelta(milliseconds=ms)


async def server_ms(r: Any) -> int:
    seconds, micros = await r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def ids_in(shard: int, prefix: str, n: int) -> list[str]:
    """`n` ids ``prefix<k>`` that hash to `shard`."""
    return list(
        itertools.islice(
            (j for k in itertools.count() if shard_of(j := f"{prefix}{k}", SHARDS) == shard), n
        )
    )


async def put(client: AsyncClient, topic: str, expected: Expected, jobs: Expected) -> None:
    await client.enqueue_many(
        topic,
        [{"payload": p, "at": at_ms(due), "job_id": j} for j, (due, p) in jobs.items()],
    )
    expected.update(jobs)


async def move(client: AsyncClient, topic: str, expected: Expected, job_id: str, due: int) -> None:
    assert await client.reschedule(topic, job_id, at=at_ms(due))
    expected[job_id] = (due, expected[job_id][1])


async def drop(client: AsyncClient, topic: str, expected: Expected, job_id: str) -> None:
    assert await client.cancel(topic, job_id)
    del expected[job_id]


async def mixed_topic(client: AsyncClient, topic: str) -> tuple[Expected, int]:
    """`topic` with pending jobs in both tiers, interleaved, and the due ms of a burst: 500
    far jobs over three hours, then 560 jobs due at one ms in shard 0 (the leaves split down
    to that minute's; 512 of them far, the rest in the sorted set: a tie across tiers), three
    ids longer than 255 bytes (in the sorted set, beyond the horizon; one due with the burst),
    40 jobs within the horizon; then far jobs cancelled, moved far to far (dead records left
    in their leaves), far to hot and hot to far."""
    shards = await far_topic(client, topic)
    r = client.redis
    now = await server_ms(r)
    start = (now // MINUTE_MS + 120) * MINUTE_MS  # two hours ahead
    burst = start + 90 * MINUTE_MS + 7
    expected: Expected = {}
    await put(
        client,
        topic,
        expected,
        {f"s{i:03d}": (start + i * 21_611, {"s": i}) for i in range(500)},
    )
    await put(
        client, topic, expected, {j: (burst, {"b": k}) for k, j in enumerate(ids_in(0, "b", 560))}
    )
    long = {"L" * 255 + str(k): (start + k * 3_600_000 + 5, {"l": k}) for k in range(3)}
    long["L" * 255 + "3"] = (burst, {"l": 3})
    await put(client, topic, expected, long)
    await put(
        client,
        topic,
        expected,
        {f"h{i:02d}": (now + 5 * MINUTE_MS + i * 1000, {"h": i}) for i in range(40)},
    )
    spread = [f"s{i:03d}" for i in range(500)]
    for job_id in spread[::25]:
        await drop(client, topic, expected, job_id)
    for job_id in spread[7::40]:
        await move(client, topic, expected, job_id, expected[job_id][0] + 45 * MINUTE_MS + 3)
    for job_id in spread[11::40]:
        await move(client, topic, expected, job_id, now + 4 * MINUTE_MS + 11)
    for i, job_id in enumerate([f"h{i:02d}" for i in range(0, 40, 10)]):
        await move(client, topic, expected, job_id, start + 30 * MINUTE_MS + i)
    # the shape asked for: both tiers, jobs beyond the horizon in each, ties across them,
    # several leaves a shard and dead records in them
    entries = await far_entries(r, shards)
    beyond = [await r.zcount(k.delayed, now + HORIZON_MS, "+inf") for k in shards]
    leaves = [await r.zcard(far_buckets_key(k)) for k in shards]
    records = 0
    for keys in shards:
        for leaf in await r.zrange(far_buckets_key(keys), 0, -1):
            records += await r.llen(far_leaf_key(keys, leaf.decode()))
    tied_hot = await r.zcount(shards[0].delayed, burst, burst)
    assert 0 < entries < len(expected) and beyond[0] > 0 and leaves[0] >= 2, (entries, leaves)
    assert records > entries and 0 < tied_hot < 560
    assert entries + sum([await r.zcard(k.delayed) for k in shards]) == len(expected)
    return expected, burst


def in_order(
    expected: Expected, low: int | None = None, high: int | None = None
) -> list[tuple[str, int, str]]:
    """The rows a pending list of [low, high) answers: (id, due ms, preview), in order."""
    rows = [
        (j, due, payload_text(p, PREVIEW_CHARS))
        for j, (due, p) in expected.items()
        if (low is None or due >= low) and (high is None or due < high)
    ]
    return sorted(rows, key=lambda row: (row[1], row[0].encode()))


async def listed(admin: Any, topic: str, limit: int, **kw: Any) -> list[tuple[str, int, str]]:
    """Every page of the topic's pending list: (id, due ms, preview) of each row."""
    rows = await every_page(admin, topic, "pending", limit=limit, **kw)
    return [(r.id, r.due_ms, r.preview) for r in rows]


async def shard_rows(
    r: Any, keys: ShardKeys, count: int, low: int | None = None, high: int | None = None
) -> list[tuple[str, int, str]]:
    """Every page of one shard's pending jobs in [low, high), `count` rows a call (one source:
    no other shard's rows hold a page back): (id, due ms, preview) of each row."""
    executor = AsyncExecutor(r)
    rows: list[tuple[str, int, str]] = []
    after = None
    while True:
        (page,) = await executor.run(
            [job_lists.pending_page(keys, job_lists.DuePage(low, high, after, count))]
        )
        for row in page.rows:
            assert row.envelope is not None and row.due_ms is not None
            payload = read_payload(Envelope.unpack(row.envelope).payload)
            rows.append((row.member.decode(), row.due_ms, payload_text(payload, PREVIEW_CHARS)))
        if page.next is None:
            return rows
        after = page.next


def of_shard(expected: Expected, keys: ShardKeys) -> Expected:
    return {j: v for j, v in expected.items() if shard_of(j, SHARDS) == keys.shard}


async def test_the_pending_list_merges_far_and_hot_jobs_in_due_order_page_by_page(
    client: AsyncClient, topic: str
) -> None:
    expected, _ = await mixed_topic(client, topic)
    for keys in all_shards(topic, SHARDS):  # from every row of a shard in turn, and in steps
        for count in (1, 3, 50):
            got = await shard_rows(client.redis, keys, count)
            assert got == in_order(of_shard(expected, keys)), (keys.shard, count)
    admin = AsyncAdmin.of(client)
    for limit in (5, 64, 1000):
        assert await listed(admin, topic, limit) == in_order(expected), limit
    info = await client.get(topic, "s001")  # a far job as the lookup reads it
    assert info.due_ms == expected["s001"][0]


async def test_a_due_range_lists_the_far_and_hot_jobs_due_in_it(
    client: AsyncClient, topic: str
) -> None:
    expected, burst = await mixed_topic(client, topic)
    admin = AsyncAdmin.of(client)
    first = min(due for due, _ in expected.values())
    dues = sorted(due for due, _ in expected.values())
    hot_end = max(due for due in dues if due < first + 10 * MINUTE_MS)
    ranges = [
        (burst, burst + 1),  # one ms: the burst's far and hot jobs, and a long id
        (dues[100] + 1, dues[400]),  # from and to inside leaves
        (None, dues[0] + 10 * MINUTE_MS),  # the hot window only
        (dues[-30], None),
        (first - 1, first),  # nothing
        (hot_end + 1, dues[200]),  # from the gap between the hot window and the leaves
    ]
    for low, high in ranges:
        due_after = None if low is None else at_ms(low)
        due_before = None if high is None else at_ms(high)
        got = await listed(admin, topic, 7, due_after=due_after, due_before=due_before)
        assert got == in_order(expected, low, high), (low, high)
        for keys in all_shards(topic, SHARDS):
            got = await shard_rows(client.redis, keys, 2, low, high)
            assert got == in_order(of_shard(expected, keys), low, high), (keys.shard, low, high)
    assert len(in_order(expected, burst, burst + 1)) == 560 + 1


async def test_a_page_stops_short_at_the_far_records_bound_and_goes_on_from_the_next_leaf(
    client: AsyncClient, topic: str
) -> None:
    """Three leaves of 500 records, 5 live each: a call reads two (1,000 records), not the
    third, and says where the page goes on from; the list still answers every job."""
    shards = await far_topic(client, topic)
    keys = shards[0]
    r = client.redis
    now = await server_ms(r)
    span = ft.span(ft.TOP_LEVEL)
    first = (now // span + 2) * span  # a top-level leaf's start, well beyond the horizon
    expected: Expected = {}
    ids = ids_in(0, "d", 1500)
    for k in range(3):
        leaf = {j: (first + k * span + 1000 * i, {"d": j}) for i, j in enumerate(ids[k::3])}
        await put(client, topic, expected, leaf)
        for i, job_id in enumerate(ids[k::3]):
            if i % 100:
                await drop(client, topic, expected, job_id)
    long = "L" * 256  # the longest id: 256 bytes
    hot = {f"h{i}": (now + 5 * MINUTE_MS + i, {"h": i}) for i in range(3)}
    hot[long] = (first + span + 1, {"l": 0})  # in the sorted set, in leaf 1's span
    await put(client, topic, expected, hot)
    assert [
        await r.llen(far_leaf_key(keys, leaf.decode()))
        for leaf in await r.zrange(far_buckets_key(keys), 0, -1)
    ] == [500, 500, 500]
    executor = AsyncExecutor(r)

    (page,) = await executor.run(
        [job_lists.pending_page(keys, job_lists.DuePage(None, None, None, 100))]
    )

    mine = in_order({j: v for j, v in expected.items() if shard_of(j, SHARDS) == 0})
    rows = [(row.member.decode(), row.due_ms) for row in page.rows]
    assert rows == [(j, due) for j, due, _ in mine if due < first + 2 * span]  # short: 14 rows
    assert 10 < len(rows) < 100 and page.next == (first + 2 * span, b"")
    assert page.passed == 990  # 1,000 records read, 10 live returned
    assert all(not row.retry and row.envelope for row in page.rows)
    (rest,) = await executor.run(
        [job_lists.pending_page(keys, job_lists.DuePage(None, None, page.next, 100))]
    )
    assert [(row.member.decode(), row.due_ms) for row in rest.rows] == [
        (j, due) for j, due, _ in mine if due >= first + 2 * span
    ]
    assert rest.next is None
    # bare rows (ids and due times, as a selection reads them) and a position in a leaf
    (bare,) = await executor.run(
        [
            job_lists.pending_page(
                keys, job_lists.DuePage(None, None, (mine[4][1], mine[4][0].encode()), 3, 0)
            )
        ]
    )
    assert [(row.member.decode(), row.due_ms, row.envelope) for row in bare.rows] == [
        (j, due, None) for j, due, _ in mine[5:8]
    ]
    assert bare.next == (mine[7][1], mine[7][0].encode())
    for limit in (1, 4, 100):
        assert await listed(AsyncAdmin.of(client), topic, limit) == in_order(expected), limit


async def test_http_the_admin_and_the_console_list_far_jobs(
    client: AsyncClient, topic: str, redis_url: str
) -> None:
    await far_topic(client, topic)
    now = await server_ms(client.redis)
    expected: Expected = {}
    await put(client, topic, expected, {f"f{i}": (now + (3 + i) * 3_600_000, i) for i in range(6)})
    await put(client, topic, expected, {f"h{i}": (now + (5 + i) * MINUTE_MS, i) for i in range(3)})
    assert await far_entries(client.redis, all_shards(topic, SHARDS)) == 6
    ids = [j for j, _, _ in in_order(expected)]
    with Client.from_url(redis_url) as blocking:
        assert [j for j, _, _ in await listed(SyncAsAsync(Admin.of(blocking)), topic, 2)] == ids
    async with serving(redis_url) as api:
        rows = await api.job_rows(f"/v1/topics/{topic}/jobs?state=pending&limit=2")
        assert [row["id"] for row in rows] == ids
        html, _ = await get(api, f"/ui/topics/{topic}/jobs?state=pending&limit=50")
        assert re.findall(r'<tr data-job="([^"]*)"', html) == ids


async def test_bulk_actions_select_and_act_on_far_jobs(client: AsyncClient, topic: str) -> None:
    await far_topic(client, topic)
    r = client.redis
    now = await server_ms(r)
    start = (now // MINUTE_MS + 180) * MINUTE_MS
    expected: Expected = {}
    await put(client, topic, expected, {f"f{i:02d}": (start + i * 1000, i) for i in range(40)})
    await put(client, topic, expected, {f"h{i}": (now + (5 + i) * MINUTE_MS, i) for i in range(5)})
    assert await far_entries(r, all_shards(topic, SHARDS)) == 40
    admin = AsyncAdmin.of(client)
    window = {"state": "pending", "due_after": at_ms(start), "due_before": at_ms(start + 20_000)}

    dry = await admin.bulk(topic, "cancel", dry_run=True, **window)
    assert dry.matched == 20  # f00-f19, all far
    await drop(client, topic, expected, "f03")  # in between: changed, left alone
    done = await admin.bulk(topic, "cancel", selection=dry.selection)
    assert (done.acted, done.changed, done.skipped, done.remaining) == (19, 1, 0, 0)
    for i in range(20):
        expected.pop(f"f{i:02d}", None)

    shifted = await admin.bulk(
        topic,
        "reschedule",
        state="pending",
        ids=[f"f{i}" for i in range(20, 30)],
        shift_ms=3_600_000,
    )
    assert (shifted.matched, shifted.acted, shifted.changed) == (10, 10, 0)
    for i in range(20, 30):
        expected[f"f{i}"] = (expected[f"f{i}"][0] + 3_600_000, i)
    later = start + 86_400_000
    moved = await admin.bulk(
        topic,
        "reschedule",
        state="pending",
        due_after=at_ms(start + 30_000),
        due_before=at_ms(start + 35_000),
        at=at_ms(later),
    )
    assert (moved.matched, moved.acted) == (5, 5)
    for i in range(30, 35):
        expected[f"f{i}"] = (later, i)
    ran = await admin.bulk(topic, "run_now", state="pending", ids=["f35", "f36", "h0"])
    assert (ran.matched, ran.acted) == (3, 3)
    for job_id in ("f35", "f36", "h0"):
        assert (await client.get(topic, job_id)).state is JobState.READY, job_id
        del expected[job_id]
    assert await listed(admin, topic, 100) == in_order(expected)


async def test_a_forecast_counts_far_jobs_in_windows_beyond_the_horizon(
    client: AsyncClient, topic: str
) -> None:
    """A forecast's window reaching past the horizon counts the far jobs due in it: whole
    leaves by their live counts, and the leaf its edge falls in record by record (cancelled
    and rescheduled jobs not counted), exactly the known schedule's due times."""
    shards = await far_topic(client, topic)
    r = client.redis
    seconds, micros = await r.time()
    start_ms = seconds * 1000 + micros // 1000
    dues: dict[str, int] = {}
    # Dense between 15 and 45 minutes (leaves split down to minutes), sparse for two days.
    for i in range(1800):
        dues[f"dense-{i}"] = start_ms + 15 * 60_000 + i * 1000 + i % 7
    for i in range(200):
        dues[f"sparse-{i}"] = start_ms + 3 * HOUR_S * 1000 + i * 800_000
    dues["hot"] = start_ms + 60_000
    await client.enqueue_many(
        topic, [{"payload": 0, "at": due / 1000, "job_id": j} for j, due in dues.items()]
    )
    assert await far_entries(r, shards) == len(dues) - 1
    for j in ("dense-700", "dense-701", "sparse-3"):  # dead records in their leaves
        assert await client.cancel(topic, j)
        del dues[j]
    assert await client.reschedule(topic, "dense-900", delay=20 * HOUR_S)
    dues["dense-900"] = (await client.get(topic, "dense-900")).due_ms
    within = [30, 900, 1320, 1800, 2400, 3600, 7200, 86_400]
    found = await AsyncAdmin.of(client).forecast(topic, within=within)
    assert found.due_within == {
        w: sum(d <= found.at_ms + w * 1000 for d in dues.values()) for w in within
    }
    assert found.due_within[1320] not in (found.due_within[900], found.due_within[1800])


async def test_a_window_ending_exactly_at_a_jobs_due_time_counts_it_in_either_tier(
    client: AsyncClient, topic: str
) -> None:
    """A forecast window counts the jobs due at or before its end, whichever tier holds
    them: `due_within.lua` asked for times exactly at a hot job's due time, a far leaf's
    start, a record inside it, its last ms (the whole leaf by its live count) and the next
    leaf's start, and 1 ms before each, counts exactly the jobs due by each time."""
    (keys,) = await far_topic(client, topic, shards=1)
    r = client.redis
    now_ms = await server_ms(r)
    minute = ft.WIDTH_MS
    probe = (now_ms + HORIZON_MS) // minute * minute + 5 * minute
    await client.enqueue(topic, 0, at=at_ms(probe), job_id="probe")
    (leaf,) = await r.zrange(
        far_buckets_key(keys), probe, "-inf", byscore=True, desc=True, num=1, offset=0
    )
    start, level = ft.leaf_of(int(leaf))
    end = start + ft.span(level)
    dues = {
        "probe": probe,
        "hot": now_ms + 60_000,
        "at-start": start,
        "inside": start + 1234,
        "last-ms": end - 1,
        "next-leaf": end,
    }
    for job_id, due in dues.items():
        if job_id != "probe":
            await client.enqueue(topic, 0, at=at_ms(due), job_id=job_id)
    assert int(await r.hget(keys.far, "entries")) == len(dues) - 1  # all but the hot one
    assert await r.zcard(far_buckets_key(keys)) == 2  # the leaf, and the next from its end
    times = sorted({t for due in dues.values() for t in (due - 1, due)})
    (counts,) = await AsyncExecutor(r).run([observe.due_within(keys, times)])
    assert dict(zip(times, counts, strict=True)) == {
        t: sum(due <= t for due in dues.values()) for t in times
    }
