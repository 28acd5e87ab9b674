"""Job events on a real server and cluster: each transition of a job appears once, in order,
for its group; a reader resumed from a position gets exactly the rest; a topic without events
writes none; the streams stay bounded; bad settings and positions are refused by name.
(docs/architecture.md, "Job events".)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
import redis.asyncio

from tests.support.waiting import eventually
from tests.support.web import assert_problem, serving
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    Event,
    InvalidArgumentError,
    Job,
    Scheduler,
    UnknownTopicError,
    Worker,
)
from wheelq.core.events import decode_entry
from wheelq.core.keys import all_shards, shard_of
from wheelq.core.settings import ServeSettings
from wheelq.store import events as event_calls
from wheelq.store import history

pytestmark = pytest.mark.cluster_too

SHARDS = 2
TIMEOUT = aiohttp.ClientTimeout(total=20)
# No take-over: a busy machine stalling a worker past a short visibility timeout would run a
# job twice (at-least-once), and the test counts each job's events exactly.
FAST: dict[str, Any] = {"visibility_timeout_ms": 30_000, "retry_base_ms": 50}


async def collect(
    client: AsyncClient, topic: str, since: str, done: Callable[[list[Event]], bool]
) -> list[Event]:
    """Events from `since` until `done` says so (the test fails after 20 s)."""
    got: list[Event] = []

    async def read() -> None:
        # aclosing: leaving the loop closes the iterator now (its reads end), not at GC
        async with contextlib.aclosing(
            AsyncAdmin.of(client).events(topic, since=since, block=0.1)
        ) as it:
            async for event in it:
                got.append(event)
                if done(got):
                    return

    try:
        await asyncio.wait_for(read(), 20)
    except TimeoutError:
        raise AssertionError(f"events read before the timeout: {got}") from None
    return got


def story(events: list[Event], job_id: str) -> list[str]:
    return [e.kind for e in events if e.job_id == job_id]


def attempts(events: list[Event], job_id: str) -> list[int | None]:
    return [e.attempt for e in events if e.job_id == job_id]


async def test_each_transition_of_a_job_is_one_event_in_order(
    client: AsyncClient, admin: AsyncAdmin, redis_url: str, topic: str
) -> None:
    assert (await admin.set_events(topic)).enabled
    since = "start"

    async def handle(job: Job) -> str:
        if job.payload == "fail":
            raise RuntimeError("boom")
        return "ok"

    worker = Worker.from_url(redis_url, topic, handle, **FAST)
    node = Scheduler.from_url(redis_url, [topic], lease_ttl_ms=2000)
    await worker.start()
    await node.start()
    try:
        ok = await client.enqueue(topic, "ok")
        failing = await client.enqueue(topic, "fail", max_attempts=2)
        gone = await client.enqueue(topic, "x", delay=timedelta(hours=1))
        assert await client.cancel(topic, gone)
        await admin.pause(topic, "default")
        await admin.resume(topic, "default")
        events = await collect(
            client,
            topic,
            since,
            lambda got: (
                "dead" in story(got, failing)
                and "succeeded" in story(got, ok)
                and "cancelled" in story(got, gone)
                and sum(e.kind == "resumed" for e in got) == 1
            ),
        )
    finally:
        await node.stop()
        await worker.stop()
    assert story(events, ok) == ["fired", "started", "succeeded"]
    assert story(events, failing) == ["fired", "started", "retrying", "fired", "started", "dead"]
    assert story(events, gone) == ["cancelled"]
    pauses = [(e.kind, e.group) for e in events if e.job_id is None]
    assert pauses == [("paused", "default"), ("resumed", "default")]
    started = [e for e in events if e.kind == "started"]
    assert all(e.group == "default" and e.attempt in (1, 2) for e in started)
    assert attempts(events, failing) == [1, 1, 1, 2, 2, 2]
    assert attempts(events, ok) == [1, 1, 1]
    assert attempts(events, gone) == [None]  # a cancellation is the job's, not an attempt's
    assert all(e.at_ms > 0 for e in events)


async def test_a_reader_resumed_from_a_position_misses_and_repeats_nothing(
    client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    await admin.set_events(topic)
    ids = await client.enqueue_many(topic, [{"payload": n} for n in range(30)])  # fired now
    first = await collect(client, topic, "start", lambda got: len(got) == 10)
    rest = await collect(client, topic, first[-1].position, lambda got: len(got) == 20)
    read = [e.job_id for e in first + rest]
    assert sorted(read) == sorted(ids)  # every one, none twice
    late = await client.enqueue(topic, "late")  # after the position: the first to come
    more = await collect(client, topic, rest[-1].position, lambda got: len(got) == 1)
    assert [e.job_id for e in more] == [late]


async def test_a_reader_resumed_inside_an_entry_gets_the_rest_of_it_then_what_follows(
    client: AsyncClient, admin: AsyncAdmin, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """A settler round's starts share one entry: a position can fall inside it."""
    await admin.set_events(topic)
    keys = all_shards(topic, SHARDS)[1]
    jobs = [(f"j{n}", n % 3 + 1) for n in range(20)]
    await client.executor.run([event_calls.note(keys, "started", "default", jobs)])
    assert await redis_async.xlen(keys.events) == 1  # the 20 in one entry
    first = await collect(client, topic, "start", lambda got: len(got) == 7)
    assert first[-1].position.split(",")[1].endswith(".7")
    rest = await collect(client, topic, first[-1].position, lambda got: len(got) == 13)
    assert [(e.job_id, e.attempt) for e in first + rest] == jobs
    assert len({e.position for e in first + rest}) == 20
    late = await client.enqueue(topic, "late", delay=timedelta(0))
    more = await collect(client, topic, first[-1].position, lambda got: len(got) == 14)
    assert [e.job_id for e in more] == [job for job, _ in jobs[7:]] + [late]
    # The entry deleted since (trimmed): the reader goes on after it, repeating nothing.
    entry = rest[-1].position.split(",")[1]
    assert await redis_async.xdel(keys.events, entry) == 1
    after = await collect(client, topic, first[-1].position, lambda got: len(got) == 1)
    assert [e.job_id for e in after] == [late]


async def test_a_topic_without_events_writes_none_and_a_capped_one_stays_bounded(
    client: AsyncClient, admin: AsyncAdmin, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    await client.enqueue_many(topic, [{"payload": n} for n in range(50)])
    assert not (await admin.events_config(topic)).enabled
    for keys in all_shards(topic, SHARDS):
        assert await redis_async.exists(keys.events) == 0
    await admin.set_events(topic, max_len=100)
    await client.enqueue_many(topic, [{"payload": n} for n in range(2000)])
    for keys in all_shards(topic, SHARDS):
        # MAXLEN ~ trims whole nodes of the stream (100 entries each by default)
        assert 0 < await redis_async.xlen(keys.events) <= 300
    await admin.set_events(topic, False)
    assert not (await admin.events_config(topic)).enabled
    lengths = [await redis_async.xlen(k.events) for k in all_shards(topic, SHARDS)]
    await client.enqueue_many(topic, [{"payload": n} for n in range(50)])
    assert [await redis_async.xlen(k.events) for k in all_shards(topic, SHARDS)] == lengths


async def test_the_trimmer_keeps_the_newest_max_len_events_however_they_are_packed(
    client: AsyncClient, admin: AsyncAdmin, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    await admin.set_events(topic, max_len=100)
    keys = all_shards(topic, SHARDS)[0]
    jobs = [(f"j{n}", 1) for n in range(500)]
    notes = [event_calls.note(keys, "started", "g", jobs[i : i + 50]) for i in range(0, 500, 50)]
    await client.executor.run(notes)  # 10 entries of 50
    await client.executor.run([history.trim(keys, 86_400_000, 1000, 86_400_000)])
    kept = await collect(client, topic, "start", lambda got: len(got) >= 100)
    held = [e.job_id for e in kept if e.job_id]
    # whole entries go: at least the newest 100 stay, and fewer than 100 + one entry's 50
    assert (
        100
        <= sum(len(decode_entry(fields)) for _, fields in await redis_async.xrange(keys.events))
        < 150
    )
    assert held[-100:] == [job for job, _ in jobs[-100:]]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"max_len": 5}, "max_len"),
        ({"max_len": 1.5}, "max_len"),
        ({"max_age_ms": 0}, "max_age_ms"),
        ({"enabled": "yes"}, "enabled"),
    ],
)
async def test_bad_event_settings_are_refused_by_name(
    client: AsyncClient, admin: AsyncAdmin, topic: str, kwargs: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        await admin.set_events(topic, **kwargs)
    assert refused.value.parameter == parameter
    assert not (await admin.events_config(topic)).enabled


BAD_POSITIONS = [
    "bogus",
    "1-0",  # one part for two shards
    "1-0,2-0,3-0",
    "x-0,-",
    "-,-,",
    "1-0.0,-",  # inside an entry: 1 event read or more
    "1-0.x,-",
    "1-0.1234567,-",  # more events than an entry holds
    "01-0,-",
    "1-0,-" + " " * 200,
    7,
]


@pytest.mark.parametrize("since", BAD_POSITIONS)
async def test_bad_positions_are_refused_by_name(
    client: AsyncClient, topic: str, since: Any
) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        await collect(client, topic, since, lambda got: True)
    assert refused.value.parameter == "since"


async def test_events_of_an_unknown_topic_or_a_bad_wait_are_refused(
    client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    with pytest.raises(UnknownTopicError):
        await collect(client, topic + "-nope", "now", lambda got: True)
    with pytest.raises(InvalidArgumentError) as refused:
        async with contextlib.aclosing(admin.events(topic, block_ms=0)) as it:
            async for _ in it:
                pass
    assert refused.value.parameter == "block_ms"
    bad: list[tuple[dict[str, Any], str]] = [
        ({"block": 0.001}, "block"),
        ({"block": 61}, "block"),
        ({"block": float("nan")}, "block"),
        ({"block": "1"}, "block"),
        ({"block": 1, "block_ms": 1000}, "block"),
    ]
    for kwargs, parameter in bad:
        with pytest.raises(InvalidArgumentError) as refused:
            async with contextlib.aclosing(admin.events(topic, **kwargs)) as it:
                async for _ in it:
                    pass
        assert refused.value.parameter == parameter, kwargs


# --- over HTTP: Server-Sent Events ---------------------------------------------------------


async def read_sse(response: Any, n: int) -> list[dict[str, Any]]:
    """The first `n` events of an SSE response, each with its id, event and data."""
    got: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if current:
                got.append(current)
                current = {}
                if len(got) == n:
                    return got
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            current[name] = json.loads(value) if name == "data" else value
    return got


async def test_sse_streams_events_and_resumes_after_the_last_event_id(
    client: AsyncClient, admin: AsyncAdmin, redis_url: str, topic: str
) -> None:
    await admin.set_events(topic)
    ids = await client.enqueue_many(topic, [{"payload": n} for n in range(12)])
    async with serving(redis_url) as api:
        url = f"{api.base}/v1/topics/{topic}/events"
        async with api.http.get(url, params={"since": "start"}, timeout=TIMEOUT) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            first = await read_sse(r, 5)
        assert [e["event"] for e in first] == ["fired"] * 5
        assert all(e["data"]["position"] == e["id"] for e in first)
        resume = {"Last-Event-ID": first[-1]["id"]}
        async with api.http.get(url, headers=resume, timeout=TIMEOUT) as r:
            rest = await read_sse(r, 7)
        assert sorted(e["data"]["job_id"] for e in first + rest) == sorted(ids)
        await admin.create_topic(f"{topic}-quiet", 1)
        for path, status in [
            (f"/v1/topics/{topic}-nope/events", 404),
            (f"/v1/topics/{topic}-quiet/events", 409),  # keeps no events: no endless stream
            (f"/v1/topics/{topic}/events?since=bogus", 422),
            (f"/v1/topics/{topic}/events?since=" + "1-0," * 2000, 422),
        ]:
            async with api.http.get(api.base + path, timeout=TIMEOUT) as r:
                assert r.status == status, (path, await r.text())


async def test_sse_streams_past_the_pools_connections_are_refused_with_503_until_one_leaves(
    client: AsyncClient, admin: AsyncAdmin, redis_url: str, topic: str, deployment: str
) -> None:
    await admin.set_events(topic)
    # A stream holds one connection on one server (one read of every shard), one a shard on
    # a cluster: the pool has room for exactly `fit` streams.
    fit = 1 if deployment == "cluster" else SHARDS
    async with serving(redis_url, settings=ServeSettings(pull_connections=SHARDS)) as api:
        url = f"{api.base}/v1/topics/{topic}/events"
        async with contextlib.AsyncExitStack() as held:
            for _ in range(fit):
                holding = await held.enter_async_context(api.http.get(url, timeout=TIMEOUT))
                assert holding.status == 200
                await holding.content.readline()  # the stream is open: it holds its reads
            async with api.http.get(url, timeout=TIMEOUT) as refused:
                assert refused.status == 503 and refused.headers["Retry-After"]
                assert f"of the {SHARDS} connections" in await refused.text()

        # The client gone, its stream's reads end within their block and give back the pool.
        async def opens() -> bool:
            async with api.http.get(url, timeout=TIMEOUT) as again:
                return again.status == 200

        await eventually(opens, timeout_s=10, what="a new stream once the first client left")


async def test_sse_streams_a_topic_of_more_shards_than_pull_connections(
    client: AsyncClient, admin: AsyncAdmin, redis_url: str, topic: str
) -> None:
    """Issue 43 item 13: such a topic was always 503 ("0 of the 32 connections are free")."""
    shards, topic = 5, f"{topic}-wide"
    await admin.create_topic(topic, shards)
    await admin.set_events(topic)

    async def on_every_shard() -> list[str]:
        """Jobs until each shard has one (ids are random: 20 miss a shard 6% of the time)."""
        ids: list[str] = []
        while len({shard_of(i, shards) for i in ids}) < shards:
            ids += await client.enqueue_many(topic, [{"payload": n} for n in range(20)])
        return ids

    ids = await on_every_shard()
    async with serving(redis_url, settings=ServeSettings(pull_connections=2)) as api:
        url = f"{api.base}/v1/topics/{topic}/events"
        async with api.http.get(url, params={"since": "start"}, timeout=TIMEOUT) as r:
            assert r.status == 200, await r.text()
            got = await read_sse(r, len(ids))
            assert sorted(e["data"]["job_id"] for e in got) == sorted(ids)
            assert {e["event"] for e in got} == {"fired"}
            # Live events too, from every shard, on the pool's two connections.
            later = await on_every_shard()
            live = await read_sse(r, len(later))
        assert sorted(e["data"]["job_id"] for e in live) == sorted(later)


async def test_events_are_turned_on_and_off_over_http(
    client: AsyncClient, admin: AsyncAdmin, redis_url: str, topic: str
) -> None:
    """Issue 43 item 15: there was no HTTP way to turn a topic's events on."""
    async with serving(redis_url) as api:
        base = f"/v1/topics/{topic}/events"
        nope = f"/v1/topics/{topic}-nope/events/off"
        assert_problem(await api.call("POST", nope), 404, "topic")
        assert f"{topic}-nope" not in await admin.topics()
        status, on, _ = await api.call("POST", f"{base}/on")
        assert (status, on) == (
            200,
            {"enabled": True, "max_len": 100_000, "max_age_ms": 86_400_000},
        )
        assert (await admin.events_config(topic)).enabled
        status, on, _ = await api.call("POST", f"{base}/on", {"max_len": 500})
        assert (status, on["max_len"], on["max_age_ms"]) == (200, 500, 86_400_000), on
        for bad in ({"max_len": 5}, {"max_age_ms": 10}, {"max_len": 1.5}, {"other": 1}):
            field = next(iter(bad))
            assert_problem(await api.call("POST", f"{base}/on", bad), 422, field)
        assert (await admin.events_config(topic)).max_len == 500  # a bad body changes nothing
        job_id = await client.enqueue(topic, 1)
        async with api.http.get(api.base + base, params={"since": "start"}, timeout=TIMEOUT) as r:
            assert r.status == 200
            (fired,) = await read_sse(r, 1)
        assert (fired["event"], fired["data"]["job_id"]) == ("fired", job_id)
        status, off, _ = await api.call("POST", f"{base}/off")
        assert (status, off["enabled"]) == (200, False), off
        assert not (await admin.events_config(topic)).enabled
        got = await api.call("GET", base)
        assert_problem(got, 409, "topic")
        assert f"POST /v1/topics/{topic}/events/on" in got[1]["detail"]
