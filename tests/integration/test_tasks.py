"""Tasks (`wheelq.App`): a typed function enqueued later and run by ``wheelq run`` in one
process; typed arguments and results, sync and async, retries and dead letters, a bad
argument refused before anything is written, and a killed process's jobs finished by the
next one (docs/guides/tasks.md)."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import html
import json
import re
import signal
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

import wheelq
from tests.integration.test_metrics import _scrape
from tests.support import task_types
from tests.support.cli import stop
from tests.support.servers import dedicated_server, free_port
from tests.support.tasks import URL_VARIABLE, module_name, running, start_run, write_module
from tests.support.waiting import eventually, eventually_sync
from tests.support.web import serving
from wheelq.embedded import ServerBinary

APP = textwrap.dedent(f"""
    import asyncio, os, time

    import wheelq

    app = wheelq.App(
        os.environ["{URL_VARIABLE}"],
        worker=wheelq.WorkerSettings(
            visibility_timeout_ms=1000, claim_interval_ms=200, retry_base_ms=60_000
        ),  # a retry at the worker's backoff would wait a minute: the tasks' own are 20 ms
    )


    @app.task
    def send(to: str, n: int) -> dict:
        return {{"to": to, "n": n, "ran_ms": int(time.time() * 1000)}}


    @app.task
    async def asend(to: str, n: int = 1) -> dict:
        return {{"to": to, "n": n, "ran_ms": int(time.time() * 1000)}}


    @app.task
    def bill(order: Order, address: Address, tier: Tier = Tier.FREE) -> Receipt:
        return Receipt(order, address, tier, int(time.time() * 1000))


    @app.task
    async def abill(order: Order, address: Address, tier: Tier = Tier.FREE) -> Receipt:
        return Receipt(order, address, tier, int(time.time() * 1000))


    @app.task(max_attempts=3, retry=wheelq.RetryPolicy(base_ms=20, max_ms=20, jitter_pct=0))
    def flaky(key: str) -> int:
        runs = app.client.redis.incr(key)
        if runs < 3:
            raise RuntimeError(f"run {{runs}} fails")
        return runs


    @app.task(max_attempts=2, retry=wheelq.RetryPolicy(base_ms=20, max_ms=20, jitter_pct=0))
    async def doomed(why: str) -> None:
        raise RuntimeError(why)


    @app.task(timeout=0.2, max_attempts=1)
    def slow(seconds: float) -> None:
        time.sleep(seconds)


    @app.task(timeout=0.2, max_attempts=1)
    async def aslow(seconds: float) -> None:
        await asyncio.sleep(seconds)
""")
APP_SOURCE = task_types.SOURCE + APP


@pytest.fixture
def app_module(
    tmp_path: Path, topic: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """The test's task module, imported here (its app on the test's server)."""
    monkeypatch.setenv(URL_VARIABLE, redis_url)
    name = module_name(topic)
    module = write_module(tmp_path, name, APP_SOURCE)
    yield module
    module.app.close()


@pytest.mark.cluster_too
def test_a_task_enqueued_in_half_a_second_returns_its_dict_never_before_due(
    tmp_path: Path,
    app_module: ModuleType,
    redis_url: str,
) -> None:
    send = app_module.send
    with running(tmp_path, app_module.__name__, redis_url):
        sent_ms = int(time.time() * 1000)
        handle = send.enqueue_in(0.5, "a@b", n=2)
        got = handle.result(timeout=10)
    assert isinstance(handle, wheelq.TaskHandle) and handle.topic == send.topic
    assert {k: got[k] for k in ("to", "n")} == {"to": "a@b", "n": 2}
    assert got["ran_ms"] >= sent_ms + 500, (got, sent_ms)
    assert handle.info().state == wheelq.JobState.SUCCEEDED


@pytest.mark.cluster_too
def test_a_wrong_argument_type_names_the_parameter_and_enqueues_nothing(
    app_module: ModuleType,
    redis_url: str,
) -> None:
    send = app_module.send
    with pytest.raises(wheelq.InvalidArgumentError) as raised:
        send.enqueue_in(0.5, "a@b", n="two")
    assert raised.value.parameter == "n", raised.value
    assert "'n'" in str(raised.value) and "int" in str(raised.value), raised.value
    with pytest.raises(wheelq.InvalidArgumentError) as missing:
        send.enqueue_in(0.5, "a@b")
    assert missing.value.parameter == "n", missing.value
    with wheelq.Admin.from_url(redis_url) as admin:
        assert send.topic not in admin.topics()  # nothing written, not even the topic


def test_an_async_task_awaited_end_to_end(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    asend = app_module.asend

    async def main() -> dict[str, object]:
        sent_ms = int(time.time() * 1000)
        handle = await asend.aenqueue_in(0.2, "c@d")
        got: dict[str, object] = await handle.aresult(timeout=10)
        assert isinstance(got["ran_ms"], int) and got["ran_ms"] >= sent_ms + 200, got
        await app_module.app.aclose()
        return got

    with running(tmp_path, app_module.__name__, redis_url):
        got = asyncio.run(main())
    assert {k: got[k] for k in ("to", "n")} == {"to": "c@d", "n": 1}  # the default applied


@pytest.mark.parametrize("task", ["bill", "abill"])
def test_typed_arguments_and_results_arrive_as_their_types(
    tmp_path: Path,
    app_module: ModuleType,
    redis_url: str,
    task: str,
) -> None:
    """A msgspec model, a dataclass, an enum, a datetime, a UUID and a Decimal go in as
    values and come back out of the worker and the result as the same types."""
    m = app_module
    order = m.Order(uuid.uuid4(), decimal.Decimal("12.30"), datetime.datetime.now(datetime.UTC))
    with running(tmp_path, m.__name__, redis_url):
        handle = (
            getattr(m, task)
            .options(job_id=f"{task}-1")
            .enqueue(order, m.Address("Oslo"), tier=m.Tier.PRO)
        )
        receipt = handle.result(timeout=10)
    assert handle.id == f"{task}-1"
    assert isinstance(receipt, m.Receipt), receipt
    assert receipt.order == order and isinstance(receipt.order.total, decimal.Decimal)
    assert receipt.address == m.Address("Oslo") and receipt.tier is m.Tier.PRO


def test_a_failing_task_retries_with_its_backoff_then_returns(
    tmp_path: Path,
    app_module: ModuleType,
    redis_url: str,
    redis_sync: redis.Redis,
    topic: str,
) -> None:
    key = f"{topic}:runs"
    with running(tmp_path, app_module.__name__, redis_url):
        handle = app_module.flaky.enqueue(key)
        assert handle.result(timeout=10) == 3
    assert int(redis_sync.get(key) or 0) == 3
    assert handle.info().attempt == 3


def test_a_task_out_of_attempts_is_dead_lettered_and_its_result_says_so(
    tmp_path: Path,
    app_module: ModuleType,
    redis_url: str,
) -> None:
    doomed = app_module.doomed
    with running(tmp_path, app_module.__name__, redis_url):
        handle = doomed.enqueue("no luck")
        with pytest.raises(wheelq.JobFailedError) as failed:
            handle.result(timeout=10)
    assert "no luck" in str(failed.value)
    with wheelq.Admin.from_url(redis_url) as admin:
        page = admin.dead_letters(doomed.topic)
    assert [d.job_id for d in page] == [handle.id]
    assert page[0].payload == {"why": "no luck"}  # the documented payload shape


def test_a_payload_that_does_not_fit_the_task_is_dead_lettered_at_once(
    tmp_path: Path,
    app_module: ModuleType,
    redis_url: str,
) -> None:
    """A job enqueued by hand (another language over HTTP) with a wrong argument: one
    attempt, dead-lettered with the parameter named, never retried."""
    send = app_module.send
    with wheelq.Client.from_url(redis_url) as client:
        job_id = client.enqueue(send.topic, {"to": "a@b", "n": "two"}, max_attempts=5)
    with (
        running(tmp_path, app_module.__name__, redis_url),
        pytest.raises(wheelq.JobFailedError) as failed,
    ):
        wheelq.TaskHandle(send, job_id).result(timeout=10)
    assert "'n'" in str(failed.value), failed.value
    assert wheelq.TaskHandle(send, job_id).info().attempt == 1


def test_killed_run_process_leaves_nothing_lost_a_second_one_finishes_every_job(
    tmp_path: Path,
    app_module: ModuleType,
    redis_url: str,
) -> None:
    """kill -9 of ``wheelq run`` while jobs are due and running: a second process takes its
    leases and its unacked entries over; every job succeeds exactly once."""
    send, name = app_module.send, app_module.__name__
    first = start_run(tmp_path, name, redis_url)
    handles = [send.enqueue_in(0.05 * (i % 20), f"{i}@x", n=i) for i in range(100)]
    eventually_sync(
        lambda: sum(h.info().state == wheelq.JobState.SUCCEEDED for h in handles) >= 10,
        timeout_s=20,
        what="the first process to run some of the jobs",
    )
    first.send_signal(signal.SIGKILL)
    stop(first)
    with running(tmp_path, name, redis_url):
        results = [h.result(timeout=20) for h in handles]
    assert [r["n"] for r in results] == list(range(100))
    assert all(h.info().state == wheelq.JobState.SUCCEEDED for h in handles)


@pytest.mark.parametrize("task", ["slow", "aslow"])
def test_a_task_over_its_own_time_limit_fails(
    tmp_path: Path, app_module: ModuleType, redis_url: str, task: str
) -> None:
    """The worker has no time limit (``handler_timeout_ms`` 0): only the task's 0.2 s can
    fail the run, sync (its thread runs on, wedged) or async (cancelled)."""
    with running(tmp_path, app_module.__name__, redis_url):
        handle = getattr(app_module, task).enqueue(5.0)
        with pytest.raises(wheelq.JobFailedError) as failed:
            handle.result(timeout=10)
    assert "ran over handler_timeout_ms=200" in str(failed.value), failed.value


async def test_a_task_enqueued_over_http_runs_and_its_result_reads_over_http(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    """Another language's view: the task's topic and its arguments' map as JSON, then the
    result as JSON; the Python handle reads the same result typed."""
    bill, m = app_module.bill, app_module
    order = {"id": str(uuid.UUID(int=9)), "total": "7.50", "placed": "2026-01-02T03:04:05Z"}
    body = {"payload": {"order": order, "address": {"city": "Oslo"}, "tier": "pro"}}
    async with serving(redis_url) as api:
        with running(tmp_path, m.__name__, redis_url):
            status, made, _ = await api.call("POST", f"/v1/topics/{bill.topic}/jobs", body)
            assert status == 201, made

            async def group_made() -> bool:  # a result needs the group the worker makes
                status, groups, _ = await api.call("GET", f"/v1/topics/{bill.topic}/groups")
                return status == 200 and any(g["group"] == "default" for g in groups["groups"])

            await eventually(group_made, timeout_s=20, what="the worker's group")
            path = f"/v1/topics/{bill.topic}/jobs/{made['id']}/result?wait_ms=10000"
            status, got, _ = await api.call("GET", path)
            assert status == 200, got
            receipt = await asyncio.to_thread(wheelq.TaskHandle(bill, made["id"]).result, 10)
    assert got["result"]["order"] == order and got["result"]["tier"] == "pro", got
    assert receipt.order.total == decimal.Decimal("7.50") and receipt.tier is m.Tier.PRO


@pytest.mark.both_servers  # the server restarted (AOF)
def test_tasks_due_across_a_redis_restart_all_return(
    tmp_path: Path, topic: str, server_binary: ServerBinary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of the server (append-only file, fsync always) with tasks due before and
    after it: ``wheelq run`` and the handles ride it out, and every task returns."""
    with dedicated_server(
        server_binary, appendonly=True, extra_args=["--appendfsync", "always"]
    ) as srv:
        monkeypatch.setenv(URL_VARIABLE, srv.url)
        module = write_module(tmp_path, module_name(topic), APP_SOURCE)
        try:
            with running(tmp_path, module.__name__, srv.url):
                handles = [module.send.enqueue_in(i * 0.05, f"{i}@x", n=i) for i in range(60)]
                eventually_sync(
                    lambda: handles[0].info().state == wheelq.JobState.SUCCEEDED,
                    timeout_s=20,
                    what="the first task to run",
                )
                srv.kill()
                srv.restart()
                results = [h.result(timeout=30) for h in handles]
        finally:
            module.app.close()
    assert [r["n"] for r in results] == list(range(60))


async def test_a_tasks_job_shows_its_arguments_and_result_in_the_console(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    """The console's job page, found by the handle's id: the payload is the map of the
    arguments, the group's outcome the function's return value."""
    send = app_module.send
    async with serving(redis_url) as api:
        with running(tmp_path, app_module.__name__, redis_url):
            handle = await send.aenqueue("a@b", n=2)
            got = await handle.aresult(timeout=10)
        url = f"{api.base}/ui/topics/{send.topic}/jobs/{handle.id}"
        async with api.http.get(url) as r:
            page = await r.text()
            assert r.status == 200, page[:2000]
    await send.app.aclose()
    payload = re.search(r'id="payload">(.*?)</pre>', page, re.S)
    outcome = re.search(r'id="group-1-outcome"><code class="result">(.*?)</code>', page, re.S)
    assert payload is not None and outcome is not None, page[:3000]
    assert json.loads(html.unescape(payload[1])) == {"to": "a@b", "n": 2}
    assert json.loads(html.unescape(outcome[1])) == got


def test_wheelq_run_exports_its_schedulers_metrics_beside_its_workers(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    """One process, one /metrics: the worker's families and the node's (its shard gauges and
    the forecast, wheelq_jobs_due), each family named once."""
    send = app_module.send
    port = free_port()
    with running(tmp_path, app_module.__name__, redis_url, "--metrics-port", str(port)):
        send.enqueue_in(600, "later@b", n=1)  # due in ten minutes: in no window
        send.enqueue_in(30, "soon@b", n=1)
        handle = send.enqueue_in(0.1, "now@b", n=1)
        handle.result(timeout=10)

        def scraped() -> dict[str, list[tuple[dict[str, str], float]]] | None:
            samples = _scrape(port)
            due = {
                s[0]["within"]: s[1]
                for s in samples.get("wheelq_jobs_due", [])
                if s[0]["topic"] == send.topic
            }
            return samples if due.get("60") == 1 and due.get("300") == 1 else None

        samples = eventually_sync(scraped, timeout_s=15, what="the node's gauges scraped")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    assert samples is not None
    assert any(s[0]["topic"] == send.topic for s in samples["wheelq_worker_handled_total"])
    assert any(s[0]["topic"] == send.topic for s in samples["wheelq_pending_jobs"])  # the node's
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.cluster_too
def test_a_task_enqueued_at_a_time_is_due_then_and_a_bad_time_is_refused(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    """``enqueue_at`` (an aware datetime) and ``aenqueue_at`` (epoch seconds), and through
    ``options``: each job is due at that time, to the ms, and runs then, never before; a
    naive datetime, text, NaN or milliseconds is refused naming ``at``, nothing written."""
    send, asend = app_module.send, app_module.asend
    for task in (send, asend):
        for bad in (datetime.datetime(2031, 1, 2), "tomorrow", float("nan"), time.time() * 1000):
            with pytest.raises(wheelq.InvalidDelayError) as refused:
                task.enqueue_at(bad, "a@b", n=1)
            assert refused.value.parameter == "at", refused.value

            async def refused_awaited(task: Any = task, bad: Any = bad) -> str:
                try:
                    await task.aenqueue_at(bad, "a@b", n=1)  # type: ignore[arg-type]
                except wheelq.InvalidDelayError as exc:
                    return exc.parameter
                finally:
                    await task.app.aclose()
                return "not refused"

            assert asyncio.run(refused_awaited()) == "at", bad
    with wheelq.Admin.from_url(redis_url) as admin:
        assert not {send.topic, asend.topic} & set(admin.topics())  # nothing written

    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.6)
    at_s = time.time() + 0.7

    async def awaited() -> wheelq.TaskHandle[dict[str, object]]:
        try:
            return await asend.options(job_id="at-2").aenqueue_at(at_s, "c@d", n=2)
        finally:
            await asend.app.aclose()

    handles = [
        (send.enqueue_at(at, "a@b", n=1), at.timestamp() * 1000),
        (asyncio.run(awaited()), at_s * 1000),
    ]
    for handle, due_ms in handles:  # before any worker: pending, due at that time (to the ms)
        info = handle.info()
        assert info.state == wheelq.JobState.PENDING and info.due_ms is not None, info
        assert abs(info.due_ms - due_ms) < 1, (info, due_ms)
    with running(tmp_path, app_module.__name__, redis_url):
        for handle, due_ms in handles:
            got = handle.result(timeout=15)
            assert got["ran_ms"] >= due_ms, (got, due_ms)
    assert handles[1][0].id == "at-2"


def test_wheelq_run_tasks_runs_only_the_tasks_named(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    """``--tasks`` names one task: its jobs run; another task's job, fired into its stream
    by a scheduler node of its topic, is read by no worker of that process (its topic has
    no consumer group) and stays ready."""
    send, asend = app_module.send, app_module.asend
    other = asend.enqueue("x@y", n=1)

    async def other_fired_then_send_ran() -> dict[str, object]:
        scheduler = app_module.app.scheduler([asend.name])  # leads the other task's topic
        await scheduler.start()
        try:
            await eventually(
                lambda: asyncio.to_thread(lambda: other.info().state != wheelq.JobState.PENDING),
                timeout_s=20,
                what="the other task's job to fire",
            )
            handle = await send.aenqueue("a@b", n=2)
            got: dict[str, object] = await handle.aresult(timeout=15)
            return got
        finally:
            await scheduler.stop()
            await app_module.app.aclose()

    with running(tmp_path, app_module.__name__, redis_url, "--tasks", send.name):
        got = asyncio.run(other_fired_then_send_ran())
        with wheelq.Admin.from_url(redis_url) as admin:
            groups = [g.name for g in admin.groups(asend.topic) or []]
            assert [g.name for g in admin.groups(send.topic) or []] == ["default"]
    assert got["n"] == 2
    assert groups == [], groups  # no worker of the other task started
    assert other.info().state == wheelq.JobState.READY


def test_wheelq_run_tasks_given_twice_runs_the_tasks_of_both(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    """``--tasks a --tasks b`` is ``--tasks a,b``: the second does not replace the first."""
    send, asend = app_module.send, app_module.asend
    with running(
        tmp_path, app_module.__name__, redis_url, "--tasks", send.name, "--tasks", asend.name
    ):
        handles = [send.enqueue("a@b", n=1), asend.enqueue("c@d", n=2)]
        got = [h.result(timeout=20) for h in handles]
    assert [g["n"] for g in got] == [1, 2]
