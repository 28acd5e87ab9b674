"""Jobs on the due line in every view, on a real server (docs/architecture.md, "The due
line"): a job that came due on a shard that orders its due jobs and waits its turn to enter
the stream is READY (`waiting`) to get(), the ready list, the stats and the forecast; it can
still be cancelled and rescheduled by id; dropping its topic counts it; and once a worker
drains the line every job not cancelled ran exactly once."""

from __future__ import annotations

from collections import Counter

import pytest
import redis

from tests.integration import test_backpressure
from tests.support.waiting import eventually
from tests.support.web import serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, EnqueueItem, Job, Scheduler, Worker
from wheelq.core.history import JobState
from wheelq.core.job import Envelope
from wheelq.core.job_list import ListedJob
from wheelq.core.keys import ShardKeys, lane_key
from wheelq.core.payload import encode_payload
from wheelq.errors import DuplicateJobError, TopicNotEmptyError

GROUP = "slow"
JOBS = 200
LEAD = 32
"""The stream depth past which due jobs wait on the line (the default lead)."""
_LINE_TITLE = "due, waiting their turn on the due line to enter the stream"


# test_backpressure's: a scheduler node leading the topic, stopped at teardown
scheduler = test_backpressure.scheduler


async def _on_the_line(
    c: AsyncClient,
    redis_sync: redis.Redis,
    topic: str,
    *,
    fair: bool = False,
    keyed: int = 0,
) -> tuple[list[str], ShardKeys]:
    """`JOBS` jobs due in 0.3 s on an ordered shard whose only group reads nothing: once
    they came due, `LEAD` are in the stream and the rest wait on the line. `keyed`: the
    jobs' keys cycle through that many (0: no key)."""
    admin = AsyncAdmin.of(c)
    await admin.create_topic(topic, 1)
    keys = ShardKeys(topic, 0)
    redis_sync.hset(keys.limits, mapping={"ordered": "1", **({"fair": "1"} if fair else {})})
    await admin.create_group(topic, GROUP)
    items = [
        EnqueueItem(payload=i, delay=0.3, key=f"k{i % keyed}" if keyed else None)
        for i in range(JOBS)
    ]
    ids = await c.enqueue_many(topic, items)

    async def settled() -> bool:
        return redis_sync.zcard(keys.delayed) == 0 and redis_sync.hlen(keys.held) > 0

    await eventually(settled, timeout_s=10, what="the due jobs to reach the line")
    assert redis_sync.xlen(keys.ready) == LEAD
    assert redis_sync.hlen(keys.held) == JOBS - LEAD
    return ids, keys


def _held(redis_sync: redis.Redis, keys: ShardKeys) -> list[str]:
    return sorted(m.decode() for m in redis_sync.hkeys(keys.held))


async def _ready_list(admin: AsyncAdmin, topic: str, limit: int) -> list[ListedJob]:
    rows: list[ListedJob] = []
    cursor = None
    while True:
        page = await admin.jobs(topic, "ready", limit, cursor=cursor, group=GROUP)
        rows += page
        if page.next is None:
            return rows
        cursor = page.next


async def _drain(redis_url: str, topic: str) -> list[str]:
    """Run the group's worker (concurrency 1) until the topic holds nothing to run; the ids
    in the order their handler started."""
    started: list[str] = []

    async def handler(job: Job) -> None:
        started.append(job.id)

    keys = ShardKeys(topic, 0)
    worker = Worker.from_url(redis_url, topic, handler, group=GROUP, concurrency=1)
    await worker.start()
    try:
        r = redis.Redis.from_url(redis_url)

        async def done() -> bool:
            groups = r.xinfo_groups(keys.ready)
            idle = all(g["lag"] == 0 and g["pending"] == 0 for g in groups)
            return idle and r.hlen(keys.held) == 0 and r.zcard(keys.delayed) == 0

        await eventually(done, timeout_s=30, what="the worker to drain the line")
    finally:
        await worker.stop()
    return started


async def test_a_job_on_the_line_is_ready_cancellable_reschedulable_and_runs_once(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler
) -> None:
    async with AsyncClient.from_url(redis_url) as c:
        ids, keys = await _on_the_line(c, redis_sync, topic)
        held = _held(redis_sync, keys)
        cancelled, moved, looked = held[0], held[1], held[2]

        info = await c.get(topic, looked)
        due_ms, _ = redis_sync.hget(keys.held, looked).decode().split(" ")  # type: ignore[union-attr]
        assert info.state is JobState.READY and info.waiting
        assert info.due_ms == int(due_ms) and info.payload_kept and info.groups == ()
        fired = sorted(set(ids) - set(held))[0]  # among the lead, in the stream
        in_stream = await c.get(topic, fired)
        assert in_stream.state is JobState.READY and not in_stream.waiting

        assert await c.cancel(topic, cancelled)
        assert (await c.get(topic, cancelled)).state is JobState.CANCELLED
        assert not redis_sync.hexists(keys.held, cancelled)
        assert redis_sync.zscore(lane_key(keys, ""), cancelled) is None
        assert not redis_sync.hexists(keys.jobs, cancelled)
        assert not await c.cancel(topic, cancelled)  # once

        assert await c.reschedule(topic, moved, delay=60)
        later = await c.get(topic, moved)
        assert later.state is JobState.PENDING and not later.waiting
        assert later.due_ms is not None and later.due_ms > int(due_ms) + 50_000
        assert redis_sync.zscore(keys.delayed, moved) == later.due_ms
        assert not redis_sync.hexists(keys.held, moved)
        assert redis_sync.zscore(lane_key(keys, ""), moved) is None

        admin = AsyncAdmin.of(c)
        waiting = redis_sync.hlen(keys.held)
        stats = await admin.stats(topic)
        assert stats is not None
        assert stats.waiting == waiting == JOBS - LEAD - 2
        assert stats.ready == LEAD + waiting and stats.pending == 1
        assert (await admin.forecast(topic)).ready == stats.ready
        async with serving(redis_url) as api:
            status, body, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{looked}")
            assert status == 200 and body["state"] == "ready" and body["waiting"] is True
            status, body, _ = await api.call("GET", f"/v1/topics/{topic}")
            assert status == 200 and body["waiting"] == waiting
            assert body["ready"] == stats.ready
            status, page, _ = await api.call("GET", f"/ui/topics/{topic}/jobs/{looked}")
            assert status == 200 and 'id="job-waiting"' in page and "Cancel" in page
            status, page, _ = await api.call("GET", f"/ui/topics/{topic}")
            assert status == 200 and f'id="total-waiting" title="{_LINE_TITLE}">{waiting}<' in page

        # Bring the moved job back (due now: it goes on the line again), then drain.
        assert await c.reschedule(topic, moved, delay=0)
        started = await _drain(redis_url, topic)
    runs = Counter(started)
    assert runs[cancelled] == 0
    assert set(runs) == set(ids) - {cancelled} and set(runs.values()) == {1}
    assert redis_sync.zcard(keys.turns) == 0 and redis_sync.hlen(keys.jobs) == 0


async def test_the_ready_list_shows_the_line_after_the_stream_in_the_order_jobs_start(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler
) -> None:
    """Fair shares on, three keys: the ready list pages through the stream's entries, then
    the line in its lanes' turns, which is the order the worker then starts them in."""
    async with AsyncClient.from_url(redis_url) as c:
        ids, keys = await _on_the_line(c, redis_sync, topic, fair=True, keyed=3)
        admin = AsyncAdmin.of(c)
        rows = await _ready_list(admin, topic, 30)
        entries = [r for r in rows if not r.waiting]
        line = [r for r in rows if r.waiting]
        assert rows == entries + line  # the line after every entry
        assert len(entries) == LEAD and all(r.entry_id for r in entries)
        assert sorted(r.id or "" for r in line) == _held(redis_sync, keys)
        assert all(r.entry_id is None and r.due_ms is not None for r in line)
        whole = await _ready_list(admin, topic, 1000)
        assert [r.id for r in whole] == [r.id for r in rows]  # pages add up to one page
        async with serving(redis_url) as api:
            path = f"/v1/topics/{topic}/jobs?state=ready&limit=40&group={GROUP}"
            http = await api.job_rows(path)
        assert [(r["id"], r["waiting"]) for r in http] == [(r.id, r.waiting) for r in rows]
        started = await _drain(redis_url, topic)
    assert started[LEAD:] == [r.id for r in line]
    by_id = dict(zip(ids, range(JOBS), strict=True))
    first_turns = {by_id[r.id or ""] % 3 for r in line[:3]}
    assert first_turns == {0, 1, 2}  # the keys take turns, not the flood's order


async def test_dropping_a_topic_counts_the_line_as_pending_and_force_deletes_its_lanes(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler
) -> None:
    async with AsyncClient.from_url(redis_url) as c:
        _, keys = await _on_the_line(c, redis_sync, topic)
        admin = AsyncAdmin.of(c)
        waiting = redis_sync.hlen(keys.held)
        with pytest.raises(TopicNotEmptyError) as refused:
            await admin.drop_topic(topic)
        assert refused.value.pending == waiting  # nothing in the sorted set: the line
        assert redis_sync.hlen(keys.held) == waiting
        await scheduler.stop()
        assert await admin.drop_topic(topic, force=True)
    lane = lane_key(keys, "")
    assert not redis_sync.exists(keys.held, keys.turns, lane, keys.jobs, keys.limits)


def test_a_retry_waiting_on_the_line_under_its_alias_is_rescheduled_then_cancelled(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """A group's retry of a job whose id was taken waits on the line under its alias member
    (laid out here by hand, as emit_due's wq_hold does, with no leader to take it): reschedule
    and cancel by the job's id find it there, and leave no trace of it on the line."""
    keys = ShardKeys(topic, 0)
    alias = "j\x1fg\x1f1-0"
    lane = lane_key(keys, "")

    def hold(due_ms: int) -> None:
        redis_sync.zrem(keys.delayed, alias)
        redis_sync.hset(keys.held, alias, f"{due_ms} ")
        redis_sync.zadd(lane, {alias: due_ms})
        redis_sync.zadd(keys.turns, {"": 1})

    def off_the_line() -> bool:
        return not redis_sync.exists(keys.held, lane, keys.turns)

    with Client.from_url(redis_url) as c:
        Admin.of(c).create_topic(topic, 1)
        redis_sync.hset(keys.limits, "ordered", "1")
        retry = Envelope(encode_payload("p", 64), 2, 3, 5, "g", "j").pack()
        redis_sync.hset(keys.jobs, alias, retry)
        redis_sync.zadd(keys.retries, {alias: 0})
        now_ms = int(redis_sync.time()[0]) * 1000
        hold(now_ms)

        assert c.reschedule(topic, "j", delay=60)
        due = redis_sync.zscore(keys.delayed, alias)
        assert due is not None and due >= now_ms + 59_000 and off_the_line()

        hold(int(due))
        assert c.cancel(topic, "j")
        assert off_the_line() and not redis_sync.exists(keys.jobs, keys.delayed)
        assert redis_sync.zscore(keys.retries, alias) is None
        assert not c.cancel(topic, "j")


def test_a_job_on_the_line_written_over_by_id_leaves_the_line_and_fires_at_its_new_time(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """An enqueue with replace, or a debounce call, of an id whose job waits on the line (laid
    out by hand, no leader to take it) writes over it as over a pending job: off the line, so
    the leader cannot fire the new job from there before its new due time; without replace
    it is a duplicate."""
    keys = ShardKeys(topic, 0)
    lane = lane_key(keys, "")
    with Client.from_url(redis_url) as c:
        Admin.of(c).create_topic(topic, 1)
        redis_sync.hset(keys.limits, "ordered", "1")
        now_ms = int(redis_sync.time()[0]) * 1000
        for job_id in ("replaced", "debounced"):
            redis_sync.hset(keys.jobs, job_id, Envelope(encode_payload("old", 64)).pack())
            redis_sync.hset(keys.held, job_id, f"{now_ms} ")
            redis_sync.zadd(lane, {job_id: now_ms})
            redis_sync.zadd(keys.turns, {"": 1})
        with pytest.raises(DuplicateJobError):
            c.enqueue(topic, "new", job_id="replaced", delay=60)
        assert redis_sync.hexists(keys.held, "replaced")
        c.enqueue(topic, "new", job_id="replaced", delay=60, replace=True)
        c.enqueue(topic, "new", job_id="debounced", debounce_ms=60_000)
        for job_id in ("replaced", "debounced"):
            info = c.get(topic, job_id)
            assert info.state is JobState.PENDING and not info.waiting and info.payload == "new"
            assert info.due_ms is not None and info.due_ms >= now_ms + 59_000
        assert not redis_sync.exists(keys.held, lane, keys.turns)
