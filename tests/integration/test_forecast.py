"""The forecast against a known schedule of jobs: `Admin.forecast` (sync and async), ``GET
/v1/topics/{t}/forecast``, ``wheelq topics forecast``, the console's bars and a scheduler
node's ``wheelq_jobs_due`` each count exactly the jobs the schedule puts in each window of
the Redis clock (overdue ones too), with the ready work as stats count it; bad windows and
unknown topics get the same typed error in every face, never a 500."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio

from tests.integration.test_metrics import _scrape
from tests.integration.test_web_dashboard import get, num
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Forecast, Scheduler
from wheelq.core import keys as k
from wheelq.core.forecast import MAX_WINDOWS, MAX_WITHIN_S, WITHIN_S
from wheelq.errors import InvalidArgumentError, UnknownTopicError
from wheelq.metrics import MetricsServer

pytestmark = pytest.mark.cluster_too  # on both servers, and on the cluster

SHARDS = 3
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SCHEDULE_S = {2: 3, 30: 2, 120: 4, 600: 5}
"""Seconds after the test's start -> jobs due then."""
OVERDUE_S = {-5: 2, -90: 1}
"""Seconds before the start -> jobs due then that have not fired (no scheduler runs)."""


async def server_ms(r: redis.asyncio.Redis) -> int:
    """The Redis clock now (a cluster's: the node it asks)."""
    seconds, micros = await r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def expected(dues: Sequence[int], at_ms: int, within: Sequence[int] = WITHIN_S) -> dict[int, int]:
    """What a forecast read at `at_ms` must count: for each window, the due times in it."""
    return {w: sum(d <= at_ms + w * 1000 for d in dues) for w in sorted(set(within))}


async def place(
    client: AsyncClient, r: redis.asyncio.Redis, topic: str, start_ms: int, shards: int
) -> list[int]:
    """The known schedule on `topic`, relative to `start_ms`; returns every due ms. Overdue
    jobs are placed as a stopped scheduler leaves them: pending with a past due time (an
    enqueue of a past time would fire it at once)."""
    dues: list[int] = []
    for after_s, count in SCHEDULE_S.items():
        for i in range(count):
            due = start_ms + after_s * 1000
            at = EPOCH + timedelta(milliseconds=due)
            await client.enqueue(topic, i, at=at, job_id=f"in{after_s}-{i}")
            dues.append(due)
    for before_s, count in OVERDUE_S.items():
        for i in range(count):
            job_id, due = f"late{-before_s}-{i}", start_ms + before_s * 1000
            await client.enqueue(topic, i, delay=1800, job_id=job_id)
            keys = k.ShardKeys(topic, k.shard_of(job_id, shards))
            assert await r.zadd(keys.delayed, {job_id: due}, xx=True, ch=True) == 1
            dues.append(due)
    return dues


@pytest.fixture
async def scheduled(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> AsyncIterator[tuple[AsyncClient, list[int]]]:
    """A topic of `SHARDS` shards holding the known schedule, with no scheduler node."""
    async with AsyncClient.from_url(redis_url) as client:
        await AsyncAdmin.of(client).create_topic(topic, SHARDS)
        start = await server_ms(redis_async)
        yield client, await place(client, redis_async, topic, start, SHARDS)


async def test_the_library_http_cli_and_console_count_the_known_schedule(
    redis_url: str,
    redis_async: redis.asyncio.Redis,
    topic: str,
    scheduled: tuple[AsyncClient, list[int]],
) -> None:
    client, dues = scheduled
    admin = AsyncAdmin.of(client)
    stats = await admin.stats(topic)
    assert stats is not None and stats.pending == len(dues)

    found = await admin.forecast(topic)
    assert isinstance(found, Forecast) and found.topic == topic
    assert found.due_within == expected(dues, found.at_ms)
    assert found.due_within[10] >= 3 + 3  # the +2 s jobs and every overdue one
    assert found.ready == stats.ready == 0  # nothing fired: no scheduler runs

    odd = await admin.forecast(topic, within=[3600, 1, 1, 45])  # repeats once, in order
    assert list(odd.due_within) == [1, 45, 3600]
    assert odd.due_within == expected(dues, odd.at_ms, [1, 45, 3600])
    assert (await admin.forecast(topic, within=60)).due_within.keys() == {60}

    with Admin.from_url(redis_url) as sync_admin:
        blocking = await asyncio.to_thread(sync_admin.forecast, topic, [10, 300])
    assert blocking.due_within == expected(dues, blocking.at_ms, [10, 300])

    shown = await asyncio.to_thread(
        run_wheelq, "topics", "forecast", topic, "--json", "--redis-url", redis_url
    )
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    assert body["topic"] == topic and body["ready"] == 0
    assert body["due_within"] == {str(w): n for w, n in expected(dues, body["at_ms"]).items()}
    table = await asyncio.to_thread(
        run_wheelq, "topics", "forecast", topic, "--within", "5,120", "--redis-url", redis_url
    )
    assert table.returncode == 0, table.stderr
    rows = dict(re.findall(r"^\s*(\d+ s|ready)\s+([\d,]+)$", table.stdout, re.MULTILINE))
    assert rows.keys() == {"5 s", "120 s", "ready"} and rows["ready"] == "0"

    async with serving(redis_url) as api:
        status, got, _ = await api.call("GET", f"/v1/topics/{topic}/forecast")
        assert status == 200, got
        assert set(got) == {"topic", "at_ms", "due_within", "ready"}
        assert got["due_within"] == {str(w): n for w, n in expected(dues, got["at_ms"]).items()}
        status, got, _ = await api.call(
            "GET", f"/v1/topics/{topic}/forecast?within=600&within=1,30"
        )
        assert status == 200, got
        counts = expected(dues, got["at_ms"], [1, 30, 600])
        assert got["due_within"] == {str(w): n for w, n in counts.items()}
        await _console_shows(api, redis_async, topic, dues)


EDGE_S = (60, 61)
DENSE_MS = 30_000
"""The edge test's jobs: one due at every ms from 60 s after its start for 31 s, so the end
of a 60 s and a 61 s window read in the next 30 s falls on a job's due time."""


async def test_a_job_due_exactly_at_a_windows_end_is_counted_in_it(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """A window counts the jobs due at or before its end (its start plus its length, on the
    Redis clock): with a job due at every ms around the ends, each read counts the one due
    exactly at its end in that window (and one more in the next window, one second on), in
    the library (async and sync), HTTP and the CLI."""
    async with AsyncClient.from_url(redis_url) as client:
        await AsyncAdmin.of(client).create_topic(topic, SHARDS)
        start = await server_ms(redis_async)
        first = start + EDGE_S[0] * 1000
        dues = list(range(first, first + DENSE_MS + 1000))
        await client.enqueue_many(
            topic,
            [{"payload": 0, "at": EPOCH + timedelta(milliseconds=due)} for due in dues],
        )

        def counted(at_ms: int, due_within: dict[int, int]) -> dict[int, int]:
            assert first <= at_ms + EDGE_S[0] * 1000 < first + DENSE_MS, "read too late"
            return due_within  # a job due at each window's end: the read counts it

        found = await AsyncAdmin.of(client).forecast(topic, within=list(EDGE_S))
        assert counted(found.at_ms, found.due_within) == expected(dues, found.at_ms, EDGE_S)
        # The count is the jobs due in [first, at_ms + window]: both ends in it.
        assert found.due_within[EDGE_S[0]] == found.at_ms + EDGE_S[0] * 1000 - first + 1
    with Admin.from_url(redis_url) as sync_admin:
        blocking = await asyncio.to_thread(sync_admin.forecast, topic, list(EDGE_S))
    assert counted(blocking.at_ms, blocking.due_within) == expected(dues, blocking.at_ms, EDGE_S)
    async with serving(redis_url) as api:
        status, got, _ = await api.call("GET", f"/v1/topics/{topic}/forecast?within=60,61")
    assert status == 200, got
    by_http = {int(w): n for w, n in got["due_within"].items()}
    assert counted(got["at_ms"], by_http) == expected(dues, got["at_ms"], EDGE_S)
    shown = await asyncio.to_thread(
        run_wheelq,
        "topics",
        "forecast",
        topic,
        "--within",
        "60,61",
        "--json",
        "--redis-url",
        redis_url,
    )
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    by_cli = {int(w): n for w, n in body["due_within"].items()}
    assert counted(body["at_ms"], by_cli) == expected(dues, body["at_ms"], EDGE_S)


async def _console_shows(api: Served, r: redis.asyncio.Redis, topic: str, dues: list[int]) -> None:
    """The topic page's bars count what a read between two clock readings must count (the
    schedule has no window edge for 20 s after it starts, so both say the same)."""
    before = await server_ms(r)
    _, page = await get(api, f"/ui/topics/{topic}")
    after = await server_ms(r)
    counts = expected(dues, after)
    assert counts == expected(dues, before), "the page took too long: a window edge passed"
    shown = [num(page.ids[f"bars-forecast-{i}"]) for i in range(len(WITHIN_S))]
    assert shown == list(counts.values())
    desc = page.ids["bars-forecast-desc"]
    assert desc == ", ".join(f"next {w} s: {n:,}" for w, n in counts.items())


async def test_in_a_browser_the_topic_page_says_the_counts_coming_due(
    redis_url: str,
    redis_async: redis.asyncio.Redis,
    page: Any,
    topic: str,
    scheduled: tuple[AsyncClient, list[int]],
) -> None:
    _, dues = scheduled
    async with serving(redis_url) as api:
        before = await server_ms(redis_async)
        await page.goto(f"{api.base}/ui/topics/{topic}")
        after = await server_ms(redis_async)
        counts = expected(dues, after)
        assert counts == expected(dues, before)
        said = ", ".join(f"next {w} s: {n:,}" for w, n in counts.items())
        # What a screen reader says of the bars: their title, then every count.
        title = "Jobs due in the next 10 s / 60 s / 300 s"
        assert await page.get_by_role("img", name=f"{title} {said}", exact=True).count() == 1
        drawn = [await page.text_content(f"#bars-forecast-{i}") for i in range(len(WITHIN_S))]
        assert [num(n or "") for n in drawn] == list(counts.values())


FIRED_NOW = 3
LATER_S = {20: 2, 30: 3, 120: 4, 600: 5}
"""A running node fires what is due: its schedule starts 20 s out, so no window edge passes
for 10 s (30 - 20: the 30 s jobs enter the 10 s window)."""


async def test_a_scheduler_nodes_jobs_due_metric_counts_the_known_schedule(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, 2)
        await admin.create_group(topic, "g")
        start = await server_ms(redis_async)
        dues = []
        for after_s, count in LATER_S.items():
            for i in range(count):
                due = start + after_s * 1000
                await client.enqueue(topic, i, at=EPOCH + timedelta(milliseconds=due))
                dues.append(due)
        for i in range(FIRED_NOW):
            await client.enqueue(topic, i)  # due now: fired at once, ready for group g
        node = Scheduler.from_url(redis_url, [topic], preload_interval_ms=100)
        async with node, MetricsServer(node, port=0, host="127.0.0.1") as metrics:

            async def read() -> dict[str, list[tuple[dict[str, str], float]]] | None:
                found = await asyncio.to_thread(_scrape, metrics.port)
                mine = [labels for labels, _ in found.get("wheelq_pending_jobs", [])]
                led = {labels["shard"] for labels in mine if labels["topic"] == topic}
                return found if led == {"0", "1"} else None  # a read of both shards

            found = await eventually(read, timeout_s=15, what="both shards' gauges")
            at = await server_ms(redis_async)
        assert found is not None
        assert at - start < 10_000, "too slow: a window edge may have passed"
        exported = {
            int(labels["within"]): n
            for labels, n in found["wheelq_jobs_due"]
            if labels["topic"] == topic
        }
        assert exported == expected(dues, at)
        ready = [n for labels, n in found["wheelq_ready_entries"] if labels["topic"] == topic]
        assert sum(ready) == FIRED_NOW == (await admin.forecast(topic)).ready


# --- bad input, in every face --------------------------------------------------------------

ACCEPTED = f"whole number of seconds in [1, {MAX_WITHIN_S}]"
TOO_MANY = list(range(1, MAX_WINDOWS + 2))
BAD: list[tuple[str, object, str]] = [
    ("zero", 0, "got 0"),
    ("negative", -5, "got -5"),
    ("nan", float("nan"), "got nan"),
    ("too many", TOO_MANY, f"got {MAX_WINDOWS + 1} windows"),
    ("too large", MAX_WITHIN_S + 1, f"got {MAX_WITHIN_S + 1}"),
    ("a fraction", 1.5, "got 1.5"),
]


def _text(value: object) -> list[str]:
    """`value` as HTTP query values and CLI text."""
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


@pytest.mark.parametrize(("name", "within", "said"), BAD, ids=[b[0] for b in BAD])
async def test_a_bad_window_is_a_typed_error_naming_within_in_every_face(
    redis_url: str,
    topic: str,
    scheduled: tuple[AsyncClient, list[int]],
    name: str,
    within: object,
    said: str,
) -> None:
    client, _ = scheduled
    with pytest.raises(InvalidArgumentError) as raised:
        await AsyncAdmin.of(client).forecast(topic, within=within)  # type: ignore[arg-type]
    assert raised.value.parameter == "within"
    assert ACCEPTED in str(raised.value) and said in str(raised.value)
    with Admin.from_url(redis_url) as sync_admin, pytest.raises(InvalidArgumentError) as blocked:
        sync_admin.forecast(topic, within=within)  # type: ignore[arg-type]
    assert str(blocked.value) == str(raised.value)

    query = "&".join(f"within={v}" for v in _text(within))
    async with serving(redis_url) as api:
        status, problem, _ = await api.call("GET", f"/v1/topics/{topic}/forecast?{query}")
    assert status == 422, problem
    assert problem["field"] == "within"
    assert ACCEPTED in problem["detail"] and said in problem["detail"]

    flag = "--within=" + ",".join(_text(within))
    shown = await asyncio.to_thread(
        run_wheelq, "topics", "forecast", topic, flag, "--redis-url", redis_url
    )
    assert shown.returncode == 2, shown.stderr
    assert ACCEPTED in shown.stderr and said in shown.stderr and shown.stdout == ""


async def test_an_unknown_topic_is_the_same_404_as_on_every_topic_endpoint(
    redis_url: str, topic: str
) -> None:
    missing = topic + "-none"
    async with AsyncClient.from_url(redis_url) as client:
        with pytest.raises(UnknownTopicError):
            await AsyncAdmin.of(client).forecast(missing)
    with Admin.from_url(redis_url) as sync_admin, pytest.raises(UnknownTopicError):
        sync_admin.forecast(missing, within=[60])
    async with serving(redis_url) as api:
        status, problem, _ = await api.call("GET", f"/v1/topics/{missing}/forecast")
        _, limits, _ = await api.call("GET", f"/v1/topics/{missing}/limits")
    assert status == 404
    assert {k: v for k, v in problem.items() if k != "instance"} == {
        k: v for k, v in limits.items() if k != "instance"
    }
    shown = await asyncio.to_thread(
        run_wheelq, "topics", "forecast", missing, "--redis-url", redis_url
    )
    assert shown.returncode == 1 and f"no such topic {missing!r}" in shown.stderr
