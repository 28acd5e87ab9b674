"""Workers in this process against a real server: retries with backoff, `Retry(delay=)`, dead
letters and replay, malformed and poison entries, fan-out, keep-alive of long handlers,
handler timeouts, graceful stop and hand-on, sync handlers.

docs/architecture.md, invariants 1 (nothing lost: handled, or in the dead-letter stream), 2
(delivery is at-least-once, duplicates only from crashes and visibility timeouts) and 7 (a
malformed entry goes to the dead-letter stream and never crashes a worker). Times are compared
on the Redis clock (stream `due` fields, entry ids, TIME), never on wall-clock sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio

from tests.support.entries import ready_fields
from tests.support.ids import balanced_ids
from tests.support.waiting import eventually
from tests.support.workers import Workers
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    DeadLetter,
    EnqueueItem,
    InvalidArgumentError,
    Job,
    Retry,
    Scheduler,
    Worker,
)
from wheelq.core.keys import ShardKeys, all_shards, shard_of

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

SHARDS = 4
# Workers here react fast; the defaults (30 s visibility, 5 s claim interval) are for production.
FAST: dict[str, Any] = {
    "visibility_timeout_ms": 1000,
    "claim_interval_ms": 100,
    "shutdown_grace_ms": 2000,
}
SCHEDULER = {
    "window_ms": 5000,
    "preload_interval_ms": 200,
    "lease_ttl_ms": 2000,
    "sweep_grace_ms": 3000,
}


# --- helpers ------------------------------------------------------------------------------


def holds(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """`predicate` as an `eventually` check."""

    async def check() -> bool:
        return predicate()

    return check


async def redis_ms(r: redis.asyncio.Redis) -> int:
    sec, usec = await r.time()
    return int(sec) * 1000 + int(usec) // 1000


@contextlib.asynccontextmanager
async def retry_times(worker: Worker, r: redis.asyncio.Redis) -> AsyncIterator[list[int]]:
    """The Redis clock read soon after each retry `worker` wrote (n-th item: once its
    ``retried`` count reached n). `retry.lua` takes its due time from ``TIME``, so a retry's
    due - delay is never later than the item, however slow the machine is."""
    times: list[int] = []

    async def watch() -> None:
        while True:
            while worker.status()["retried"] > len(times):
                times.append(await redis_ms(r))
            await asyncio.sleep(0.002)  # a few ms: a looser bound only past a delay step

    task = asyncio.create_task(watch())
    try:
        yield times
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def pending(r: redis.asyncio.Redis, topic: str, group: str = "default") -> int:
    """Entries delivered to `group` and not acked, over every shard."""
    total = 0
    for keys in all_shards(topic, SHARDS):
        total += int((await r.xpending(keys.ready, group))["pending"])
    return total


async def all_acked(r: redis.asyncio.Redis, topic: str, group: str = "default") -> None:
    """Wait for every entry delivered to `group` to be acked (acks are written in batches,
    just after the handlers return); fails the test if some never is."""

    async def none_pending() -> bool:
        return await pending(r, topic, group) == 0

    await eventually(none_pending, timeout_s=5, what=f"every entry acked in group {group}")


async def pending_of(r: redis.asyncio.Redis, topic: str, consumer: str) -> list[dict[str, Any]]:
    """XPENDING rows of one consumer of group "default", over every shard."""
    rows = []
    for keys in all_shards(topic, SHARDS):
        rows += await r.xpending_range(keys.ready, "default", "-", "+", 1000, consumername=consumer)
    return rows


async def dead_count(r: redis.asyncio.Redis, topic: str) -> int:
    return sum([await r.xlen(keys.dead) for keys in all_shards(topic, SHARDS)])


@dataclass
class Run:
    """One handler call: the job as delivered, and the Redis clock when it failed (or ended)."""

    job: Job
    ended_ms: int = 0


@dataclass
class Recorder:
    """Records handler calls; `behave(job)` decides what each one does."""

    r: redis.asyncio.Redis
    behave: Callable[[Job], Awaitable[None]] | None = None
    runs: list[Run] = field(default_factory=list)

    async def __call__(self, job: Job) -> None:
        run = Run(job)
        self.runs.append(run)
        try:
            if self.behave is not None:
                await self.behave(job)
        finally:
            run.ended_ms = await redis_ms(self.r)

    def ids(self) -> list[str]:
        return [run.job.id for run in self.runs]

    def of(self, job_id: str) -> list[Job]:
        return [run.job for run in self.runs if run.job.id == job_id]


@pytest.fixture
async def workers(redis_url: str, topic: str, client: AsyncClient) -> AsyncIterator[Workers]:
    pool = Workers(redis_url, topic, FAST)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def scheduler(
    request: pytest.FixtureRequest, redis_url: str, topic: str, client: AsyncClient
) -> AsyncIterator[Scheduler]:
    """A scheduler node leading every shard (the test module's ``SHARDS``, as `client` made
    the topic with): retries go back through the sorted set."""
    node = Scheduler.from_url(redis_url, [topic], **SCHEDULER)
    shards = getattr(request.module, "SHARDS", SHARDS)
    await node.start()
    try:
        await eventually(
            holds(lambda: len(node.leads) == shards),
            timeout_s=10,
            what="the scheduler to lead every shard",
        )
        yield node
    finally:
        await node.stop()


def by_reason(dead: list[DeadLetter]) -> dict[str, list[DeadLetter]]:
    out: dict[str, list[DeadLetter]] = {}
    for d in dead:
        out.setdefault(d.reason, []).append(d)
    return out


# --- retries, backoff, dead letters, replay -------------------------------------------------


async def test_failing_handler_retries_with_backoff_then_dead_letters_and_replays(
    client: AsyncClient,
    admin: AsyncAdmin,
    scheduler: Scheduler,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    failing = True

    async def behave(job: Job) -> None:
        if failing:
            raise RuntimeError(f"boom on attempt {job.attempt}")

    rec = Recorder(redis_async, behave)
    worker = await workers.start(rec, retry_base_ms=200, retry_jitter_pct=0)
    async with retry_times(worker, redis_async) as retried_by:
        job_id = await client.enqueue(topic, {"n": 1}, max_attempts=3)
        dead = await eventually(
            lambda: admin.dead_letters(topic), timeout_s=15, what="the job to be dead-lettered"
        )

    assert rec.ids() == [job_id] * 3
    assert [run.job.attempt for run in rec.runs] == [1, 2, 3]
    assert all(run.job.max_attempts == 3 for run in rec.runs)
    # backoff base * 2**(attempt-1), no jitter: 200 ms after attempt 1, 400 ms after attempt 2
    for prev, nxt, backoff, by in zip(rec.runs, rec.runs[1:], [200, 400], retried_by, strict=False):
        gap = nxt.job.due_ms - prev.ended_ms
        assert prev.ended_ms <= nxt.job.due_ms - backoff <= by, (
            f"attempt {nxt.job.attempt} due {gap} ms after attempt {prev.job.attempt} failed, "
            f"want the backoff {backoff} ms after the retry was written ({by - prev.ended_ms} "
            "ms after the failure)"
        )
        assert nxt.job.fired_ms >= nxt.job.due_ms, "a retry fired before its due time"
        assert nxt.job.fired_ms - prev.job.fired_ms >= backoff
        assert nxt.job.group == "default", "a retry must name the group that failed it"

    (letter,) = dead
    assert letter.reason == "failed"
    assert (letter.job_id, letter.payload, letter.group) == (job_id, {"n": 1}, "default")
    assert (letter.attempt, letter.max_attempts) == (3, 3)
    assert "RuntimeError: boom on attempt 3" in letter.error
    assert "attempt 3 of 3" in letter.error
    assert letter.source_entry == rec.runs[-1].job.entry_id
    await all_acked(redis_async, topic)
    status = worker.status()
    assert (status["failed"], status["retried"], status["dead_lettered"]) == (3, 2, 1)
    assert (status["handled"], status["acked"]) == (0, 0)

    failing = False
    assert await admin.replay(topic) == 1
    await eventually(holds(lambda: worker.status()["acked"] == 1), timeout_s=10, what="the replay")

    replayed = rec.runs[3:]
    assert [(r.job.id, r.job.attempt, r.job.group) for r in replayed] == [(job_id, 1, "default")]
    assert replayed[0].job.payload == {"n": 1}
    assert await admin.dead_letters(topic) == []
    assert await dead_count(redis_async, topic) == 0
    await all_acked(redis_async, topic)


async def test_retry_exception_sets_the_delay(
    client: AsyncClient,
    admin: AsyncAdmin,
    scheduler: Scheduler,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    async def behave(job: Job) -> None:
        if job.attempt == 1:
            raise Retry(delay=0.3)
        if job.attempt == 2:
            raise Retry(delay=timedelta(milliseconds=250), reason="not yet")

    rec = Recorder(redis_async, behave)
    # A backoff of a minute: only the Retry delay can bring the job back within the test.
    worker = await workers.start(rec, retry_base_ms=60_000, retry_jitter_pct=0)
    async with retry_times(worker, redis_async) as retried_by:
        job_id = await client.enqueue(topic, "x", max_attempts=5)
        await eventually(
            holds(lambda: worker.status()["acked"] == 1), timeout_s=10, what="attempt 3"
        )

    assert [(r.job.id, r.job.attempt) for r in rec.runs] == [(job_id, 1), (job_id, 2), (job_id, 3)]
    assert len(retried_by) == 2
    for prev, nxt, delay, by in zip(rec.runs, rec.runs[1:], [300, 250], retried_by, strict=False):
        # the retried entry's `due` = the time the retry was written (Redis clock, after the
        # failure and before the worker counted it) + the delay asked for
        assert prev.ended_ms <= nxt.job.due_ms - delay <= by
        assert nxt.job.due_ms - prev.job.fired_ms >= delay
        assert nxt.job.fired_ms >= nxt.job.due_ms
    status = worker.status()
    assert (status["failed"], status["retried"], status["dead_lettered"]) == (2, 2, 0)
    assert await admin.dead_letters(topic) == []


# --- malformed and poison entries (docs/architecture.md, invariant 7) -------------------------


async def test_malformed_and_poison_entries_are_dead_lettered_while_good_jobs_run(
    client: AsyncClient,
    admin: AsyncAdmin,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    r = redis_async
    for keys in all_shards(topic, SHARDS):
        await r.xgroup_create(keys.ready, "default", "0", mkstream=True)
    # A job that (as far as the group knows) already killed the workers it was delivered to:
    # delivered to a consumer that vanished, with a delivery count of 5.
    ghost_id = await client.enqueue(topic, "ghost")
    ghost_keys = ShardKeys(topic, shard_of(ghost_id, SHARDS))
    ((_, [(ghost_entry, _)]),) = await r.xreadgroup(
        "default", "vanished", {ghost_keys.ready: ">"}, count=10
    )
    await r.xclaim(
        ghost_keys.ready, "default", "vanished", 0, [ghost_entry], idle=60_000, retrycount=5
    )

    before = [await client.enqueue(topic, f"good-{i}") for i in range(5)]
    junk_keys = ShardKeys(topic, 0)
    junk_entry = (await r.xadd(junk_keys.ready, {"foo": "bar"})).decode()
    bad_payload_entry = (
        await r.xadd(
            ShardKeys(topic, 1).ready,
            # never valid msgpack
            ready_fields("bad-payload", topic=topic, due_ms=1, max_attempts=3, payload=b"\xc1"),
        )
    ).decode()
    poison_id = await client.enqueue(topic, "poison", max_attempts=1)

    async def behave(job: Job) -> None:
        if job.payload == "poison":
            raise ValueError("poison payload")

    rec = Recorder(r, behave)
    worker = await workers.start(rec, max_deliveries=3)
    after = [await client.enqueue(topic, f"good-{i}") for i in range(5, 10)]
    good = set(before + after)

    await eventually(
        holds(lambda: worker.status()["handled"] == len(good)), timeout_s=10, what="good jobs"
    )
    dead = await eventually(
        lambda: _at_least(admin.dead_letters(topic), 4), timeout_s=10, what="4 dead letters"
    )

    assert sorted(rec.ids()) == sorted([*good, poison_id])
    assert Counter(rec.ids())[poison_id] == 1
    reasons = by_reason(dead)
    assert sorted(reasons) == ["deliveries", "failed", "malformed"]
    # Both entries may have the same id (one ms, two shards): tell them apart by shard too.
    junk, bad = sorted(
        reasons["malformed"], key=lambda d: (d.shard, d.source_entry) != (0, junk_entry)
    )
    assert (junk.source_entry, junk.job_id, junk.fields["foo"]) == (junk_entry, None, b"bar")
    assert "malformed stream entry" in junk.error
    assert (bad.source_entry, bad.job_id, bad.payload) == (
        bad_payload_entry,
        "bad-payload",
        b"\xc1",
    )
    assert "malformed stream entry" in bad.error
    (failed,) = reasons["failed"]
    assert failed.job_id == poison_id and "ValueError: poison payload" in failed.error
    assert "attempt 1 of 1" in failed.error
    (deliveries,) = reasons["deliveries"]
    assert (deliveries.job_id, deliveries.source_entry) == (ghost_id, ghost_entry.decode())
    assert "max_deliveries 3" in deliveries.error
    assert {d.group for d in dead} == {"default"}

    # The worker is still alive and working.
    late = await client.enqueue(topic, "late")
    await eventually(holds(lambda: late in rec.ids()), timeout_s=5, what="a job after the rest")
    await all_acked(r, topic)
    assert worker.status()["dead_lettered"] == 4

    with pytest.raises(InvalidArgumentError, match="malformed"):  # refused, nothing replayed
        await admin.replay(topic, [junk])
    assert await admin.purge_dead(topic) == 4
    assert await admin.dead_letters(topic) == []


async def _at_least(letters: Awaitable[list[DeadLetter]], n: int) -> list[DeadLetter] | None:
    got = await letters
    return got if len(got) >= n else None


# --- fan-out ----------------------------------------------------------------------------------


async def test_two_groups_each_receive_every_job_exactly_once(
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    a, b = Recorder(redis_async), Recorder(redis_async)
    wa = await workers.start(a, group="a", concurrency=4)
    wb = await workers.start(b, group="b", concurrency=4)
    ids = await client.enqueue_many(topic, [{"payload": i} for i in range(40)])
    ids += [await client.enqueue(topic, i) for i in range(40, 50)]

    await eventually(
        holds(lambda: wa.status()["acked"] == 50 and wb.status()["acked"] == 50),
        timeout_s=10,
        what="both groups to ack every job",
    )
    assert Counter(a.ids()) == Counter(ids), "group a did not get every job exactly once"
    assert Counter(b.ids()) == Counter(ids), "group b did not get every job exactly once"
    await all_acked(redis_async, topic, "a")
    await all_acked(redis_async, topic, "b")


async def test_a_retry_runs_only_in_the_group_that_failed(
    client: AsyncClient,
    admin: AsyncAdmin,
    scheduler: Scheduler,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    def failing_on_first_attempt(*fail: str) -> Callable[[Job], Awaitable[None]]:
        async def behave(job: Job) -> None:
            if job.payload in fail and job.attempt == 1:
                raise RuntimeError(f"{job.payload} failed")

        return behave

    # "x" fails in group a only; "y" fails in both (two retries of one job id pending at once).
    a = Recorder(redis_async, failing_on_first_attempt("x", "y"))
    b = Recorder(redis_async, failing_on_first_attempt("y"))
    settings = {"retry_base_ms": 100, "retry_jitter_pct": 0}
    wa = await workers.start(a, group="a", **settings)
    wb = await workers.start(b, group="b", **settings)
    x = await client.enqueue(topic, "x")
    y = await client.enqueue(topic, "y")
    others = [await client.enqueue(topic, i) for i in range(5)]

    # Successes: a runs x and y twice (fails the first time), b runs x once and y twice; both
    # run the 5 others once. Each group skips the other's retries: a skips b's retry of y,
    # b skips a's retries of x and y.
    await eventually(
        holds(
            lambda: (
                wa.status()["handled"] == 7
                and wb.status()["handled"] == 7
                and wa.status()["skipped"] == 1
                and wb.status()["skipped"] == 2
            )
        ),
        timeout_s=10,
        what="both groups to settle every job and skip the other's retries",
    )
    assert [j.attempt for j in a.of(x)] == [1, 2]
    assert [j.attempt for j in a.of(y)] == [1, 2]
    assert [j.attempt for j in b.of(x)] == [1], "group b ran group a's retry"
    assert [j.attempt for j in b.of(y)] == [1, 2]
    assert all(j.group == "a" for j in a.of(x)[1:] + a.of(y)[1:])
    assert all(j.group == "b" for j in b.of(y)[1:])
    for rec in (a, b):
        assert all(Counter(rec.ids())[i] == 1 for i in others)
    await all_acked(redis_async, topic, "a")
    await all_acked(redis_async, topic, "b")
    assert await admin.dead_letters(topic) == []


# --- keep-alive, timeouts ---------------------------------------------------------------------


async def test_long_handler_is_not_taken_over_by_a_live_worker(
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    r = redis_async
    visibility_ms = 600
    done = asyncio.Event()

    async def long_job(job: Job) -> None:
        if job.payload == "long":
            await done.wait()  # until the test has seen 3 visibility timeouts go by

    a, b = Recorder(r, long_job), Recorder(r)
    settings = {"visibility_timeout_ms": visibility_ms, "claim_interval_ms": 100}
    wa = await workers.start(a, concurrency=1, **settings)
    long_id = await client.enqueue(topic, "long")
    await eventually(holds(lambda: wa.status()["running"] == 1), timeout_s=5, what="long job")
    (long_job_seen,) = a.of(long_id)
    wb = await workers.start(b, **settings)
    shorts = [await client.enqueue(topic, i) for i in range(5)]
    await eventually(
        holds(lambda: sorted(b.ids()) == sorted(shorts)), timeout_s=5, what="b to run the rest"
    )

    started_ms = long_job_seen.fired_ms
    await eventually(
        lambda: _later_than(r, started_ms + 3 * visibility_ms),
        timeout_s=10,
        what="3 visibility timeouts",
    )
    keys = ShardKeys(topic, long_job_seen.shard)
    (row,) = await r.xpending_range(
        keys.ready, "default", long_job_seen.entry_id, long_job_seen.entry_id, 1
    )
    assert row["consumer"].decode() == wa.consumer
    assert row["times_delivered"] == 1, "the long job's entry was delivered again"
    assert row["time_since_delivered"] < visibility_ms

    done.set()
    await eventually(holds(lambda: wa.status()["acked"] == 1), timeout_s=5, what="long job ack")
    assert long_id not in b.ids(), "a live worker's running job was taken over"
    assert a.ids() == [long_id]
    assert wa.status()["taken_over"] == 0 and wb.status()["taken_over"] == 0
    await all_acked(r, topic)


async def _hang_until_cancelled(cancelled: list[Any], note: Any) -> None:
    """A handler body that never ends on its own; records `note` when it is cancelled."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(note)
        raise


async def _later_than(r: redis.asyncio.Redis, ms: int) -> bool:
    return await redis_ms(r) > ms


async def test_hanging_async_handler_is_cancelled_on_handler_timeout(
    client: AsyncClient,
    admin: AsyncAdmin,
    scheduler: Scheduler,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    cancelled: list[int] = []

    async def behave(job: Job) -> None:
        if job.payload == "hang":
            await _hang_until_cancelled(cancelled, job.attempt)

    rec = Recorder(redis_async, behave)
    worker = await workers.start(rec, handler_timeout_ms=200, retry_base_ms=50, retry_jitter_pct=0)
    hang = await client.enqueue(topic, "hang", max_attempts=2)
    fine = [await client.enqueue(topic, i) for i in range(3)]

    (letter,) = await eventually(
        lambda: admin.dead_letters(topic), timeout_s=10, what="the hanging job's dead letter"
    )
    assert [j.attempt for j in rec.of(hang)] == [1, 2]
    assert cancelled == [1, 2], "the hanging handler was not cancelled on each timeout"
    for run in rec.runs:
        if run.job.id == hang:  # each run ended (was cancelled) about 200 ms in
            assert 200 <= run.ended_ms - run.job.fired_ms < 200 + 1000
    assert (letter.job_id, letter.reason, letter.attempt) == (hang, "failed", 2)
    assert "HandlerTimeoutError" in letter.error
    assert "handler_timeout_ms=200" in letter.error
    assert "attempt 2 of 2" in letter.error
    await eventually(holds(lambda: worker.status()["acked"] == 3), timeout_s=5, what="the rest")
    assert sorted(i for i in rec.ids() if i != hang) == sorted(fine)
    await all_acked(redis_async, topic)


# --- graceful stop ----------------------------------------------------------------------------


async def test_stop_finishes_running_handlers_and_hands_the_waiting_entries_on(
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    deployment: str,
) -> None:
    r = redis_async
    # A visibility timeout far longer than the test: only a hand-on lets b run a's entries.
    settings = {"visibility_timeout_ms": 60_000, "claim_interval_ms": 100}
    ids = balanced_ids("job", per_shard=4, shards=SHARDS)  # 16 jobs, 4 per shard
    await client.enqueue_many(topic, [EnqueueItem(payload=i, job_id=i) for i in ids])
    release = asyncio.Event()

    async def blocked(job: Job) -> None:
        await release.wait()

    a = Recorder(r, blocked)
    wa = await workers.start(a, concurrency=2, **settings)
    # Each shard is asked for its share of the 2 free slots, at least one: one read holds
    # SHARDS entries, 2 running and the rest waiting for a slot. On a cluster each shard has
    # a reader of its own, and together they take no more than the free slots.
    held = SHARDS if deployment == "single" else 2
    waiting = held - 2
    await eventually(
        holds(lambda: wa.status()["running"] == 2 and wa.status()["held"] == held),
        timeout_s=5,
        what=f"a to hold {held} entries and run 2",
    )
    running = set(a.ids())

    stopping = asyncio.create_task(wa.stop(grace_ms=10_000))
    await eventually(
        holds(lambda: wa.status()["stopping"] and wa.status()["held"] == 2),
        timeout_s=5,
        what="a to begin its stop and drop its waiting entries",
    )
    assert not stopping.done(), "stop() did not wait for the running handlers"
    release.set()
    report = await stopping

    assert set(a.ids()) == running and len(running) == 2, "a started a job after stop()"
    assert wa.status()["acked"] == 2, "the handlers running at stop() were not acked"
    left = await pending_of(r, topic, wa.consumer)
    assert len(left) == waiting
    assert all(row["time_since_delivered"] >= 60_000 for row in left), "not handed on"
    assert (report.finished, report.abandoned) == (2, 0)

    b = Recorder(r)
    wb = await workers.start(b, concurrency=16, **settings)
    await eventually(
        holds(lambda: wb.status()["acked"] == len(ids) - 2),
        timeout_s=5,
        what="b to run everything a did not (promptly: far below the visibility timeout)",
    )
    assert Counter(a.ids() + b.ids()) == Counter(ids), "a job was lost or run twice"
    assert wb.status()["taken_over"] == waiting
    await all_acked(r, topic)
    assert report.handed_on == waiting, (
        f"the stop report says {report.handed_on} entries were handed on; {waiting} were "
        "(each entry waiting for a slot is counted twice)"
    )


@pytest.mark.parametrize(
    "grace",
    [{"grace_ms": 200}, {"grace": 0.2}, {"grace": timedelta(milliseconds=200)}],
    ids=["grace_ms", "seconds", "timedelta"],
)
async def test_a_handler_running_past_the_grace_is_abandoned_and_handed_on(
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    grace: dict[str, Any],
) -> None:
    settings = {"visibility_timeout_ms": 60_000, "claim_interval_ms": 100}
    cancelled: list[str] = []

    async def stuck(job: Job) -> None:
        await _hang_until_cancelled(cancelled, job.id)

    a = Recorder(redis_async, stuck)
    wa = await workers.start(a, concurrency=1, **settings)
    job_id = await client.enqueue(topic, "stuck")
    await eventually(holds(lambda: wa.status()["running"] == 1), timeout_s=5, what="the job")

    for bad, parameter in [
        ({"grace": 0.2, "grace_ms": 200}, "grace"),
        ({"grace": -1}, "grace"),
        ({"grace": float("nan")}, "grace"),
        ({"grace": "1"}, "grace"),
        ({"grace_ms": 3_600_001}, "grace_ms"),
    ]:
        with pytest.raises(InvalidArgumentError) as refused:
            await wa.stop(**bad)  # refused before anything stops
        assert refused.value.parameter == parameter, bad
    assert wa.status()["running"] == 1
    started_s = time.monotonic()
    report = await wa.stop(**grace)

    assert (report.finished, report.abandoned, report.handed_on) == (0, 1, 1)
    assert 0.2 <= time.monotonic() - started_s < 10  # the grace was waited, in its unit
    assert cancelled == [job_id]
    b = Recorder(redis_async)
    wb = await workers.start(b, **settings)
    await eventually(holds(lambda: wb.status()["acked"] == 1), timeout_s=5, what="b to run it")
    assert b.ids() == [job_id]
    await all_acked(redis_async, topic)


async def test_stop_while_starting_stops_the_worker(
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    """`wheelq worker` calls stop() on SIGTERM, which may come while start() is still talking
    to Redis: stop() must still stop the worker (and serve() must return)."""
    worker = workers.make(Recorder(redis_async))
    serving = asyncio.create_task(worker.serve())
    try:
        await asyncio.sleep(0)  # one turn of the loop (no wait): start() awaits its first reply
        assert not serving.done()

        try:
            report = await worker.stop(grace_ms=0)
        except AssertionError as exc:
            raise AssertionError(
                "stop() called while start() was running raised instead of stopping the worker"
            ) from exc

        await eventually(holds(serving.done), timeout_s=5, what="serve() to return after stop()")
        await serving
        assert report.handed_on == report.abandoned == 0
    finally:
        serving.cancel()
        with contextlib.suppress(BaseException):
            await serving


async def test_workers_start_on_a_topic_of_one_shard(
    client: AsyncClient,
    admin: AsyncAdmin,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    """The second worker of a group (or a restarted one) finds the group already made."""
    one = f"{topic}-1"
    await admin.create_topic(one, 1)
    rec = Recorder(redis_async)
    for _ in range(2):
        worker = Worker.from_url(workers.url, one, rec, **FAST)
        workers.all.append(worker)
        await worker.start()
    job_id = await client.enqueue(one, "x")
    await eventually(holds(lambda: rec.ids() == [job_id]), timeout_s=5, what="the job to run")


# --- sync handlers ----------------------------------------------------------------------------


async def test_sync_handlers_run_in_threads_at_most_concurrency_at_once(
    client: AsyncClient,
    workers: Workers,
    topic: str,
) -> None:
    lock = threading.Lock()
    now_running = 0
    most = 0
    calls = 0
    seen: list[str] = []
    threads: set[int] = set()
    # The first three calls wait for each other: all three run at once whatever the order
    # the shards' entries arrive in (with fewer slots the barrier breaks and they fail).
    first_three = threading.Barrier(3, timeout=5)

    def handler(job: Job) -> None:
        nonlocal now_running, most, calls
        with lock:
            now_running += 1
            most = max(most, now_running)
            threads.add(threading.get_ident())
            calls += 1
            waits = calls <= 3
        try:
            if waits:
                first_three.wait()
            time.sleep(0.05)  # simulated work: a fourth at once would show in `most`
        finally:
            with lock:
                now_running -= 1
                seen.append(job.id)

    worker = await workers.start(handler, concurrency=3)
    ids = await client.enqueue_many(topic, [{"payload": i} for i in range(15)])

    await eventually(
        holds(lambda: worker.status()["acked"] == 15), timeout_s=10, what="every sync job"
    )
    assert Counter(seen) == Counter(ids)
    assert most == 3, f"{most} sync handlers ran at once with concurrency 3"
    assert threading.get_ident() not in threads, "a sync handler ran on the event loop's thread"
    assert worker.status()["handled"] == 15
