"""`App.eager`: tasks run inline, at once, in the caller's thread, with no Redis (the app's
URL is a closed port: a call that reached for Redis would fail), their arguments and results
through the same checks and encoding as a job in Redis; retries inline; per context; a
task enqueued with ``outbox=`` a SQLAlchemy session on SQLite runs on commit, never on
rollback (docs/guides/testing.md, "Eager mode")."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

import wheelq
from wheelq.core.history import JobState
from wheelq.core.payload import MAX_PAYLOAD_DEPTH
from wheelq.core.retry import Defer, Fail, Retry
from wheelq.core.settings import ClientSettings, WorkerSettings
from wheelq.tasks import eager as eager_module

URL = "redis://127.0.0.1:1/0"  # nothing listens there


@dataclasses.dataclass
class Receipt:
    to: str
    copies: int
    at: datetime.datetime


app = wheelq.App(URL, client=ClientSettings(max_payload_bytes=1024))
ran: list[dict[str, Any]] = []
"""What each run saw: its thread, loop and `current_job()`."""


def _seen(**extra: Any) -> None:
    job = wheelq.current_job()
    try:
        loop: object = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    ran.append({"thread": threading.get_ident(), "loop": loop, "job": job, **extra})


@app.task
def send_email(to: str, n: int) -> Receipt:
    _seen(to=to)
    return Receipt(to, n, datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))


@app.task
async def asend_email(to: str, n: int) -> Receipt:
    await asyncio.sleep(0)
    _seen(to=to)
    return Receipt(to, n, datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))


@app.task(max_attempts=3)
def flaky(until: int) -> int:
    _seen()
    attempt = wheelq.current_job().attempt
    if attempt < until:
        raise Retry(3600, f"attempt {attempt} retries in an hour")  # not waited for
    return attempt


@app.task(max_attempts=2)
def broken(why: str) -> None:
    _seen()
    raise RuntimeError(why)


@app.task(max_attempts=5)
def refuses(why: str) -> None:
    _seen()
    raise Fail(why)


@app.task
def defers() -> None:
    _seen()
    raise Defer(60)


@app.task
def wrong_result() -> int:
    _seen()
    return "not an int"  # type: ignore[return-value]


@app.task
def anything(value: Any) -> Any:
    return value


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    ran.clear()
    yield
    app.close()  # a test's call without eager makes a client (never connected)


def test_done_when_a_delayed_task_runs_at_once_with_no_redis() -> None:
    started = time.monotonic()
    with app.eager():
        receipt = send_email.enqueue_in(60, "a@b", n=2).result(timeout=1)
    assert time.monotonic() - started < 1.0  # "at once": well inside the 60 s delay
    assert app._client is None and not app._aclients  # no client made: nothing reached Redis
    assert receipt == Receipt("a@b", 2, datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))


def test_every_sync_form_runs_inline_in_the_callers_thread() -> None:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30)
    with app.eager():
        handles = [
            send_email.enqueue("now@b", n=1),
            send_email.enqueue_in(datetime.timedelta(hours=1), "in@b", n=2),
            send_email.enqueue_at(when, "at@b", n=3),
            send_email.options(job_id="mine-1", max_attempts=2).enqueue_in(5, "opt@b", n=4),
        ]
        assert [r["to"] for r in ran] == ["now@b", "in@b", "at@b", "opt@b"]  # each ran already
    assert {r["thread"] for r in ran} == {threading.get_ident()}
    assert [h.result(timeout=0).copies for h in handles] == [1, 2, 3, 4]
    own = ran[3]["job"]
    assert (handles[3].id, own.id, own.max_attempts, own.attempt) == ("mine-1",) * 2 + (2, 1)
    assert own.topic == send_email.topic
    assert abs(ran[2]["job"].due_ms - when.timestamp() * 1000) <= 1  # when it would be due
    with pytest.raises(wheelq.NoCurrentJobError):
        wheelq.current_job()  # only during a run


async def test_the_awaited_forms_run_async_tasks_on_the_callers_loop() -> None:
    loop = asyncio.get_running_loop()
    with app.eager():
        handles = [
            await asend_email.aenqueue("now@b", n=1),
            await asend_email.aenqueue_in(3600, "in@b", n=2),
            await asend_email.aenqueue_at(time.time() + 3600, "at@b", n=3),
            await send_email.options(job_id="mine-2").aenqueue("sync@b", n=4),
        ]
    assert [r["loop"] for r in ran] == [loop, loop, loop, loop]  # a sync task: in line too
    assert {r["thread"] for r in ran} == {threading.get_ident()}
    assert [(await h.aresult(timeout=0)).copies for h in handles] == [1, 2, 3, 4]
    assert handles[3].id == "mine-2"
    assert not await handles[0].acancel() and (await handles[0].ainfo()).state == "succeeded"


def test_the_sync_form_of_an_async_task_runs_it_in_a_loop_of_its_own() -> None:
    with app.eager():
        receipt = asend_email.enqueue_in(60, "sync@b", n=5).result(timeout=1)
    assert receipt.copies == 5 and ran[0]["loop"] is not None
    assert ran[0]["thread"] == threading.get_ident()


async def test_the_sync_form_of_an_async_task_inside_a_loop_says_to_await_the_a_form() -> None:
    with app.eager(), pytest.raises(wheelq.EagerModeError, match="aenqueue"):
        asend_email.enqueue("x@b", n=1)
    assert ran == []


def test_a_failing_task_raises_job_failed_after_its_attempts() -> None:
    with app.eager():
        handle = broken.enqueue("the disk is full")
    with pytest.raises(wheelq.JobFailedError, match="the disk is full") as failed:
        handle.result(timeout=0)
    assert failed.value.state == "dead" and failed.value.job_id == handle.id
    assert "RuntimeError: the disk is full" in (failed.value.error or "")
    assert [r["job"].attempt for r in ran] == [1, 2]  # max_attempts=2, no wait between
    info = handle.info()
    assert (info.state, info.attempt, info.max_attempts) == (JobState.DEAD, 2, 2)


def test_a_job_past_its_expiry_never_runs_and_says_expired_one_within_it_runs() -> None:
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    with app.eager():
        late = send_email.options(expires=past).enqueue("a@b", n=1)
        timely = send_email.options(expires=30).enqueue_in(60, "c@d", n=1)
    with pytest.raises(wheelq.JobFailedError) as failed:
        late.result(timeout=0)
    assert (failed.value.state, failed.value.reason) == ("expired", "expired")
    assert late.info().state == JobState.EXPIRED
    assert [r["to"] for r in ran] == ["c@d"]  # the expired one never ran
    assert timely.result(timeout=0).to == "c@d"
    assert ran[0]["job"].expires is not None


def test_a_retry_runs_the_next_attempt_at_once_and_current_job_says_attempt_2() -> None:
    started = time.monotonic()
    with app.eager():
        handle = flaky.enqueue(2)
    assert time.monotonic() - started < 1.0  # the Retry's hour is not waited for
    assert handle.result(timeout=0) == 2
    jobs = [r["job"] for r in ran]
    assert [j.attempt for j in jobs] == [1, 2] and {j.id for j in jobs} == {handle.id}
    assert jobs[1].group == app.group  # a retry is its group's, as in a worker


def test_fail_and_a_result_that_does_not_fit_end_the_job_at_once() -> None:
    with app.eager():
        refused, wrong = refuses.enqueue("no such user"), wrong_result.enqueue()
    with pytest.raises(wheelq.JobFailedError, match="no such user"):
        refused.result(timeout=0)
    with pytest.raises(wheelq.JobFailedError, match="ResultTypeError"):
        wrong.result(timeout=0)
    assert len(ran) == 2  # one run each: neither is retried


def test_a_task_that_always_defers_is_failed_after_max_deferrals() -> None:
    with app.eager():
        handle = defers.enqueue()
    with pytest.raises(wheelq.JobFailedError, match="deferred more than"):
        handle.result(timeout=0)
    assert len(ran) == eager_module.MAX_DEFERRALS + 1
    assert {r["job"].attempt for r in ran} == {1}  # a deferral counts no attempt


def test_a_result_over_result_max_bytes_fails_the_job_as_in_a_worker() -> None:
    small = wheelq.App(URL, worker=WorkerSettings(result_max_bytes=16))
    big = small.task(name="big")(anything.fn)
    with small.eager():
        handle = big.enqueue("x" * 100)
    with pytest.raises(wheelq.JobFailedError, match="result_max_bytes=16"):
        handle.result(timeout=0)


@pytest.mark.parametrize(
    ("argument", "error"),
    [
        (object(), wheelq.PayloadTypeError),  # the task's codec refuses it
        ("x" * 2000, wheelq.PayloadTooLargeError),  # over the client's max_payload_bytes
    ],
)
def test_an_argument_fails_to_enqueue_as_it_does_without_eager(
    argument: object, error: type[Exception]
) -> None:
    with pytest.raises(error) as plain:
        anything.enqueue(argument)  # no Redis: refused before any connection
    with app.eager(), pytest.raises(error) as eager:
        anything.enqueue(argument)
    assert (type(eager.value), str(eager.value)) == (type(plain.value), str(plain.value))
    assert ran == []


def test_a_payload_too_deep_fails_to_enqueue_as_it_does_without_eager() -> None:
    deep: list[Any] = []
    for _ in range(MAX_PAYLOAD_DEPTH + 1):
        deep = [deep]
    with pytest.raises(wheelq.PayloadTooDeepError) as plain:
        anything.enqueue(deep)
    with app.eager(), pytest.raises(wheelq.PayloadTooDeepError) as eager:
        anything.enqueue(deep)
    assert str(eager.value) == str(plain.value)


def test_a_bad_argument_or_option_fails_as_it_does_without_eager() -> None:
    with app.eager():
        with pytest.raises(wheelq.InvalidArgumentError, match="'n'"):
            send_email.enqueue("a@b", n="2")  # type: ignore[arg-type]
        with pytest.raises(wheelq.InvalidDelayError):
            send_email.enqueue_in(-1, "a@b", n=2)
        with pytest.raises(wheelq.InvalidArgumentError, match="ack"):
            send_email.options(ack="sometimes").enqueue("a@b", n=2)
    assert ran == []


def test_the_handle_of_an_eager_job_cannot_be_cancelled_or_moved() -> None:
    with app.eager():
        handle = send_email.enqueue_in(60, "a@b", n=2)
    assert handle.cancel() is False and handle.reschedule(delay=5) is False
    info = handle.info()
    assert (info.state, info.attempt, info.payload) == ("succeeded", 1, {"to": "a@b", "n": 2})
    assert info.due_ms is not None and info.enqueued_ms is not None
    assert info.due_ms - info.enqueued_ms == 60_000


def test_eager_mode_nests_and_is_per_context_and_per_app() -> None:
    other = wheelq.App(URL)
    seen: list[bool] = []
    with app.eager():
        with app.eager():
            assert app.is_eager
        assert app.is_eager and not other.is_eager  # leaving the inner block keeps the outer
        thread = threading.Thread(target=lambda: seen.append(app.is_eager))
        thread.start()
        thread.join()
    assert not app.is_eager and seen == [False]  # a thread of its own is not in the block


async def test_eager_mode_is_per_asyncio_task() -> None:
    entered, checked = asyncio.Event(), asyncio.Event()

    async def inside() -> bool:
        with app.eager():
            entered.set()
            await checked.wait()
            return app.is_eager

    task = asyncio.create_task(inside())
    await entered.wait()
    outside = app.is_eager
    checked.set()
    assert (await task, outside) == (True, False)


# --- the outbox: SQLAlchemy on SQLite ------------------------------------------------------


@pytest.fixture
def engine() -> Iterator[Any]:
    made = create_engine("sqlite://")
    with made.begin() as conn:
        conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY)"))
    yield made
    made.dispose()


def test_an_outbox_task_runs_when_its_session_commits_never_on_rollback(engine: Any) -> None:
    with app.eager():
        with Session(engine) as session:
            kept = send_email.options(outbox=session).enqueue_in(60, "kept@b", n=1)
            assert ran == [] and kept.info().state == "pending"
            with pytest.raises(wheelq.ResultTimeoutError):
                kept.result(timeout=0)
            session.commit()
        assert [r["to"] for r in ran] == ["kept@b"] and kept.result(timeout=0).copies == 1

        with Session(engine) as session:
            dropped = send_email.options(outbox=session).enqueue("dropped@b", n=2)
            session.rollback()
            session.commit()  # a later commit of the session runs nothing rolled back
        with Session(engine) as session:
            send_email.options(outbox=session).enqueue("closed@b", n=3)  # closed uncommitted
    assert [r["to"] for r in ran] == ["kept@b"]
    with pytest.raises(wheelq.ResultTimeoutError):
        dropped.result(timeout=0)


def test_an_outbox_task_in_a_savepoint_rolled_back_never_runs(engine: Any) -> None:
    with app.eager(), Session(engine) as session:
        send_email.options(outbox=session).enqueue("outer@b", n=1)
        nested = session.begin_nested()
        send_email.options(outbox=session).enqueue("inner@b", n=2)
        nested.rollback()
        nested = session.begin_nested()
        send_email.options(outbox=session).enqueue("released@b", n=3)
        nested.commit()
        assert ran == []
        session.commit()
    assert [r["to"] for r in ran] == ["outer@b", "released@b"]


def test_a_sqlalchemy_connection_is_refused_in_eager_mode(engine: Any) -> None:
    with (
        app.eager(),
        engine.connect() as conn,
        pytest.raises(wheelq.EagerModeError, match="Session"),
    ):
        send_email.options(outbox=conn).enqueue("a@b", n=1)
    assert ran == []


def test_the_outbox_on_sqlite_without_eager_says_the_tables_are_missing(engine: Any) -> None:
    with Session(engine) as session, pytest.raises(wheelq.errors.OutboxNotInstalledError) as e:
        send_email.options(outbox=session).enqueue("a@b", n=1)
    assert "sqlite" in str(e.value) and "app.eager()" in str(e.value)
    with engine.connect() as conn, pytest.raises(wheelq.errors.OutboxNotInstalledError):
        wheelq.outbox.enqueue(conn, "t", {"a": 1})
