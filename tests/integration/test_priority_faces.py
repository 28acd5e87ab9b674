"""``priority=`` on every face against real servers (docs/architecture.md, "Options"): the
sync and async clients' enqueue forms, ``enqueue_many`` and ``enqueue_bulk`` reach a handler's
`Job.priority` and `current_job().priority` (sync and async handlers) and `get()`; a retry
and a replayed dead letter keep it; a job kept in the far tier keeps it through a reschedule
and a promotion; the outbox relay keeps it; a task's ``options(priority=)`` and a
schedule's runs carry it; HTTP takes it in a job body (422 for a bad one, nothing written),
shows it, answers it to a pull consumer and filters a job list by it; the console's job
page and filter show it; ``wheelq enqueue --priority``, ``wheelq job`` and
``wheelq jobs list --priority``. A job of priority other than 5 makes its shard order its
due jobs, so a job due now fires through the scheduler's due line (each test that fires one
runs a scheduler); the order itself is tested in test_due_line.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

import psycopg
import pytest
import redis
import redis.asyncio

from tests.integration import test_worker
from tests.integration.test_tasks import app_module  # noqa: F401 (the task module fixture)
from tests.integration.test_worker import holds
from tests.support.cli import run_wheelq
from tests.support.outbox import FAST as RELAY_FAST
from tests.support.outbox import fired_exactly
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from tests.support.workers import Workers
from wheelq import (
    Admin,
    AsyncAdmin,
    AsyncClient,
    Client,
    EnqueueItem,
    InvalidArgumentError,
    Job,
    JobState,
    Scheduler,
    current_job,
    outbox,
)
from wheelq.core.job import Envelope, Field
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.core.settings import RelaySettings, WorkerSettings
from wheelq.store import far_tier
from wheelq.store.executor import AsyncExecutor

SHARDS = 2
BAD: list[Any] = [-1, 10, 5.0, True, "9"]

# test_worker.py's fixtures: workers stopped at teardown, a scheduler node leading every shard
workers = test_worker.workers
scheduler = test_worker.scheduler


def recorder(is_async: bool, seen: list[tuple[str, int, int, int]]) -> Callable[[Job], Any]:
    """A handler recording (id, its job's priority, `current_job()`'s, attempt), failing a
    job's first attempt when its payload says so."""

    def sync(job: Job) -> None:
        seen.append((job.id, job.priority, current_job().priority, job.attempt))
        if job.payload == "fail once" and job.attempt == 1:
            raise RuntimeError("the first attempt fails")

    async def async_(job: Job) -> None:
        await asyncio.sleep(0)
        sync(job)

    return async_ if is_async else sync


async def entry_of(r: redis.asyncio.Redis, topic: str, job_id: str) -> dict[bytes, bytes]:
    """The last ready-stream entry of a job of a `SHARDS`-shard topic."""
    keys = ShardKeys(topic, shard_of(job_id, SHARDS))
    found = [f for _, f in await r.xrange(keys.ready) if f[Field.ID] == job_id.encode()]
    assert found, job_id
    return dict(found[-1])


# --- the clients, a handler, a retry, a dead letter ------------------------------------------


@pytest.mark.cluster_too
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_every_enqueue_form_reaches_the_handler_current_job_and_get(
    is_async: bool,
    client: AsyncClient,
    workers: Workers,
    scheduler: Scheduler,
    redis_url: str,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    wanted = {"e9": 9, "plain": 5, "zero": 0, "in3": 3, "at7": 7, "m1": 1, "m5": 5}
    await client.enqueue(topic, 1, job_id="e9", priority=9)
    await client.enqueue(topic, 1, job_id="plain")
    await client.enqueue(topic, 1, job_id="zero", priority=0)
    await client.enqueue(topic, 1, job_id="in3", delay=0.2, priority=3)
    with Client.from_url(redis_url) as blocking:  # the sync client's forms
        await asyncio.to_thread(blocking.enqueue, topic, 1, job_id="at7", at=0, priority=7)
        items: list[Any] = [
            EnqueueItem(payload=1, job_id="m1", priority=1),
            {"payload": 1, "job_id": "m5"},
        ]
        await asyncio.to_thread(blocking.enqueue_many, topic, items)
        bulk = await asyncio.to_thread(blocking.enqueue_bulk, topic, [1, 2], priority=2)
    abulk = await client.enqueue_bulk(topic, [3], priority=8)
    wanted |= dict.fromkeys(bulk, 2) | dict.fromkeys(abulk, 8)
    seen: list[tuple[str, int, int, int]] = []
    await workers.start(recorder(is_async, seen))
    await eventually(holds(lambda: len(seen) == len(wanted)), timeout_s=10, what="every run")
    assert {job_id: (p, p, 1) for job_id, p in wanted.items()} == {
        job_id: (given, current, attempt) for job_id, given, current, attempt in seen
    }
    for job_id, priority in wanted.items():
        assert (await client.get(topic, job_id)).options["priority"] == priority, job_id
    plain = await entry_of(redis_async, topic, "plain")
    assert Field.PRIORITY not in plain  # the default costs no byte
    assert (await entry_of(redis_async, topic, "zero"))[Field.PRIORITY] == b"0"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_retry_keeps_its_priority(
    is_async: bool, client: AsyncClient, workers: Workers, scheduler: Scheduler, topic: str
) -> None:
    seen: list[tuple[str, int, int, int]] = []
    job_id = await client.enqueue(topic, "fail once", max_attempts=3, priority=7)
    await workers.start(recorder(is_async, seen), group="billing", retry_base_ms=20)
    await eventually(holds(lambda: len(seen) == 2), timeout_s=10, what="the retry's run")
    assert seen == [(job_id, 7, 7, 1), (job_id, 7, 7, 2)]
    assert (await client.get(topic, job_id)).options["priority"] == 7


async def test_a_replayed_dead_letter_keeps_its_priority_and_the_dead_list_filters_by_it(
    client: AsyncClient, workers: Workers, scheduler: Scheduler, topic: str
) -> None:
    failed: set[str] = set()

    def fails_once(job: Job) -> None:
        if job.id not in failed:
            failed.add(job.id)
            raise RuntimeError("dead at once")

    admin = AsyncAdmin.of(client)
    low = await client.enqueue(topic, 1, max_attempts=1, priority=1)
    plain = await client.enqueue(topic, 2, max_attempts=1)
    await workers.start(fails_once)

    async def dead() -> bool:
        return len(await admin.jobs(topic, "dead")) == 2

    await eventually(dead, timeout_s=10, what="both dead-lettered")
    rows = await admin.jobs(topic, "dead", priority=1)
    assert [(r.id, r.priority) for r in rows] == [(low, 1)]
    assert [r.id for r in await admin.jobs(topic, "dead", priority=5)] == [plain]
    assert await admin.replay(topic, [r.ref for r in rows if r.ref]) == 1

    async def succeeded() -> bool:
        return (await client.get(topic, low)).state is JobState.SUCCEEDED

    await eventually(succeeded, timeout_s=10, what="the replayed job's run")
    assert (await client.get(topic, low)).options["priority"] == 1


# --- the far tier ----------------------------------------------------------------------------


@pytest.mark.cluster_too
async def test_a_far_job_keeps_its_priority_through_a_reschedule_and_a_promotion(
    client: AsyncClient, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """Without a scheduler (the test plays the leader's promotion itself): the job moved
    to due now waits, due, in the sorted set of its shard, which its priority made ordered."""
    shards = all_shards(topic, SHARDS)
    for keys in shards:
        await redis_async.hset(keys.limits, "far", 600_000)
    await client.enqueue(topic, 1, job_id="moved", delay=7200, priority=9)
    await client.enqueue(topic, 1, job_id="promoted", delay=7200, priority=0)
    for job_id in ("moved", "promoted"):
        keys = ShardKeys(topic, shard_of(job_id, SHARDS))
        assert await redis_async.zscore(keys.delayed, job_id) is None  # kept far
    assert (await client.get(topic, "moved")).options["priority"] == 9
    assert await client.reschedule(topic, "moved", delay=0)  # out of the far tier, due now
    moved_keys = ShardKeys(topic, shard_of("moved", SHARDS))
    assert await redis_async.zscore(moved_keys.delayed, "moved") is not None
    moved = await redis_async.hget(moved_keys.jobs, "moved")
    assert moved is not None and Envelope.unpack(moved).priority == 9
    executor = AsyncExecutor(redis_async)
    for keys in shards:
        await redis_async.set(keys.lease, "a")
        await redis_async.hset(keys.limits, "far", 0)  # every leaf is promoted
        while (await executor.run([far_tier.promote(keys, "a")]))[0].more:
            pass
    keys = ShardKeys(topic, shard_of("promoted", SHARDS))
    assert await redis_async.zscore(keys.delayed, "promoted") is not None
    envelope = await redis_async.hget(keys.jobs, "promoted")
    assert envelope is not None and Envelope.unpack(envelope).priority == 0
    assert (await client.get(topic, "promoted")).options["priority"] == 0


# --- the outbox, tasks, schedules ------------------------------------------------------------


async def test_the_outbox_relay_keeps_the_priority(
    postgres_dsn: str, topic: str, redis_url: str, redis_sync: redis.Redis, scheduler: Scheduler
) -> None:
    outbox.install(postgres_dsn)
    with psycopg.connect(postgres_dsn) as conn, conn.transaction():
        high = outbox.enqueue(conn, topic, 1, priority=9)
        plain = outbox.enqueue(conn, topic, 2)
        with pytest.raises(InvalidArgumentError) as caught:
            outbox.enqueue(conn, topic, 3, priority=10)
        assert caught.value.parameter == "priority"
    async with AsyncClient.from_url(redis_url) as c:
        relay = outbox.Relay(c, postgres_dsn, RelaySettings(**RELAY_FAST))
        await relay.check()
        await relay.start()
        try:
            await eventually(
                lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, [high, plain]),
                timeout_s=10,
                what="the relayed jobs fired",
            )
        finally:
            await relay.stop()
        assert (await c.get(topic, high)).options["priority"] == 9
        assert (await c.get(topic, plain)).options["priority"] == 5


def test_a_tasks_options_and_a_schedules_runs_carry_the_priority(
    app_module: ModuleType,  # noqa: F811
    redis_url: str,
    topic: str,
) -> None:
    send = app_module.send
    handle = send.options(priority=9).enqueue_in(600, "a@b", n=1)
    assert handle.info().options["priority"] == 9
    with pytest.raises(InvalidArgumentError) as caught:
        send.options(priority=True).enqueue("a@b", n=1)
    assert caught.value.parameter == "priority"
    with Admin.from_url(redis_url) as admin:
        made = admin.schedule("nightly", send.topic, {"to": "a@b", "n": 1}, every=3600, priority=2)
        assert made.run_options["priority"] == 2
        with pytest.raises(InvalidArgumentError) as refused:
            admin.schedule("bad", send.topic, {"to": "a@b", "n": 1}, every=3600, priority=-1)
        assert refused.value.parameter == "priority"
        assert [s.name for s in admin.schedules(send.topic)] == ["nightly"]


# --- nothing written for a bad value -----------------------------------------------------------


@pytest.mark.cluster_too
@pytest.mark.parametrize("bad", BAD, ids=repr)
async def test_a_bad_priority_is_refused_by_every_client_call_and_nothing_is_written(
    bad: Any, client: AsyncClient, redis_url: str, topic: str
) -> None:
    calls: list[Any] = [
        client.enqueue(topic, 1, job_id="x", priority=bad),
        client.enqueue_many(
            topic, [{"payload": 1, "priority": 5}, {"payload": 1, "priority": bad}]
        ),
        client.enqueue_bulk(topic, [1, 2], priority=bad),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError) as caught:
            await call
        assert caught.value.parameter == "priority"
    with Client.from_url(redis_url) as blocking:
        with pytest.raises(InvalidArgumentError) as sync:
            blocking.enqueue(topic, 1, delay=60, priority=bad)
        assert sync.value.parameter == "priority"
    stats = await AsyncAdmin.of(client).stats(topic)
    assert stats is not None and (stats.pending, stats.in_stream) == (0, 0)


# --- HTTP, the console, the CLI --------------------------------------------------------------


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    ws = WorkerSettings(visibility_timeout_ms=30_000, claim_interval_ms=100)
    async with serving(redis_url, worker_settings=ws) as served:
        yield served


async def test_http_takes_shows_pulls_and_filters_by_priority(
    api: Served, client: AsyncClient, topic: str, scheduler: Scheduler
) -> None:
    jobs = f"/v1/topics/{topic}/jobs"
    for bad in BAD:
        status, problem, _ = await api.call(
            "POST", jobs, {"payload": 1, "id": "b", "priority": bad}
        )
        assert status == 422 and "priority" in json.dumps(problem), (bad, problem)
        batch = {"jobs": [{"payload": 1, "priority": bad}]}
        status, problem, _ = await api.call("POST", f"{jobs}/batch", batch)
        assert status == 422 and "priority" in json.dumps(problem), (bad, problem)
    status, _, _ = await api.call("GET", f"{jobs}/b")
    assert status == 404 or (await client.get(topic, "b")).state is JobState.UNKNOWN
    stats = await AsyncAdmin.of(client).stats(topic)
    assert stats is not None and stats.in_stream == 0  # nothing written

    status, answer, _ = await api.call("POST", jobs, {"payload": 1, "id": "h9", "priority": 9})
    assert status == 201, answer
    batch = {
        "jobs": [
            {"payload": 2, "id": "h0", "priority": 0, "key": "acme"},
            {"payload": 3, "id": "h5"},
        ]
    }
    status, answer, _ = await api.call("POST", f"{jobs}/batch", batch)
    assert status == 200 and [r["status"] for r in answer["results"]] == [201, 201], answer
    status, job, _ = await api.call("GET", f"{jobs}/h9")
    assert status == 200 and job["options"]["priority"] == 9

    async def fired() -> bool:  # through the due line: the scheduler fires them
        found = await AsyncAdmin.of(client).stats(topic)
        return found is not None and found.in_stream == 3

    await eventually(fired, timeout_s=10, what="the three jobs fired")

    rows = await api.job_rows(f"{jobs}?state=ready&priority=0")
    assert [(r["id"], r["priority"]) for r in rows] == [("h0", 0)]
    every = await api.job_rows(f"{jobs}?state=ready")
    assert {r["id"]: r["priority"] for r in every} == {"h9": 9, "h0": 0, "h5": 5}
    for bad_query in ("10", "-1", "x", "true"):  # (a query's int is read as limit's is)
        status, problem, _ = await api.call("GET", f"{jobs}?state=ready&priority={bad_query}")
        assert status == 422 and "priority" in json.dumps(problem), (bad_query, problem)

    status, _, _ = await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "pullers"})
    assert status == 201
    # the group reads from the stream's start: every job fired above
    await client.redis.xgroup_setid(ShardKeys(topic, 0).ready, "pullers", "0")
    await client.redis.xgroup_setid(ShardKeys(topic, 1).ready, "pullers", "0")
    pull = f"/v1/topics/{topic}/groups/pullers/pull"
    status, pulled, _ = await api.call("POST", pull, {"max": 10, "consumer": "c1"})
    assert status == 200, pulled
    got = {j["id"]: (j["priority"], j["key"]) for j in pulled["jobs"]}
    assert got == {"h9": (9, None), "h0": (0, "acme"), "h5": (5, None)}

    page_path = f"/ui/topics/{topic}/jobs?state=pending&priority=9"
    await client.enqueue(topic, 4, job_id="later9", delay=600, priority=9)
    await client.enqueue(topic, 5, job_id="later5", delay=600)
    status, page, _ = await api.call("GET", page_path)
    assert status == 200 and 'data-job="later9"' in page and 'data-job="later5"' not in page
    assert '<option value="9" selected>9</option>' in page
    assert "bulk-cancel-all" not in page  # a bulk action takes no priority
    status, page, _ = await api.call("GET", f"/ui/topics/{topic}/jobs?state=pending")
    assert 'data-job="later5"' in page and "bulk-cancel-all" in page
    status, page, _ = await api.call("GET", f"/ui/topics/{topic}/jobs?state=pending&priority=x")
    assert 400 <= status < 500 and "priority" in page
    status, page, _ = await api.call("GET", f"/ui/topics/{topic}/jobs/h0")
    assert status == 200 and 'id="job-option-priority">0<' in page


def test_the_cli_enqueues_shows_and_lists_by_priority(redis_url: str, topic: str) -> None:
    url = ["--redis-url", redis_url]
    done = run_wheelq(
        "enqueue", topic, "1", "--id", "c9", "--delay", "600", "--priority", "9", *url
    )
    assert done.returncode == 0, done.stderr
    done = run_wheelq(
        "enqueue", topic, "1", "--id", "c0", "--delay", "600", "--priority", "0", *url
    )
    assert done.returncode == 0, done.stderr
    shown = run_wheelq("job", topic, "c0", *url)
    assert shown.returncode == 0 and "priority  0" in shown.stdout, shown.stdout
    for bad in ("10", "-1", "5.0", "True"):
        refused = run_wheelq("enqueue", topic, "1", "--id", "cb", "--priority", bad, *url)
        assert refused.returncode == 2 and "priority" in refused.stderr, (bad, refused.stderr)
    listed = run_wheelq("jobs", "list", topic, "--state", "pending", "--priority", "9", *url)
    assert listed.returncode == 0, listed.stderr
    assert "c9" in listed.stdout and "priority=9" in listed.stdout and "c0" not in listed.stdout
    with Client.from_url(redis_url) as client:
        assert client.get(topic, "cb").state is JobState.UNKNOWN
