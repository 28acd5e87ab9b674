"""`outbox.enqueue` and `once` on every connection they promise to take (docs/guides/outbox.md,
"Connections"): psycopg 3 sync and async, SQLAlchemy 2's `Connection`, `Session` and their
async forms, Django's connection (its migration too), and a task's ``options(outbox=)``.
Each face: a commit writes the row, a rollback writes none, `once` answers True once and
refuses a connection outside a transaction.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import wheelq
from tests.support.cli import PYTHON, clean_env
from wheelq import Job, outbox
from wheelq.errors import InvalidDelayError, NotInTransactionError, UnsupportedConnectionError

Opener = Callable[[str, bool], AbstractAsyncContextManager[Any]]
"""(dsn, autocommit) -> a connection in a transaction (autocommit False) or outside one."""


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    outbox.install(postgres_dsn)
    return postgres_dsn


def _sqlalchemy_url(dsn: str, driver: str = "psycopg") -> str:
    return dsn.replace("postgresql://", f"postgresql+{driver}://", 1)


@asynccontextmanager
async def psycopg_sync(dsn: str, autocommit: bool) -> AsyncIterator[Any]:
    with psycopg.connect(dsn, autocommit=autocommit) as conn:
        yield conn


@asynccontextmanager
async def psycopg_async(dsn: str, autocommit: bool) -> AsyncIterator[Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit) as conn:
        yield conn


def _engine(dsn: str, autocommit: bool) -> Any:
    level = {"isolation_level": "AUTOCOMMIT"} if autocommit else {}
    return create_engine(_sqlalchemy_url(dsn), **level)


def _async_engine(dsn: str, autocommit: bool) -> Any:
    level = {"isolation_level": "AUTOCOMMIT"} if autocommit else {}
    return create_async_engine(_sqlalchemy_url(dsn), **level)


@asynccontextmanager
async def sqlalchemy_connection(dsn: str, autocommit: bool) -> AsyncIterator[Any]:
    engine = _engine(dsn, autocommit)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


@asynccontextmanager
async def sqlalchemy_session(dsn: str, autocommit: bool) -> AsyncIterator[Any]:
    engine = _engine(dsn, autocommit)
    try:
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()


@asynccontextmanager
async def sqlalchemy_async_connection(dsn: str, autocommit: bool) -> AsyncIterator[Any]:
    engine = _async_engine(dsn, autocommit)
    try:
        async with engine.connect() as conn:
            yield conn
    finally:
        await engine.dispose()


@asynccontextmanager
async def sqlalchemy_async_session(dsn: str, autocommit: bool) -> AsyncIterator[Any]:
    engine = _async_engine(dsn, autocommit)
    try:
        async with AsyncSession(engine) as session:
            yield session
    finally:
        await engine.dispose()


FACES: dict[str, tuple[Opener, bool]] = {  # name: (opener, async)
    "psycopg": (psycopg_sync, False),
    "psycopg-async": (psycopg_async, True),
    "sqlalchemy-connection": (sqlalchemy_connection, False),
    "sqlalchemy-session": (sqlalchemy_session, False),
    "sqlalchemy-async-connection": (sqlalchemy_async_connection, True),
    "sqlalchemy-async-session": (sqlalchemy_async_session, True),
}


async def _enqueue(conn: Any, is_async: bool, topic: str, payload: Any) -> str:
    if is_async:
        return await outbox.aenqueue(conn, topic, payload, delay=5)
    return outbox.enqueue(conn, topic, payload, delay=5)


async def _once(conn: Any, is_async: bool, job: Job) -> bool:
    if is_async:
        return await outbox.aonce(conn, job)
    return outbox.once(conn, job)


async def _finish(conn: Any, is_async: bool, commit: bool) -> None:
    end = conn.commit if commit else conn.rollback
    if is_async:
        await end()
    else:
        end()


def outbox_rows(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return [(t, j) for t, j in conn.execute("SELECT topic, job_id FROM wheelq_outbox")]


def _job(topic: str, n: int) -> Job:
    return Job(id=f"01M8DRIVER{n:016d}", topic=topic, payload=None, due_ms=0, attempt=1,
               max_attempts=1)  # fmt: skip


@pytest.mark.parametrize("face", list(FACES))
async def test_a_commit_writes_the_job_and_a_rollback_writes_none(
    dsn: str, topic: str, face: str
) -> None:
    opener, is_async = FACES[face]
    async with opener(dsn, False) as conn:
        kept = await _enqueue(conn, is_async, topic, {"kept": True})
        await _finish(conn, is_async, commit=True)
        lost = await _enqueue(conn, is_async, topic, {"kept": False})
        await _finish(conn, is_async, commit=False)
    assert outbox_rows(dsn) == [(topic, kept)]
    assert lost != kept


@pytest.mark.parametrize("face", list(FACES))
async def test_once_answers_true_once_per_job_across_transactions(
    dsn: str, topic: str, face: str
) -> None:
    opener, is_async = FACES[face]
    job = _job(topic, 1)
    async with opener(dsn, False) as conn:
        first = await _once(conn, is_async, job)
        await _finish(conn, is_async, commit=True)
        again = await _once(conn, is_async, job)
        await _finish(conn, is_async, commit=True)
        other = await _once(conn, is_async, _job(topic, 2))
        await _finish(conn, is_async, commit=False)  # rolled back: not recorded
        after_rollback = await _once(conn, is_async, _job(topic, 2))
        await _finish(conn, is_async, commit=True)
    assert (first, again, other, after_rollback) == (True, False, True, True)


@pytest.mark.parametrize("face", list(FACES))
async def test_once_outside_a_transaction_is_refused(dsn: str, topic: str, face: str) -> None:
    opener, is_async = FACES[face]
    async with opener(dsn, True) as conn:
        with pytest.raises(NotInTransactionError) as info:
            await _once(conn, is_async, _job(topic, 3))
    assert info.value.parameter == "conn"
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM wheelq_outbox_done").fetchone() == (0,)


@pytest.mark.parametrize("face", list(FACES))
async def test_the_other_modes_call_is_refused_naming_the_right_one(
    dsn: str, topic: str, face: str
) -> None:
    opener, is_async = FACES[face]
    async with opener(dsn, False) as conn:
        with pytest.raises(UnsupportedConnectionError, match="aenqueue" if is_async else "enqueue"):
            if is_async:
                outbox.enqueue(conn, topic, 1)
            else:
                await outbox.aenqueue(conn, topic, 1)
    assert outbox_rows(dsn) == []


BAD_DELAYS = {  # delay: what the error says it accepts
    "nan": (float("nan"), "a finite number of seconds >= 0 and <= 315360000"),
    "inf": (float("inf"), "a finite number of seconds >= 0 and <= 315360000"),
    "negative": (-1, "a finite number of seconds >= 0 and <= 315360000"),
    "a str": ("5", "seconds (int, float) or a timedelta"),
}


@pytest.mark.parametrize("bad", list(BAD_DELAYS))
@pytest.mark.parametrize("face", list(FACES))
async def test_a_bad_delay_is_refused_naming_it_and_writes_nothing(
    dsn: str, topic: str, face: str, bad: str
) -> None:
    opener, is_async = FACES[face]
    delay, accepted = BAD_DELAYS[bad]
    async with opener(dsn, False) as conn:
        with pytest.raises(InvalidDelayError, match=f"delay must be {re.escape(accepted)}") as info:
            if is_async:
                await outbox.aenqueue(conn, topic, {"x": 1}, delay=delay)
            else:
                outbox.enqueue(conn, topic, {"x": 1}, delay=delay)
        await _finish(conn, is_async, commit=True)  # a row written would now be there
    assert info.value.parameter == "delay"
    assert outbox_rows(dsn) == []


@pytest.mark.parametrize("bad", list(BAD_DELAYS))
async def test_a_tasks_bad_delay_in_the_outbox_is_refused_and_writes_nothing(
    dsn: str, topic: str, bad: str
) -> None:
    app = wheelq.App.from_url("redis://127.0.0.1:1/0")  # never reached: the outbox writes

    @app.task(topic=topic)
    def add(a: int, b: int) -> int:
        return a + b

    delay, accepted = BAD_DELAYS[bad]
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        with pytest.raises(InvalidDelayError, match=re.escape(accepted)) as info:
            await add.options(outbox=aconn).aenqueue_in(delay, 1, 2)  # type: ignore[arg-type]
        await aconn.commit()
    with psycopg.connect(dsn) as conn:
        with pytest.raises(InvalidDelayError, match=re.escape(accepted)):
            add.options(outbox=conn).enqueue_in(delay, 1, 2)  # type: ignore[arg-type]
        conn.commit()
    assert info.value.parameter == "delay"
    assert outbox_rows(dsn) == []


@pytest.mark.parametrize("thing", [None, "postgresql://x", object(), 42])
def test_something_that_is_no_connection_is_refused(topic: str, thing: object) -> None:
    with pytest.raises(UnsupportedConnectionError, match="psycopg 3 connection"):
        outbox.enqueue(thing, topic, {"x": 1})


# --- a task's options(outbox=) --------------------------------------------------------------


async def test_a_task_enqueues_in_the_transaction_it_is_given(dsn: str, topic: str) -> None:
    app = wheelq.App.from_url("redis://127.0.0.1:1/0")  # never reached: the outbox writes

    @app.task(topic=topic)
    def add(a: int, b: int) -> int:
        return a + b

    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            kept = add.options(outbox=conn).enqueue_in(5, 1, b=2)
        with pytest.raises(ZeroDivisionError), conn.transaction():
            add.options(outbox=conn).enqueue(3, 4)
            _ = 1 / 0
        with pytest.raises(wheelq.InvalidArgumentError):  # checked before the row is written
            add.options(outbox=conn).enqueue("one", 2)  # type: ignore[arg-type]
    async with await psycopg.AsyncConnection.connect(dsn) as aconn, aconn.transaction():
        awaited = await add.options(outbox=aconn).aenqueue(5, 6)
    assert sorted(outbox_rows(dsn)) == sorted([(topic, kept.id), (topic, awaited.id)])
    with pytest.raises(wheelq.InvalidArgumentError, match="ack"):
        add.options(outbox=conn, ack="persisted")


# --- Django ---------------------------------------------------------------------------------

DJANGO = """
    import json, os, sys
    import django
    from django.conf import settings

    db = json.loads(os.environ["DB"])
    settings.configure(
        INSTALLED_APPS=["wheelq.contrib.django"],
        WHEELQ={"APP": "outbox_tasks:app", "URL": "redis://127.0.0.1:1/0"},  # never reached
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", **db}},
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from wheelq import Job, outbox
    from wheelq.errors import NotInTransactionError

    call_command("migrate", "wheelq", verbosity=0)
    topic = sys.argv[1]
    with transaction.atomic():
        kept = outbox.enqueue(connection, topic, {"kept": True})
    try:
        with transaction.atomic():
            outbox.enqueue(connection, topic, {"kept": False})
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    job = Job(id="01M8DJANGO0000000000000001", topic=topic, payload=None, due_ms=0,
              attempt=1, max_attempts=1)
    try:
        outbox.once(connection, job)
        refused = False
    except NotInTransactionError:
        refused = True
    with transaction.atomic():
        first = outbox.once(connection, job)
    with transaction.atomic():
        again = outbox.once(connection, job)
    bad = {}  # each bad delay: the error's type, parameter and message
    for delay in (float("nan"), float("inf"), -1, "5"):
        with transaction.atomic():
            try:
                outbox.enqueue(connection, topic, {"bad": True}, delay=delay)
                bad[repr(delay)] = None
            except Exception as exc:
                bad[repr(delay)] = [type(exc).__name__, getattr(exc, "parameter", ""), str(exc)]
    print(json.dumps({"kept": kept, "refused": refused, "first": first, "again": again,
                      "bad": bad}))
"""


def test_django_migrates_the_tables_and_enqueues_in_its_atomic_block(
    postgres_dsn: str, topic: str, tmp_path: Path
) -> None:
    info = conninfo_to_dict(postgres_dsn)
    db = {
        "NAME": info["dbname"],
        "USER": info.get("user", ""),
        "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", ""),
        "PORT": str(info.get("port", "")),
    }
    script = tmp_path / "django_outbox.py"
    script.write_text(textwrap.dedent(DJANGO))
    (tmp_path / "outbox_tasks.py").write_text(
        "import wheelq\n\napp = wheelq.App.from_url('redis://127.0.0.1:1/0')\n"
    )
    done = subprocess.run(
        [PYTHON, str(script), topic],
        cwd=tmp_path,
        env=clean_env({"DB": json.dumps(db), "PYTHONPATH": str(tmp_path)}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    bad = said.pop("bad")
    assert said == {"kept": said["kept"], "refused": True, "first": True, "again": False}
    assert outbox_rows(postgres_dsn) == [(topic, said["kept"])]  # no row of a bad delay
    for delay, (_, accepted) in zip(["nan", "inf", "-1", "'5'"], BAD_DELAYS.values(), strict=True):
        kind, parameter, message = bad[delay]
        assert (kind, parameter) == ("InvalidDelayError", "delay"), bad[delay]
        assert f"delay must be {accepted}" in message, message
