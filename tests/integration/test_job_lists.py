"""Jobs by state (issue 47, item 1), on real servers and a cluster: each state lists exactly
the jobs in it as a job moves (pending, ready, running, retrying, failed, succeeded, dead),
keyset pages return each job once and in due order over 100,000 pending jobs (ties at one
ms included, and rows that leave the list between pages), and bad input is a typed error.

docs/architecture.md, "Job lists". The handler holds each attempt on an event the test
releases; every wait polls with a deadline."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio

from tests.integration.test_job_history import (  # noqa: F401 (gated_worker: a fixture)
    FAST,
    GROUP,
    Gates,
    gated_worker,
)
from tests.support.cli import assert_one_line_error, run_wheelq
from tests.support.clients import admin_of
from tests.support.waiting import eventually
from tests.support.web import Served, assert_problem, serving
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    Client,
    EnqueueItem,
    InvalidArgumentError,
    Job,
    Retry,
    Worker,
)
from wheelq.core.job_list import LIST_STATES, JobPage
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.errors import UnknownTopicError
from wheelq.store import job_lists as lists_store

pytestmark = pytest.mark.cluster_too

SHARDS = 4
Rows = dict[str, set[tuple[str | None, str | None]]]


async def every_page(admin: Any, topic: str, state: str, **kw: Any) -> list[Any]:
    rows: list[Any] = []
    cursor = None
    while True:
        page: JobPage = await admin.jobs(topic, state, cursor=cursor, **kw)
        rows += page
        if page.next is None:
            return rows
        cursor = page.next


async def lists(admin: Any, topic: str) -> Rows:
    """Every state's list, as (job id, group) pairs."""
    return {
        state: {(r.id, r.group) for r in await every_page(admin, topic, state)}
        for state in LIST_STATES
    }


def where(rows: Rows, job_id: str) -> dict[str, set[str | None]]:
    """The states (and groups) that list `job_id`."""
    out: dict[str, set[str | None]] = {}
    for state, pairs in rows.items():
        for found, group in pairs:
            if found == job_id:
                out.setdefault(state, set()).add(group)
    return out


async def listed_as(
    admin: Any, topic: str, job_id: str, expected: dict[str, set[str | None]]
) -> Rows:
    async def check() -> Rows | None:
        rows = await lists(admin, topic)
        return rows if where(rows, job_id) == expected else None

    return await eventually(check, timeout_s=10, what=f"{job_id} listed as {expected}")


async def test_each_state_lists_exactly_the_jobs_in_it_as_a_job_moves(
    client: AsyncClient,
    gated_worker: Any,  # noqa: F811 (the fixture imported above)
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    gates, worker = gated_worker
    admin = AsyncAdmin.of(client)
    gates.fail.add(("walk", 1))
    await client.enqueue(topic, {"step": 1}, delay=3600, job_id="walk", max_attempts=3)
    await client.enqueue(topic, {"other": True}, delay=7200, job_id="other")
    rows = await listed_as(admin, topic, "walk", {"pending": {None}})
    assert where(rows, "other") == {"pending": {None}}
    [walk] = [r for r in await admin.jobs(topic, "pending") if r.id == "walk"]
    assert (walk.attempt, walk.max_attempts, walk.preview) == (1, 3, '{"step": 1}')

    # fired: a second group that no worker reads holds it ready; the worker's runs it
    ready_key = ShardKeys(topic, shard_of("walk", SHARDS)).ready
    await redis_async.xgroup_create(ready_key, "idle", "$")
    await client.reschedule(topic, "walk", delay=0)
    rows = await listed_as(admin, topic, "walk", {"ready": {"idle"}, "running": {GROUP}})
    [running] = await every_page(admin, topic, "running")
    assert (running.consumer, running.deliveries, running.attempt) == (worker.consumer, 1, 1)
    assert running.since_ms is not None and running.entry_id is not None
    await redis_async.xgroup_destroy(ready_key, "idle")

    # attempt 1 fails: retrying (with its error), and the failed run is listed
    gates.gate("walk", 1).set()
    await listed_as(admin, topic, "walk", {"retrying": {GROUP}, "failed": {GROUP}})
    [retry] = await every_page(admin, topic, "retrying")
    assert (retry.attempt, retry.group) == (2, GROUP)
    assert retry.error is not None and "boom on attempt 1" in retry.error
    [failed] = await every_page(admin, topic, "failed")
    assert failed.entry_id == running.entry_id and "boom" in (failed.error or "")

    # attempt 2 runs and succeeds: the failed run's record gives way to the success
    await client.reschedule(topic, "walk", delay=0)
    await listed_as(admin, topic, "walk", {"running": {GROUP}})
    gates.gate("walk", 2).set()
    await listed_as(admin, topic, "walk", {"succeeded": {GROUP}})
    [done] = [r for r in await every_page(admin, topic, "succeeded") if r.id == "walk"]
    assert done.attempt == 2 and done.duration_ms is not None

    # one that dies: out of attempts, it is dead (and its last run failed)
    gates.fail.add(("dies", 1))
    gates.gate("dies", 1).set()
    await client.enqueue(topic, {}, job_id="dies", max_attempts=1)
    rows = await listed_as(admin, topic, "dies", {"dead": {GROUP}, "failed": {GROUP}})
    [dead] = await every_page(admin, topic, "dead")
    assert dead.reason == "failed" and dead.ref is not None
    assert where(rows, "other") == {"pending": {None}}

    # filters: a group that matches nothing is an empty answer, not an error
    assert list(await admin.jobs(topic, "succeeded", group="nobody")) == []
    assert list(await admin.jobs(topic, "dead", reason="deliveries")) == []


RETRIES = 14
"""Jobs ``r00``... each retried once, ``r<i>`` due `RETRIES` - i minutes on: by id, the
reverse of their due order."""


@pytest.mark.parametrize("sorted_max", [None, 2], ids=["sorted", "walked"])
async def test_retrying_lists_by_due_time_soonest_first(
    client: AsyncClient,
    redis_url: str,
    topic: str,
    sorted_max: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 57 item 12: the retrying list was ordered by job id. Each shard's index of
    # retries is sorted by due time whole, or (over `sorted_max`) walked by due time in
    # the sorted set, past the first attempts due among them.
    if sorted_max is not None:  # each shard's index walked, not sorted
        monkeypatch.setattr(lists_store, "RETRIES_SORTED_MAX", sorted_max, raising=False)
    admin = AsyncAdmin.of(client)
    await admin.create_topic(topic, SHARDS)
    minutes = {f"r{i:02d}": RETRIES - i for i in range(RETRIES)}

    async def retry_later(job: Job) -> None:
        raise Retry(delay=timedelta(minutes=minutes[job.id]))

    worker = Worker.from_url(redis_url, topic, retry_later, **FAST)
    await worker.start()
    try:
        for job_id in minutes:
            await client.enqueue(topic, {}, job_id=job_id, max_attempts=3)
        for i in range(RETRIES):  # first attempts due among the retries: read past
            await client.enqueue(
                topic, {}, job_id=f"p{i:02d}", delay=timedelta(minutes=i, seconds=30)
            )

        async def all_retrying() -> list[Any] | None:
            rows = await every_page(admin, topic, "retrying", limit=5)
            return rows if len(rows) == RETRIES else None

        rows = await eventually(all_retrying, timeout_s=20, what=f"{RETRIES} jobs retrying")
    finally:
        await worker.stop(grace_ms=0)
    by_due = sorted(minutes, key=lambda job_id: minutes[job_id])
    assert [r.id for r in rows] == by_due  # r13 (a minute on) first
    dues = [r.due_ms for r in rows]
    assert dues == sorted(dues) and all(r.attempt == 2 for r in rows)
    assert [r.id for r in await every_page(admin, topic, "retrying", limit=1)] == by_due
    low = min(dues[3:])  # a due range: the same order, cut to it
    high = max(dues[:9]) + 1
    ranged = await every_page(
        admin, topic, "retrying", limit=2, due_after=low / 1000, due_before=high / 1000
    )
    assert [r.id for r in ranged] == by_due[3:9]
    pending = [r.id for r in await every_page(admin, topic, "pending", limit=4)]
    assert pending == [f"p{i:02d}" for i in range(RETRIES)]  # and no retry among them


async def test_pages_return_each_of_100000_pending_jobs_once_in_due_order(
    client: AsyncClient, topic: str, redis_url: str
) -> None:
    rng = random.Random(47)
    n = 100_000
    base_s = 2_000_000_000  # far ahead (2033): nothing fires while the test reads
    # many jobs share a ms (the ties a page boundary falls among), the rest spread out
    dues = [
        base_s + (rng.randrange(50) if i % 3 == 0 else rng.randrange(10**6) / 1000)
        for i in range(n)
    ]
    ids = [f"j{i:06d}" for i in range(n)]
    for start in range(0, n, 10_000):
        await client.enqueue_many(
            topic,
            [
                EnqueueItem(payload={"i": i}, at=dues[i], job_id=ids[i])
                for i in range(start, start + 10_000)
            ],
        )
    admin = AsyncAdmin.of(client)
    seen: list[Any] = []
    cursor = None
    cancelled: set[str] = set()
    pages = 0
    while True:
        page = await admin.jobs(topic, "pending", 1000, cursor=cursor)
        seen += page
        pages += 1
        if pages % 10 == 0 and page:
            # the last row listed leaves before the next page (the cursor's member is gone),
            # and so do rows not listed yet: neither repeats nor skips a row
            for gone in (page[-1].id, f"j{rng.randrange(n):06d}"):
                if gone not in cancelled and await client.cancel(topic, gone):
                    cancelled.add(gone)
        if page.next is None:
            break
        cursor = page.next
    listed = [r.id for r in seen]
    assert len(listed) == len(set(listed)), "a row was listed twice"
    assert set(listed) >= set(ids) - cancelled
    assert set(listed) <= set(ids)
    keys = [(r.due_ms, r.id.encode()) for r in seen]
    assert keys == sorted(keys), "not in due order"


async def test_a_due_range_lists_the_jobs_due_in_it(client: AsyncClient, topic: str) -> None:
    admin = AsyncAdmin.of(client)
    base = 2_000_000_000
    for i in range(30):
        await client.enqueue(topic, {}, at=base + i, job_id=f"r{i:02d}")
    rows = await every_page(
        admin, topic, "pending", limit=7, due_after=base + 10, due_before=base + 20
    )
    assert [r.id for r in rows] == [f"r{i:02d}" for i in range(10, 20)]
    assert list(await admin.jobs(topic, "pending", due_after=base + 20, due_before=base + 10)) == []


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_bad_input_is_a_typed_error_naming_the_parameter(
    kind: str, redis_url: str, topic: str, client: AsyncClient
) -> None:
    await client.enqueue(topic, {}, delay=3600)
    await client.enqueue(topic, {}, delay=3600)
    if kind == "sync":
        with Client.from_url(redis_url) as c:
            await _bad_input(admin_of(c), topic, sync=True)
    else:
        await _bad_input(AsyncAdmin.of(client), topic, sync=False)


async def _bad_input(admin: Any, topic: str, *, sync: bool) -> None:
    async def call(*args: Any, **kw: Any) -> Any:
        out = admin.jobs(*args, **kw)
        return out if sync else await out

    page = await call(topic, "pending", 1)
    assert page.next is not None
    cases: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("state", (topic, "scheduled"), {}),
        ("state", (topic, None), {}),
        ("limit", (topic, "pending", 0), {}),
        ("limit", (topic, "pending", 1001), {}),
        ("cursor", (topic, "ready"), {"cursor": page.next}),
        ("cursor", (topic + "-other", "pending"), {"cursor": page.next}),
        ("cursor", (topic, "pending"), {"cursor": "not a cursor"}),
        ("cursor", (topic, "pending"), {"cursor": "kgGlb3RoZXKncGVuZGluZ5A"}),
        ("due_after", (topic, "ready"), {"due_after": 1}),
        ("due_before", (topic, "pending"), {"due_before": float("nan")}),
        ("group", (topic, "pending"), {"group": "g"}),
        ("reason", (topic, "pending"), {"reason": "failed"}),
        ("reason", (topic, "dead"), {"reason": "bored"}),
    ]
    for name, args, kw in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await call(*args, **kw)
        assert caught.value.parameter == name, (name, caught.value)
    with pytest.raises(UnknownTopicError):
        await call(topic + "-none", "pending")


# --- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def test_http_pages_are_the_librarys_pages(
    api: Served, client: AsyncClient, topic: str
) -> None:
    base = 2_000_000_000
    for i in range(7):
        await client.enqueue(topic, {"n": i}, at=base + i, job_id=f"h{i}")
    admin = AsyncAdmin.of(client)
    expected = [r.id for r in await every_page(admin, topic, "pending", limit=3)]
    rows = await api.job_rows(f"/v1/topics/{topic}/jobs?state=pending&limit=3")
    assert all(row["state"] == "pending" and row["preview"] for row in rows)
    got = [row["id"] for row in rows]
    assert got == expected == [f"h{i}" for i in range(7)]
    after = (base + 2) * 1000
    status, body, _ = await api.call(
        "GET",
        f"/v1/topics/{topic}/jobs?state=pending&due_after={after}&due_before=2033-05-18T03:33:25Z",
    )
    assert status == 200 and [r["id"] for r in body["jobs"]] == ["h2", "h3", "h4"], body


async def test_http_bad_input_is_a_problem_naming_the_field_never_a_500(
    api: Served, client: AsyncClient, topic: str
) -> None:
    await client.enqueue(topic, {}, delay=3600)
    await client.enqueue(topic, {}, delay=3600)
    jobs = f"/v1/topics/{topic}/jobs"
    _, first, _ = await api.call("GET", f"{jobs}?state=pending&limit=1")
    other_state = f"{jobs}?state=ready&cursor={first['next']}"
    attacks: list[tuple[str, int, str | None]] = [
        (f"{jobs}?state=scheduled", 422, "state"),
        (f"{jobs}", 422, "state"),
        (f"{jobs}?state=pending&limit=0", 422, "limit"),
        (f"{jobs}?state=pending&limit=99999999999999999999", 422, "limit"),
        (other_state, 422, "cursor"),
        (f"/v1/topics/{topic}x/jobs?state=pending&cursor={first['next']}", 404, None),
        (f"{jobs}?state=pending&cursor=%00%01", 422, "cursor"),
        (f"{jobs}?state=pending&cursor=" + "A" * 5000, 422, "cursor"),
        (f"{jobs}?state=pending&due_after=yesterday", 422, "due_after"),
        (f"{jobs}?state=pending&due_before=99999999999999999999", 422, "due_before"),
        (f"{jobs}?state=ready&due_after=1", 422, "due_after"),
        (f"{jobs}?state=pending&group=g", 422, "group"),
        (f"{jobs}?state=running&group=%0A", 422, "group"),
        (f"{jobs}?state=dead&reason=bored", 422, "reason"),
        (f"{jobs}?state=ready&reason=failed", 422, "reason"),
    ]
    for path, status, field in attacks:
        got = await api.call("GET", path)
        assert_problem(got, status, field)
    # a filter that matches nothing: an explicit empty answer
    status, body, _ = await api.call("GET", f"{jobs}?state=running&group=nobody")
    assert (status, body) == (200, {"jobs": [], "next": None})


# --- the CLI -----------------------------------------------------------------------------------


async def test_cli_lists_a_state_page_by_page_and_refuses_bad_input_in_one_line(
    client: AsyncClient, topic: str, redis_url: str
) -> None:
    base = 2_000_000_000
    for i in range(5):
        await client.enqueue(topic, {"n": i}, at=base + i, job_id=f"c{i}")
    url = ("--redis-url", redis_url)
    first = await asyncio.to_thread(
        run_wheelq, "jobs", "list", topic, "--state", "pending", "--limit", "2", *url
    )
    assert first.returncode == 0, first.stderr
    assert [line.split()[0] for line in first.stdout.splitlines()] == ["c0", "c1"]
    assert '{"n": 0}' in first.stdout and "attempt=1/" in first.stdout
    cursor = first.stderr.strip().removeprefix("next page: --cursor ")
    rest = await asyncio.to_thread(
        run_wheelq,
        *("jobs", "list", topic, "--state", "pending", "--cursor", cursor, "--all", "--json"),
        *url,
    )
    assert rest.returncode == 0, rest.stderr
    assert [json.loads(line)["id"] for line in rest.stdout.splitlines()] == ["c2", "c3", "c4"]
    ranged = await asyncio.to_thread(
        run_wheelq,
        *("jobs", "list", topic, "--state", "pending", "--due-after", str(base + 3)),
        *url,
    )
    assert [line.split()[0] for line in ranged.stdout.splitlines()] == ["c3", "c4"]
    none = await asyncio.to_thread(
        run_wheelq, "jobs", "list", topic, "--state", "running", "--group", "g", *url
    )
    assert (none.returncode, none.stdout) == (0, "")
    assert f"no running jobs on {topic}" in none.stderr
    for bad, words in (
        (("--state", "ready", "--cursor", cursor), ("--cursor", "pending")),
        (("--state", "pending", "--group", "g"), ("--group",)),
        (("--state", "pending", "--limit", "0"), ("--limit", "[1, 1000]")),
    ):
        done = await asyncio.to_thread(run_wheelq, "jobs", "list", topic, *bad, *url)
        assert_one_line_error(done, 2, *words)


async def test_a_taken_over_job_is_listed_running_with_its_new_consumer(
    client: AsyncClient, redis_async: redis.asyncio.Redis, redis_url: str, topic: str
) -> None:
    """A consumer that read the job and died (it never acks) holds it running; a live
    worker's XAUTOCLAIM takes it over, and the list says who holds it now, delivered twice."""
    admin = AsyncAdmin.of(client)
    gates = Gates()
    await client.enqueue(topic, {"n": 1}, job_id="taken")
    ready_key = ShardKeys(topic, shard_of("taken", SHARDS)).ready
    await redis_async.xgroup_create(ready_key, GROUP, "0")
    await redis_async.xreadgroup(GROUP, "gone-worker", {ready_key: ">"}, count=10)
    [held] = await every_page(admin, topic, "running")
    assert (held.id, held.consumer, held.deliveries) == ("taken", "gone-worker", 1)
    worker = Worker.from_url(redis_url, topic, gates, **{**FAST, "visibility_timeout_ms": 300})
    await worker.start()
    try:

        async def taken_over() -> Any:
            rows = await every_page(admin, topic, "running")
            return rows if rows and rows[0].consumer == worker.consumer else None

        [row] = await eventually(taken_over, timeout_s=10, what="the job taken over")
        assert (row.id, row.deliveries, row.group) == ("taken", 2, GROUP)
        gates.gate("taken", 1).set()
        await listed_as(admin, topic, "taken", {"succeeded": {GROUP}})
    finally:
        for event in gates.opened.values():
            event.set()
        await worker.stop(grace_ms=0)
