"""Scheduler nodes and workers (in this process) around a Redis that is not there.

- `start()` waits for a Redis not up yet, with backoff, and logs that once; it returns when a
  server comes up on the port, raises `RedisUnavailableError` after ``start_timeout_ms``,
  ends at once when `stop()` is called, and fails at once on errors waiting cannot fix;
- an outage mid-run is logged once per part (WARNING) and once when it ends (INFO), not once
  per try, and everything works again afterwards.

Stops bounded while Redis hangs or refuses, and second signals, are in
test_stop_unreachable.py (real processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.servers import dedicated_server, free_port
from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, Job, RedisUnavailableError, Scheduler, Worker
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.both_servers  # a server that comes up late

SHARDS = 2
WAITING = "not reachable"  # start()'s one line when it begins to wait
OUTAGE_S = 2.0
"""How long the mid-run outage lasts: the fault's length, not a wait for something."""


class Part:
    """A scheduler node or a worker on `url`, and a check that it does its job."""

    def __init__(self, kind: str, url: str, topic: str, **settings: Any) -> None:
        self.kind = kind
        self.topic = topic
        self.handled: list[str] = []
        self.obj: Scheduler | Worker
        if kind == "scheduler":
            self.obj = Scheduler.from_url(url, [topic], **settings)
        else:
            self.obj = Worker.from_url(url, topic, self._handle, default_shards=SHARDS, **settings)

    async def _handle(self, job: Job) -> None:
        self.handled.append(job.id)

    async def works(self, client: AsyncClient) -> None:
        """A job enqueued now is fired into its stream (scheduler) or handled (worker)."""
        if self.kind == "scheduler":
            job_id = await client.enqueue(self.topic, "x", delay=0.05)

            async def fired() -> bool:
                for keys in all_shards(self.topic, SHARDS):
                    for _, fields in await client.redis.xrange(keys.ready):
                        if fields[b"id"].decode() == job_id:
                            return True
                return False

            await eventually(fired, timeout_s=15, what=f"job {job_id} to fire")
        else:
            job_id = await client.enqueue(self.topic, "x")  # due now: in the stream at once

            async def handled() -> bool:
                return job_id in self.handled

            await eventually(handled, timeout_s=15, what=f"job {job_id} to be handled")


@pytest.fixture(params=["scheduler", "worker"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def holds(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return predicate()

    return check


def wheelq_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("wheelq") and r.levelno == level]


@contextlib.asynccontextmanager
async def server_on(binary: ServerBinary, port: int) -> AsyncIterator[str]:
    """A dedicated server on `port`, started off the event loop; yields its URL."""
    with contextlib.ExitStack() as stack:
        srv = await asyncio.to_thread(
            stack.enter_context, dedicated_server(binary, port=port, appendonly=True)
        )
        yield srv.url


async def test_start_waits_for_a_redis_that_comes_up_later(
    kind: str, server_binary: ServerBinary, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wheelq")
    port = free_port()
    part = Part(kind, f"redis://127.0.0.1:{port}", topic, start_timeout_ms=60_000)
    starting = asyncio.create_task(part.obj.start())
    try:
        await eventually(holds(lambda: WAITING in caplog.text), timeout_s=10, what="a wait")
        assert not starting.done(), "start() returned with nothing listening"
        async with server_on(server_binary, port) as url:
            await asyncio.wait_for(starting, 15)
            async with AsyncClient.from_url(url) as client:
                admin = AsyncAdmin.of(client)
                await admin.create_topic(topic, SHARDS)
                await part.works(client)
            await part.obj.stop()
    finally:
        starting.cancel()
        await part.obj.stop()
    waiting = [r.getMessage() for r in wheelq_records(caplog, logging.WARNING)]
    assert len(waiting) == 1, f"one line when it starts waiting, no other warning: {waiting}"
    assert waiting[0].startswith(f"redis at 127.0.0.1:{port} not reachable (Error 111 ")
    assert waiting[0].endswith("), retrying for up to 60 s")
    reached = [
        r.getMessage() for r in wheelq_records(caplog, logging.INFO) if "reachable after" in r.msg
    ]
    assert len(reached) == 1
    assert re.fullmatch(rf"redis at 127\.0\.0\.1:{port} reachable after \d+\.\d s", reached[0])


@pytest.mark.parametrize("timeout_ms", [0, 300])
async def test_start_gives_up_after_start_timeout_ms_with_a_typed_error(
    kind: str, topic: str, timeout_ms: int
) -> None:
    port = free_port()
    part = Part(kind, f"redis://127.0.0.1:{port}", topic, start_timeout_ms=timeout_ms)
    began = time.monotonic()
    with pytest.raises(RedisUnavailableError) as info:
        await asyncio.wait_for(part.obj.start(), 10)
    took_s = time.monotonic() - began
    assert str(info.value).startswith(
        f"redis at 127.0.0.1:{port} not reachable within start_timeout_ms={timeout_ms} ("
    )
    assert isinstance(info.value.__cause__, RedisConnectionError)
    assert timeout_ms / 1000 <= took_s < timeout_ms / 1000 + 2
    report = await part.obj.stop()  # nothing started: nothing to do
    assert set(dataclasses.astuple(report)) == {0}


async def test_stop_ends_a_start_that_waits_for_redis_at_once(
    kind: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wheelq")
    part = Part(kind, f"redis://127.0.0.1:{free_port()}", topic, start_timeout_ms=600_000)
    starting = asyncio.create_task(part.obj.start())
    try:
        await eventually(holds(lambda: WAITING in caplog.text), timeout_s=10, what="a wait")
        await asyncio.wait_for(part.obj.stop(), 2)
        await asyncio.wait_for(starting, 2)  # returns, without starting anything
    finally:
        starting.cancel()
    assert starting.result() is None
    assert len([r for r in caplog.records if WAITING in r.getMessage()]) == 1


async def test_an_error_waiting_cannot_fix_fails_at_once(
    kind: str, server_binary: ServerBinary, topic: str
) -> None:
    with dedicated_server(server_binary, password="s3cret") as srv:
        url = srv.url.replace("s3cret", "wrong")
        part = Part(kind, url, topic, start_timeout_ms=600_000)
        with pytest.raises(AuthenticationError):
            await asyncio.wait_for(part.obj.start(), 5)
        await part.obj.stop()


async def test_an_outage_mid_run_is_logged_once_per_part_not_once_per_try(
    server_binary: ServerBinary, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis is killed for OUTAGE_S under a node and a worker that are firing and handling
    jobs; each part logs at most two warnings (unreachable, maybe a stale connection just
    after), and says once that Redis is back; then every job is handled."""
    caplog.set_level(logging.INFO, logger="wheelq")
    with dedicated_server(
        server_binary, appendonly=True, extra_args=["--appendfsync", "always"]
    ) as srv:
        async with AsyncClient.from_url(srv.url) as client:
            admin = AsyncAdmin.of(client)
            await admin.create_topic(topic, SHARDS)
            ids = await client.enqueue_many(
                topic, [{"payload": i, "delay": 0.3 + i / 200} for i in range(1000)]
            )
        node = Part("scheduler", srv.url, topic, preload_interval_ms=100, check_interval_ms=50)
        worker = Part("worker", srv.url, topic, block_ms=100, claim_interval_ms=100)
        await node.obj.start()
        await worker.obj.start()
        try:
            await eventually(holds(lambda: len(worker.handled) >= 50), timeout_s=15, what="work")
            caplog.clear()
            await asyncio.to_thread(srv.kill)
            await asyncio.sleep(OUTAGE_S)  # the outage
            during = [r.getMessage() for r in wheelq_records(caplog, logging.WARNING)]
            await asyncio.to_thread(srv.restart)
            await eventually(
                holds(lambda: set(ids) <= set(worker.handled)), timeout_s=30, what="all handled"
            )
        finally:
            await worker.obj.stop()
            await node.obj.stop()
    warnings = [r.getMessage() for r in wheelq_records(caplog, logging.WARNING)]
    parts = Counter(line.split(":", 1)[0] for line in warnings)
    assert during, "the outage was not noticed"
    assert all(n <= 2 for n in parts.values()), f"too many warnings: {warnings}"
    assert len(warnings) <= 2 * 9, warnings  # 6 parts of a node, 3 of a worker
    back = [r.getMessage() for r in wheelq_records(caplog, logging.INFO) if "again" in r.msg]
    assert back, "no part said Redis was back"
    assert {line.split(":", 1)[0] for line in back} <= set(parts)
