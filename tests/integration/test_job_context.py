"""`wheelq.current_job()` in a worker against a real server (docs/guides/tasks.md, "The job's
context"): a plain handler and a task, sync and async, see the job they run, with its id,
topic, key, attempt, max_attempts, due_ms, enqueued_ms and group as `get()` reports them;
a retry sees attempt 2 (through ``wheelq run`` and `handle.result()` too), a take-over its
deliveries, concurrent async handlers each their own job; outside a run it raises
`NoCurrentJobError`. `outbox.once(conn)` inside a task, sync and async, records the running
job on a real PostgreSQL. (The runner alone, threads and time limits:
tests/unit/test_current_job.py.)
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis.asyncio

import wheelq
from tests.integration import test_worker
from tests.integration.test_docs_guides import _importable
from tests.integration.test_worker import FAST, SCHEDULER, holds
from tests.support.docs import Services, run_code, snippets
from tests.support.servers import dedicated_server
from tests.support.tasks import URL_VARIABLE, module_name, running, write_module
from tests.support.waiting import eventually
from tests.support.workers import Workers
from wheelq import (
    AsyncClient,
    Job,
    NoCurrentJobError,
    RetryPolicy,
    Scheduler,
    WorkerSettings,
    current_job,
    outbox,
)
from wheelq.core.context import running as running_job
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.testing import ServerBinary

pytestmark = [pytest.mark.cluster_too, pytest.mark.both_servers]

SHARDS = 2
QUICK_RETRY = RetryPolicy(base_ms=20, max_ms=20, jitter_pct=0)


def facts(job: Job) -> dict[str, Any]:
    """What `current_job()` tells a handler, as plain values a task can return."""
    return {
        name: getattr(job, name)
        for name in (
            "id",
            "topic",
            "group",
            "key",
            "attempt",
            "max_attempts",
            "due_ms",
            "enqueued_ms",
            "deliveries",
        )
    }


# test_worker.py's fixtures: workers stopped at teardown, a scheduler node leading every shard
workers = test_worker.workers
scheduler = test_worker.scheduler


def recorder(is_async: bool, seen: list[tuple[Job, Job]]) -> Callable[[Job], Any]:
    """A handler recording (its argument, `current_job()`), failing a job's first attempt
    when its payload says so."""

    def sync(job: Job) -> None:
        seen.append((job, current_job()))
        if job.payload == "fail once" and job.attempt == 1:
            raise RuntimeError("the first attempt fails")

    async def async_(job: Job) -> None:
        await asyncio.sleep(0)
        sync(job)

    return async_ if is_async else sync


# --- plain handlers -----------------------------------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_handler_sees_its_job_with_the_facts_get_reports(
    is_async: bool, client: AsyncClient, workers: Workers, scheduler: Scheduler, topic: str
) -> None:
    seen: list[tuple[Job, Job]] = []
    before_ms = int(time.time() * 1000)
    job_id = await client.enqueue(topic, "hi", delay=0.3, key="customer-7", max_attempts=4)
    after_ms = int(time.time() * 1000)
    await workers.start(recorder(is_async, seen))
    await eventually(holds(lambda: len(seen) == 1), timeout_s=10, what="the run")

    ((job, current),) = seen
    assert current is job  # the very Job the handler was given
    info = await client.get(topic, job_id)
    assert facts(current) == {
        "id": job_id,
        "topic": topic,
        "group": None,  # a first attempt is for every group
        "key": "customer-7",
        "attempt": 1,
        "max_attempts": 4,
        "due_ms": info.due_ms,
        "enqueued_ms": info.enqueued_ms,
        "deliveries": 1,
    }
    assert before_ms <= current.enqueued_ms <= after_ms
    assert before_ms + 300 <= current.due_ms <= after_ms + 300
    with pytest.raises(NoCurrentJobError):  # the test's own code runs in no job
        current_job()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_retry_sees_attempt_two_in_the_group_that_failed(
    is_async: bool, client: AsyncClient, workers: Workers, scheduler: Scheduler, topic: str
) -> None:
    seen: list[tuple[Job, Job]] = []
    job_id = await client.enqueue(topic, "fail once", max_attempts=3)
    await workers.start(recorder(is_async, seen), group="billing", retry_base_ms=20)
    await eventually(holds(lambda: len(seen) == 2), timeout_s=10, what="the retry's run")

    first, retry = (current for _, current in seen)
    assert all(current is job for job, current in seen)
    assert (first.id, first.attempt, first.group) == (job_id, 1, None)
    assert (retry.id, retry.attempt, retry.max_attempts, retry.group) == (job_id, 2, 3, "billing")
    assert retry.enqueued_ms >= first.enqueued_ms  # the retry's: when the first one ended


async def test_a_taken_over_job_is_the_current_job_with_its_deliveries(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """A consumer read the entry and vanished; a live worker claims it past the visibility
    timeout, and its handler sees that job, delivered twice."""
    for keys in all_shards(topic, SHARDS):
        await redis_async.xgroup_create(keys.ready, "default", "0", mkstream=True)
    job_id = await client.enqueue(topic, "stalled", key="k")
    keys = ShardKeys(topic, shard_of(job_id, SHARDS))
    ((_, [(entry, _)]),) = await redis_async.xreadgroup(
        "default", "died", {keys.ready: ">"}, count=1
    )
    seen: list[tuple[Job, Job]] = []
    await workers.start(recorder(True, seen))
    await eventually(holds(lambda: len(seen) == 1), timeout_s=10, what="the take-over's run")

    ((job, current),) = seen
    assert current is job
    assert (current.id, current.key, current.entry_id) == (job_id, "k", entry.decode())
    assert (current.deliveries, current.attempt) == (2, 1)


async def test_concurrent_async_handlers_each_see_their_own_job(
    client: AsyncClient, workers: Workers, topic: str
) -> None:
    """Every job is in flight at once (each handler waits for all to start) before each
    reads its job again."""
    count = 6
    arrived: list[str] = []
    everyone = asyncio.Event()
    seen: dict[str, tuple[str, str]] = {}

    async def handler(job: Job) -> None:
        before = current_job().id
        arrived.append(job.id)
        if len(arrived) == count:
            everyone.set()
        await everyone.wait()
        seen[job.id] = (before, current_job().id)

    ids = [await client.enqueue(topic, n) for n in range(count)]
    await workers.start(handler, concurrency=count)
    await eventually(holds(lambda: len(seen) == count), timeout_s=10, what="every run")
    assert seen == {job_id: (job_id, job_id) for job_id in ids}


# --- tasks, in this process ---------------------------------------------------------------------


@pytest.fixture
async def app(redis_url: str) -> AsyncIterator[wheelq.App]:
    settings = WorkerSettings(**FAST)
    made = wheelq.App(redis_url, worker=settings)
    yield made
    await made.aclose()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_task_sees_its_job_and_a_retry_returns_attempt_two(
    is_async: bool, app: wheelq.App, topic: str
) -> None:
    def ctx(word: str) -> dict[str, Any]:
        assert word == "hi"
        return facts(current_job())

    def flaky(tag: str) -> int:
        job = current_job()
        if job.attempt == 1:
            raise RuntimeError(f"{tag}: the first attempt fails")
        return job.attempt

    async def actx(word: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        return ctx(word)

    async def aflaky(tag: str) -> int:
        await asyncio.sleep(0)
        return flaky(tag)

    context_task = app.task(topic=f"{topic}-ctx", max_attempts=2)(actx if is_async else ctx)
    flaky_task = app.task(topic=f"{topic}-flaky", max_attempts=3, retry=QUICK_RETRY)(
        aflaky if is_async else flaky
    )
    scheduler = app.scheduler(settings=wheelq.SchedulerSettings(**SCHEDULER))
    worker = app.worker()
    await scheduler.start()
    await worker.start()
    try:
        before_ms = int(time.time() * 1000)
        handle = await context_task.options(key="order-9").aenqueue_in(0.2, "hi")
        after_ms = int(time.time() * 1000)
        retried = await flaky_task.aenqueue("x")
        got = await handle.aresult(timeout=10)
        # the Done-when check, through the blocking `result()`
        assert await asyncio.to_thread(retried.result, 10) == 2
    finally:
        await worker.stop()
        await scheduler.stop()

    info = await handle.ainfo()
    assert got == {
        "id": handle.id,
        "topic": context_task.topic,
        "group": None,
        "key": "order-9",
        "attempt": 1,
        "max_attempts": 2,  # the task's, whatever the job was enqueued with
        "due_ms": info.due_ms,
        "enqueued_ms": info.enqueued_ms,
        "deliveries": 1,
    }
    assert before_ms <= got["enqueued_ms"] <= after_ms


# --- tasks under `wheelq run` -------------------------------------------------------------------

RUN_APP = f"""
    import os

    import wheelq

    app = wheelq.App(os.environ["{URL_VARIABLE}"])


    @app.task(max_attempts=2, retry=wheelq.RetryPolicy(base_ms=20, max_ms=20, jitter_pct=0))
    def report(name: str) -> int:
        if wheelq.current_job().attempt == 1:
            raise RuntimeError("the first attempt fails")
        return wheelq.current_job().attempt


    @app.task(max_attempts=2, retry=wheelq.RetryPolicy(base_ms=20, max_ms=20, jitter_pct=0))
    async def areport(name: str) -> int:
        if wheelq.current_job().attempt == 1:
            raise RuntimeError("the first attempt fails")
        return wheelq.current_job().attempt
"""


def test_under_wheelq_run_a_task_failing_once_returns_attempt_two(
    tmp_path: Path, redis_url: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_VARIABLE, redis_url)
    name = module_name(topic)
    module = write_module(tmp_path, name, textwrap.dedent(RUN_APP))
    try:
        with running(tmp_path, name, redis_url):
            handles = [module.report.enqueue("daily"), module.areport.enqueue("daily")]
            assert [h.result(timeout=20) for h in handles] == [2, 2]
    finally:
        module.app.close()


# --- once(conn) inside a task, on a real PostgreSQL -------------------------------------------


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    outbox.install(postgres_dsn)
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TABLE effects (job_id text NOT NULL)")
    return postgres_dsn


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_once_without_a_job_inside_a_task_records_the_running_job(
    is_async: bool, app: wheelq.App, dsn: str, topic: str
) -> None:
    """The first attempt applies its effect and records it, then fails after its commit; the
    retry's ``once(conn)`` finds the record of the same job and applies nothing."""

    def apply(order: int) -> bool:
        with psycopg.connect(dsn) as conn, conn.transaction():
            first = outbox.once(conn)
            if first:
                conn.execute("INSERT INTO effects VALUES (%s)", (current_job().id,))
        if current_job().attempt == 1:
            raise RuntimeError("crashed after the commit")
        return first

    async def aapply(order: int) -> bool:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            first = await outbox.aonce(conn)
            if first:
                await conn.execute("INSERT INTO effects VALUES (%s)", (current_job().id,))
        if current_job().attempt == 1:
            raise RuntimeError("crashed after the commit")
        return first

    task = app.task(topic=topic, max_attempts=2, retry=QUICK_RETRY)(aapply if is_async else apply)
    scheduler = app.scheduler(settings=wheelq.SchedulerSettings(**SCHEDULER))
    worker = app.worker()
    await scheduler.start()
    await worker.start()
    try:
        handle = await task.aenqueue(7)
        assert await handle.aresult(timeout=10) is False  # the retry applied nothing
    finally:
        await worker.stop()
        await scheduler.stop()
    with psycopg.connect(dsn) as conn:
        done = conn.execute("SELECT topic, job_id FROM wheelq_outbox_done").fetchall()
        effects = conn.execute("SELECT job_id FROM effects").fetchall()
    assert done == [(topic, handle.id)]
    assert effects == [(handle.id,)]


# --- the guides' examples -----------------------------------------------------------------------


def test_the_tasks_guides_job_context_runs_as_written(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tasks guide's "The job's context": its module under ``wheelq run``, and a job
    whose first attempt fails printing attempt 2."""
    page = "docs/guides/tasks.md"
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        found = snippets(page, "The job's context", url)
        assert list(found.files) == ["reports.py"]
        assert found.commands == [["wheelq", "run", "reports:app"]]
        (tmp_path / "reports.py").write_text(found.files["reports.py"])
        services = Services(tmp_path, stack)
        services.start(found.commands[0])
        with _importable(tmp_path, "reports"):
            ns = run_code(found.code, url)
            ns["report"].app.close()  # type: ignore[attr-defined]
        services.alive()
        services.stop()  # SIGTERM: it exits 0, gracefully
    assert capsys.readouterr().out.splitlines() == ["daily: attempt 2 of 3"]


def test_the_outbox_guides_task_applies_its_effects_once(
    tmp_path: Path, redis_url: str, topic: str, dsn: str
) -> None:
    """The outbox guide's task (``once(conn)`` without its job) under ``wheelq run``: each
    order invoiced once, the record naming the task's own job; the same job run again (a
    second delivery) invoices nothing more."""
    found = snippets("docs/guides/outbox.md", "Effects once in a task", redis_url, dsn=dsn)
    assert list(found.files) == ["billing.py"] and not found.code and not found.commands
    name = module_name(topic)
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, cents bigint NOT NULL)")
        conn.execute("CREATE TABLE invoices (order_id bigint NOT NULL, cents bigint NOT NULL)")
        conn.execute("INSERT INTO orders VALUES (1, 100), (2, 250)")
    module = write_module(tmp_path, name, found.files["billing.py"])
    try:
        with running(tmp_path, name, redis_url):
            handles = [module.invoice.enqueue(order) for order in (1, 2)]
            for handle in handles:
                handle.result(timeout=20)
        again = Job(id=handles[0].id, topic=module.invoice.topic, payload={"order": 1},
                    due_ms=0, attempt=1, max_attempts=5, deliveries=2)  # fmt: skip
        with running_job(again):  # as the worker runs a second delivery of the first
            module.invoice.handler()(again)
    finally:
        module.app.close()
    with psycopg.connect(dsn) as conn:
        invoices = sorted(conn.execute("SELECT order_id, cents FROM invoices").fetchall())
        done = sorted(conn.execute("SELECT topic, job_id FROM wheelq_outbox_done").fetchall())
    assert invoices == [(1, 100), (2, 250)]
    assert done == sorted((module.invoice.topic, h.id) for h in handles)
