"""Typed tasks end to end (issue 57, item 6): a model argument with a wrong field is refused
at enqueue and nothing is written; a result the worker cannot keep, or that does not fit the
return annotation, fails the job once and never runs the body again; an argument no payload
carries is a `PayloadTypeError`; the worker reads a payload by enqueue's strict rule; a job
of a task's topic gets the task's attempts and backoff however it was written (a plain
client, HTTP). Sync and async bodies, enqueued blocking and awaited, on both servers
(docs/guides/tasks.md)."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

import wheelq
from tests.support import task_types
from tests.support.tasks import URL_VARIABLE, module_name, running, write_module
from tests.support.web import serving
from tests.support.workers import Workers

APP = textwrap.dedent(f"""
    import os

    import wheelq

    app = wheelq.App(
        os.environ["{URL_VARIABLE}"],
        worker=wheelq.WorkerSettings(
            visibility_timeout_ms=1000, claim_interval_ms=200, retry_base_ms=60_000
        ),  # a retry at the worker's backoff would wait a minute: the tasks' own are 20 ms
    )
    FAST = wheelq.RetryPolicy(base_ms=20, max_ms=20, jitter_pct=0)


    def ran(key: str) -> int:
        return app.client.redis.incr(key)


    def unkept(what: str) -> object:
        return {{"object": object(), "large": "x" * 100_000, "set": {{1, 2j}}}}[what]


    @app.task(retry=FAST)
    def keep(key: str, what: str):  # the first run fails, the second returns `what`
        if ran(key) == 1:
            raise RuntimeError("the first run fails")
        return unkept(what)


    @app.task(retry=FAST)
    async def akeep(key: str, what: str):
        if ran(key) == 1:
            raise RuntimeError("the first run fails")
        return unkept(what)


    @app.task(retry=FAST)
    def count(key: str) -> int:
        if ran(key) == 1:
            raise RuntimeError("the first run fails")
        return "three"


    @app.task(retry=FAST)
    async def acount(key: str) -> int:
        if ran(key) == 1:
            raise RuntimeError("the first run fails")
        return "three"


    @app.task
    def double(n: int) -> int:
        return 2 * n


    @app.task
    async def adouble(n: int) -> int:
        return 2 * n


    @app.task(max_attempts=2, retry=FAST)
    def capped(key: str) -> None:
        raise RuntimeError(f"run {{ran(key)}} fails")


    @app.task(max_attempts=2, retry=FAST)
    async def acapped(key: str) -> None:
        raise RuntimeError(f"run {{ran(key)}} fails")


    @app.task
    def ship(address: Address, parcel: Parcel, items: list[Item], order: Order | None = None):
        return len(items)


    @app.task
    def anything(a, b=None):
        return a
""")
APP_SOURCE = task_types.SOURCE + APP


@pytest.fixture
def app_module(
    tmp_path: Path, topic: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    monkeypatch.setenv(URL_VARIABLE, redis_url)
    module = write_module(tmp_path, module_name(topic), APP_SOURCE)
    yield module
    module.app.close()


def enqueued(face: str, task: Any, *args: Any) -> Any:
    """`task`'s job, enqueued blocking (``enqueue``) or awaited (``aenqueue``)."""
    if face == "enqueue":
        return task.enqueue(*args)

    async def awaited() -> Any:
        try:
            return await task.aenqueue(*args)
        finally:
            await task.app.aclose()

    return asyncio.run(awaited())


def written(redis_url: str, *topics: str) -> list[str]:
    """The topics of `topics` wheelq knows of (a refused call writes none)."""
    with wheelq.Admin.from_url(redis_url) as admin:
        return [t for t in topics if t in admin.topics()]


MODEL_FIELDS = [
    ("address", "dataclass", lambda m: m.Address(5), "at address.city"),
    ("parcel", "named tuple", lambda m: m.Parcel("heavy"), "at parcel[0]"),
    ("order", "msgspec.Struct", lambda m: m.Order("no uuid", 1, None), "at order.id"),
    ("items", "list[Struct]", lambda m: [m.Item("a", 1), m.Item("b", "two")], "items[1].quantity"),
]


@pytest.mark.cluster_too
@pytest.mark.parametrize("face", ["enqueue", "aenqueue"])
@pytest.mark.parametrize(("parameter", "kind", "make", "where"), MODEL_FIELDS)
def test_a_model_argument_with_a_wrong_field_is_refused_at_enqueue_and_nothing_is_written(
    app_module: ModuleType,
    redis_url: str,
    face: str,
    parameter: str,
    kind: str,
    make: Callable[[ModuleType], Any],
    where: str,
) -> None:
    """The worker would dead-letter it: enqueue refuses it, naming the task, the parameter
    and the field."""
    m = app_module
    arguments = {"address": m.Address("Oslo"), "parcel": m.Parcel(900), "items": []}
    arguments[parameter] = make(m)
    with pytest.raises(wheelq.InvalidArgumentError) as refused:
        enqueued(face, m.ship, *arguments.values())
    assert refused.value.parameter == parameter, (kind, refused.value)
    text = str(refused.value)
    assert text.startswith(f"{m.ship.name}: argument {parameter!r}: ") and where in text, text
    assert written(redis_url, m.ship.topic) == [], kind


@pytest.mark.cluster_too
@pytest.mark.parametrize("face", ["enqueue", "aenqueue"])
def test_an_argument_no_payload_carries_is_a_payload_type_error_naming_it(
    app_module: ModuleType, redis_url: str, face: str
) -> None:
    """An unannotated parameter takes anything msgpack carries; an object it cannot carry
    is refused as a `PayloadTypeError` (a TypeError) naming the task and the parameter."""
    anything = app_module.anything
    with pytest.raises(wheelq.PayloadTypeError) as refused:
        enqueued(face, anything, 1, {"when": object()})
    assert isinstance(refused.value, TypeError)
    assert str(refused.value).startswith(f"{anything.name}: argument 'b' "), refused.value
    assert written(redis_url, anything.topic) == []


@pytest.mark.parametrize("body", ["def", "async def"])
def test_a_result_the_worker_cannot_keep_fails_the_job_once_and_never_reruns_the_body(
    tmp_path: Path,
    app_module: ModuleType,
    redis_url: str,
    redis_sync: redis.Redis,
    topic: str,
    body: str,
) -> None:
    """Through a retry: the first run raises (retried), the second returns a value that
    cannot be kept (an object; over ``result_max_bytes``; a set msgpack cannot carry) or
    does not fit ``-> int``: that job fails there, with why, and the body ran twice, not
    five times (its max_attempts)."""
    m = app_module
    keep, count = (m.keep, m.count) if body == "def" else (m.akeep, m.acount)
    cases = {
        "object": (keep, "cannot be kept as a result"),
        "large": (keep, "result_max_bytes=65536"),
        "set": (keep, "cannot be kept as a result"),
        "wrong": (count, "does not fit its return annotation int"),
    }
    with running(tmp_path, m.__name__, redis_url):
        handles = {}
        for n, (what, (task, _)) in enumerate(cases.items()):
            args = (f"{topic}:{what}",) + ((what,) if task is keep else ())
            handles[what] = enqueued(("enqueue", "aenqueue")[n % 2], task, *args)
        for what, handle in handles.items():
            with pytest.raises(wheelq.JobFailedError) as failed:
                handle.result(timeout=20)
            error = failed.value.error or ""
            assert "attempt 2 of 5, not retried: ResultTypeError" in error or (
                what == "large" and "attempt 2 of 5, not retried: ResultTooLargeError" in error
            ), (what, error)
            assert cases[what][1] in error, (what, error)
            assert handle.info().state == wheelq.JobState.DEAD, what
    runs = {what: int(redis_sync.get(f"{topic}:{what}") or 0) for what in cases}
    assert runs == dict.fromkeys(cases, 2), runs


def test_a_kept_result_that_does_not_fit_the_annotation_is_a_wheelq_error_naming_the_job(
    app_module: ModuleType, redis_url: str
) -> None:
    """A result kept by another worker (another version of the code, a plain handler on the
    task's topic): `result()` and `aresult()` raise `MalformedJobError` naming the task, the
    job and why, not a bare msgspec error."""
    double = app_module.double

    async def main() -> None:
        pool = Workers(redis_url, double.topic, {"visibility_timeout_ms": 1000})
        try:
            await pool.start(lambda job: {"not": "an int"}, group=double.app.group)
            handle = await double.aenqueue(2)
            with pytest.raises(wheelq.MalformedJobError) as awaited:
                await handle.aresult(timeout=20)
            with pytest.raises(wheelq.MalformedJobError) as blocking:
                await asyncio.to_thread(handle.result, 20)
        finally:
            await pool.close()
            await double.app.aclose()
        for raised in (awaited, blocking):
            text = str(raised.value)
            assert handle.id in text and double.name in text, text
            assert "return annotation int" in text and raised.value.job_id == handle.id, text

    asyncio.run(main())


async def enqueue_over_http(api: Any, topic: str, payload: dict[str, Any]) -> str:
    status, made, _ = await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": payload})
    assert status == 201, made
    return str(made["id"])


async def wait_failed(handle: wheelq.TaskHandle[Any]) -> wheelq.JobFailedError:
    try:
        got = await asyncio.to_thread(handle.result, 20)
    except wheelq.JobFailedError as failed:
        return failed
    raise AssertionError(f"job {handle.id} succeeded with {got!r}")


async def test_the_worker_reads_a_payload_by_enqueues_strict_rule(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    """``"5"`` for ``n: int``, written by a plain client or over HTTP (where enqueue would
    refuse it): dead-lettered at once naming ``n``, never run as 5; a sync and an async
    body."""
    m = app_module
    async with serving(redis_url) as api:
        with running(tmp_path, m.__name__, redis_url):
            handles = []
            for task in (m.double, m.adouble):
                with wheelq.Client.from_url(redis_url) as client:
                    job_id = client.enqueue(task.topic, {"n": "5"})
                handles.append(wheelq.TaskHandle(task, job_id))
                over_http = await enqueue_over_http(api, task.topic, {"n": "5"})
                handles.append(wheelq.TaskHandle(task, over_http))
            for handle in handles:
                failed = await wait_failed(handle)
                assert "attempt 1 of 5, not retried" in (failed.error or ""), failed.error
                assert "argument 'n': Expected `int`, got `str`" in (failed.error or "")
                assert (await asyncio.to_thread(handle.info)).attempt == 1
            fits = await asyncio.to_thread(m.double.enqueue, 5)
            assert await asyncio.to_thread(fits.result, 20) == 10


async def test_a_job_of_a_tasks_topic_gets_the_tasks_attempts_however_written(
    tmp_path: Path, app_module: ModuleType, redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """A task of max_attempts=2 and a 20 ms backoff (the worker's is a minute): a job of
    its topic written by a plain client or over HTTP (each of whose default is 5 attempts)
    runs twice, 20 ms apart, then is dead-lettered; a sync and an async body."""
    m = app_module
    async with serving(redis_url) as api:
        with running(tmp_path, m.__name__, redis_url):
            handles: dict[str, wheelq.TaskHandle[Any]] = {}
            for task in (m.capped, m.acapped):
                key = f"{topic}:{task.name}:client"
                with wheelq.Client.from_url(redis_url) as client:
                    handles[key] = wheelq.TaskHandle(task, client.enqueue(task.topic, {"key": key}))
                key = f"{topic}:{task.name}:http"
                handles[key] = wheelq.TaskHandle(
                    task, await enqueue_over_http(api, task.topic, {"key": key})
                )
            for key, handle in handles.items():
                failed = await wait_failed(handle)
                assert (failed.error or "").startswith("attempt 2 of 2: RuntimeError: run 2 fails")
                info = await asyncio.to_thread(handle.info)
                assert (info.state, info.attempt, info.max_attempts) == (
                    wheelq.JobState.DEAD,
                    2,
                    2,
                ), key
    runs = {key: int(redis_sync.get(key) or 0) for key in handles}
    assert runs == dict.fromkeys(handles, 2), runs
