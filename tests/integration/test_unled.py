"""Unled shards (`wheelq.store.unled`): jobs coming due with no scheduler node leading
their shards are reported in every face — `Admin.stats` (sync and async), ``GET
/v1/topics/{t}``, ``wheelq topics list``, the ``wheelq_shards_unled`` gauge of ``wheelq
serve`` and of every scheduler node, one warning in their logs (and one line when it is
led again), a banner naming the command on the console's topic page and a marker on its
list — until a node leads them; a topic with nothing due soon is never reported; a leader
killed or frozen counts as gone once its lease expires."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio

from tests.integration.test_metrics import _parse, _scrape
from tests.integration.test_web_dashboard import get
from tests.support.cli import clean_env, run_wheelq, start_wheelq, stop, wheelq_argv
from tests.support.http import get_page
from tests.support.ids import balanced_ids
from tests.support.servers import free_port
from tests.support.waiting import eventually, until
from tests.support.web import Served, serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Scheduler
from wheelq.core.far_tier import MIN_HORIZON_MS
from wheelq.core.keys import shard_of
from wheelq.core.settings import ServeSettings
from wheelq.metrics import MetricsServer
from wheelq.store import connect
from wheelq.store.executor import drive_async
from wheelq.store.unled import HORIZON_MS, unled_topics

pytestmark = [pytest.mark.cluster_too, pytest.mark.both_servers]

SHARDS = 3
CHECK_MS = 100
"""The watches' ``unled_check_ms`` here: a read every 100 ms."""
WATCH_LOG = "wheelq.runtime.unled_watch"
LEASE_TTL_MS = 1000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def said(caplog: pytest.LogCaptureFixture, topic: str, level: int) -> list[str]:
    """The watches' lines of `level` about `topic`."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == WATCH_LOG and r.levelno == level and f"topic {topic} " in r.getMessage()
    ]


def gauge(samples: dict[str, list[tuple[dict[str, str], float]]], topic: str) -> float | None:
    """``wheelq_shards_unled`` of `topic` (None: not exported)."""
    found = [v for labels, v in samples.get("wheelq_shards_unled", []) if labels["topic"] == topic]
    assert len(found) <= 1, found
    return found[0] if found else None


async def served_metrics(api: Served) -> dict[str, list[tuple[dict[str, str], float]]]:
    status, text, _ = await api.call("GET", "/metrics")
    assert status == 200, text
    return _parse(text)


async def reads_more(watch_reads: object, at_least: int) -> None:
    """Wait for a watch (`reads` of a `UnledWatch`) to read `at_least` more times."""
    start = watch_reads.reads  # type: ignore[attr-defined]
    await until(
        lambda: watch_reads.reads >= start + at_least,  # type: ignore[attr-defined]
        timeout_s=10,
        what=f"{at_least} more reads of the watch",
    )


async def due_in_every_shard(client: AsyncClient, topic: str, delay_s: float) -> None:
    await AsyncAdmin.of(client).create_topic(topic, SHARDS)
    for job_id in balanced_ids("job", 1, SHARDS):
        await client.enqueue(topic, 0, delay=delay_s, job_id=job_id)


async def test_jobs_due_with_no_scheduler_are_reported_in_every_face_until_one_leads(
    redis_url: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wheelq")
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await due_in_every_shard(client, topic, 30)
        stats = await admin.stats(topic)
        assert stats is not None and stats.unled == SHARDS
        assert [s.unled for s in stats.shards] == [True] * SHARDS
        with Admin.from_url(redis_url) as sync_admin:
            blocking = await asyncio.to_thread(sync_admin.stats, topic)
        assert blocking is not None and blocking.unled == SHARDS

        shown = await asyncio.to_thread(run_wheelq, "topics", "list", "--redis-url", redis_url)
        assert shown.returncode == 0, shown.stderr
        line = f"topic {topic} has jobs due within 60 s in {SHARDS} shard(s)"
        assert line in shown.stderr and f"wheelq scheduler --topics {topic}" in shown.stderr

        settings = ServeSettings(unled_check_ms=CHECK_MS)
        async with serving(redis_url, settings=settings) as api:
            status, body, _ = await api.call("GET", f"/v1/topics/{topic}")
            assert status == 200, body
            assert body["unled"] == SHARDS and all(s["unled"] for s in body["shards"])

            watch = api.service.unled
            await reads_more(watch, 3)
            assert gauge(await served_metrics(api), topic) == SHARDS
            (warned,) = said(caplog, topic, logging.WARNING)  # once, over three reads
            assert "0, 1, 2" in warned and f"wheelq scheduler --topics {topic}" in warned

            _, page = await get(api, f"/ui/topics/{topic}")
            banner = page.ids["unled"]
            assert "shards 0, 1, 2" in banner and f"wheelq scheduler --topics {topic}" in banner
            _, listing = await get(api, f"/ui?after={topic[:-1]}&limit=5")
            assert listing.ids[f"{topic}-unled"] == "unled"

            node = Scheduler.from_url(redis_url, [topic], unled_check_ms=CHECK_MS)
            async with node:

                async def led() -> bool:
                    found = await admin.stats(topic)
                    return found is not None and found.unled == 0

                await eventually(led, timeout_s=10, what="the node to lead every shard")
                await reads_more(watch, 2)
                await reads_more(node.unled, 2)
                assert gauge(await served_metrics(api), topic) == 0
                assert len(said(caplog, topic, logging.WARNING)) == 1  # not again, nor by the node
                assert said(caplog, topic, logging.INFO) == [
                    f"topic {topic} is led again: every shard with jobs due has a scheduler node"
                ]
                _, page = await get(api, f"/ui/topics/{topic}")
                assert "unled" not in page.ids
                _, listing = await get(api, f"/ui?after={topic[:-1]}&limit=5")
                assert f"{topic}-unled" not in listing.ids
                status, body, _ = await api.call("GET", f"/v1/topics/{topic}")
                assert body["unled"] == 0


async def test_a_topic_with_nothing_due_soon_and_no_scheduler_is_not_reported(
    redis_url: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Jobs due beyond the horizon (the far tier's included) and an empty topic: 0 in every
    face, no warning, no banner."""
    caplog.set_level(logging.INFO, logger="wheelq")
    empty = topic + "-empty"
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await due_in_every_shard(client, topic, HORIZON_MS / 1000 + 60)
        await client.enqueue(topic, 0, delay=30 * 86_400, job_id="far-away")
        await admin.create_topic(empty, SHARDS)
        stats = await admin.stats(topic)
        assert stats is not None and stats.pending == SHARDS + 1 and stats.far == 1
        assert stats.unled == 0
        async with serving(redis_url, settings=ServeSettings(unled_check_ms=CHECK_MS)) as api:
            await reads_more(api.service.unled, 2)
            samples = await served_metrics(api)
            assert gauge(samples, topic) == 0 and gauge(samples, empty) == 0
            _, page = await get(api, f"/ui/topics/{topic}")
            assert "unled" not in page.ids
        assert said(caplog, topic, logging.WARNING) == []
        assert said(caplog, empty, logging.WARNING) == []


@pytest.fixture
def leader(redis_url: str, topic: str) -> Iterator[subprocess.Popen[bytes]]:
    """``wheelq scheduler --topics TOPIC`` in a process of its own, its leases short."""
    env = clean_env({"WHEELQ_SCHEDULER_LEASE_TTL_MS": str(LEASE_TTL_MS)})
    argv = wheelq_argv("scheduler", "--topics", topic, "--redis-url", redis_url)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill-9", "sigstop"])
async def test_a_leader_killed_or_frozen_counts_as_gone_once_its_lease_expires(
    redis_url: str,
    topic: str,
    caplog: pytest.LogCaptureFixture,
    leader: subprocess.Popen[bytes],
    sig: signal.Signals,
) -> None:
    """Another scheduler node (serving another topic) warns of it and exports the gauge."""
    caplog.set_level(logging.INFO, logger="wheelq")
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await due_in_every_shard(client, topic, 45)

        async def unled() -> int | None:
            found = await admin.stats(topic)
            return None if found is None else found.unled

        await eventually(
            lambda: _is(unled, 0), timeout_s=20, what="the process to lead every shard"
        )
        watcher = Scheduler.from_url(redis_url, [topic + "-other"], unled_check_ms=CHECK_MS)
        async with watcher, MetricsServer(watcher, port=0, host="127.0.0.1") as metrics:
            await reads_more(watcher.unled, 2)
            assert said(caplog, topic, logging.WARNING) == []  # led: nothing to say
            leader.send_signal(sig)
            sent = time.monotonic()
            await eventually(lambda: _is(unled, SHARDS), timeout_s=10, what="the lease to expire")
            await until(
                lambda: said(caplog, topic, logging.WARNING), timeout_s=5, what="the warning"
            )
            took_ms = (time.monotonic() - sent) * 1000
            # The bound: the lease's TTL, then one read of the watch (slack: a loaded host).
            assert took_ms < LEASE_TTL_MS + CHECK_MS + 3000, took_ms

            async def counted_all() -> bool:
                return gauge(await asyncio.to_thread(_scrape, metrics.port), topic) == SHARDS

            # The shards' leases expire one by one: the read that warned may have seen only the
            # first gone, and the next read counts them all.
            await eventually(
                counted_all, timeout_s=(2 * CHECK_MS + 3000) / 1000, what="every shard counted"
            )
            if sig == signal.SIGSTOP:
                leader.send_signal(signal.SIGCONT)  # it takes its shards back
                await eventually(lambda: _is(unled, 0), timeout_s=20, what="leading again")
                await until(
                    lambda: said(caplog, topic, logging.INFO), timeout_s=5, what="the led line"
                )
                assert gauge(await asyncio.to_thread(_scrape, metrics.port), topic) == 0
            assert len(said(caplog, topic, logging.WARNING)) == 1


async def _is(read: object, value: int) -> bool:
    return await read() == value  # type: ignore[operator,no-any-return]


async def test_wheelq_serve_warns_once_exports_the_gauge_and_says_when_led_again(
    redis_url: str, topic: str
) -> None:
    """``wheelq serve`` as a user runs it, ``[serve] unled_check_ms`` from its environment."""
    async with AsyncClient.from_url(redis_url) as client:
        await due_in_every_shard(client, topic, 30)
    port = free_port()
    proc = start_wheelq(
        "serve",
        "--redis-url",
        redis_url,
        "--port",
        str(port),
        env={"WHEELQ_SERVE_UNLED_CHECK_MS": str(CHECK_MS)},
    )

    def exported() -> float | None:
        status, _, body = get_page(f"http://127.0.0.1:{port}/metrics")
        return gauge(_parse(body.decode()), topic) if status == 200 else None

    node = Scheduler.from_url(redis_url, [topic])
    try:
        await until(lambda: exported() == SHARDS, timeout_s=30, what="the gauge at 3")
        await node.start()
        await until(lambda: exported() == 0, timeout_s=15, what="the gauge at 0")
    finally:
        _, err = stop(proc)  # before the node releases its leases (then it warns again)
        await node.stop()
    assert proc.returncode == 0, err
    warned = [line for line in err.splitlines() if f"topic {topic} has jobs due" in line]
    assert len(warned) == 1, err
    assert f"run wheelq scheduler --topics {topic}" in warned[0]
    assert len([line for line in err.splitlines() if f"topic {topic} is led again" in line]) == 1


async def test_a_far_tier_job_counts_once_its_due_time_comes_within_the_horizon(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """A far job is never promoted without a leader: read as of a later Redis time (the
    store's read takes `now_ms`), it makes its shard unled once due within the horizon."""
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, SHARDS)
        await admin.set_far_horizon(topic, MIN_HORIZON_MS)
        seconds, micros = await redis_async.time()
        due_ms = int(seconds) * 1000 + int(micros) // 1000 + 2 * MIN_HORIZON_MS
        job_id = "far-one"
        await client.enqueue(topic, 0, at=EPOCH + timedelta(milliseconds=due_ms), job_id=job_id)
        stats = await admin.stats(topic)
        assert stats is not None and stats.far == 1 and stats.unled == 0
    executor = connect.async_executor(redis_url, {}, None)

    async def read(now_ms: int) -> dict[str, tuple[int, ...]]:
        return await drive_async(unled_topics({topic: SHARDS}, now_ms), executor.run)

    try:
        assert await read(due_ms - HORIZON_MS - 1) == {}
        assert await read(due_ms - HORIZON_MS) == {topic: (shard_of(job_id, SHARDS),)}
        assert await read(due_ms + 3_600_000) == {topic: (shard_of(job_id, SHARDS),)}  # overdue
    finally:
        await executor.aclose()
