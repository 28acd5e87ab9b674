"""`App.eager` with the outbox, on real databases and no Redis (the apps' URLs are a closed
port): Django on SQLite (a task enqueued in ``transaction.atomic()`` runs on commit, never on
rollback nor in a savepoint rolled back; a view run through Django's test client, Celery's
``task_always_eager`` case; without eager mode the outbox says `OutboxNotInstalledError`
naming eager mode, not SQLite's "no such table"), and PostgreSQL with no outbox tables
(psycopg, SQLAlchemy's `Session` and `AsyncSession`) (docs/guides/testing.md, "Eager mode";
docs/guides/outbox.md, "Eager mode")."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import wheelq
from tests.support.cli import PYTHON, clean_env
from tests.support.docs import argv_of, snippets

URL = "redis://127.0.0.1:1/0"  # nothing listens there


def _run_in(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`argv` run in `folder`, its modules importable (and this tree's wheelq)."""
    path = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    env = clean_env({"PYTHONPATH": path})
    return subprocess.run(
        argv, cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_testing_guide_eager_mode_passes_as_written(tmp_path: Path) -> None:
    """The testing guide's eager mode test file passes under the command it shows, its
    app's URL a closed port."""
    found = snippets("docs/guides/testing.md", "Eager mode", URL)
    assert list(found.files) == ["test_signup.py"]
    assert found.commands == [["python", "-m", "pytest", "-q", "test_signup.py"]]
    (tmp_path / "test_signup.py").write_text(found.files["test_signup.py"])
    done = _run_in(tmp_path, argv_of(found.commands[0]))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "4 passed" in done.stdout, done.stdout


# --- Django on SQLite -----------------------------------------------------------------------

TASKS = """
    import wheelq

    app = wheelq.App.from_url("redis://127.0.0.1:1/0")  # nothing there
    ran = []


    @app.task
    def send_email(to: str, n: int) -> dict:
        ran.append(to)
        return {"sent": to, "copies": n, "attempt": wheelq.current_job().attempt}
"""

URLS = """
    from django.db import connection, transaction
    from django.http import JsonResponse
    from django.urls import path

    from eager_tasks import send_email


    def send(request):
        handle = send_email.enqueue_in(60, request.GET["to"], n=int(request.GET["n"]))
        return JsonResponse({"id": handle.id, "result": handle.result(timeout=1)})


    def signup(request):
        with transaction.atomic():
            handle = send_email.options(outbox=connection).enqueue(request.GET["to"], n=1)
        return JsonResponse({"id": handle.id, "result": handle.result(timeout=1)})


    async def asend(request):  # an async view: the test client runs it in a loop of its own
        handle = await send_email.aenqueue_in(60, request.GET["to"], n=3)
        return JsonResponse({"id": handle.id, "result": await handle.aresult(timeout=1)})


    urlpatterns = [path("send", send), path("signup", signup), path("asend", asend)]
"""

DJANGO = """
    import json
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["wheelq.contrib.django"],
        WHEELQ={"APP": "eager_tasks:app", "URL": "redis://127.0.0.1:1/0"},  # never reached
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        ROOT_URLCONF="eager_urls",
        ALLOWED_HOSTS=["testserver"],
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import Client

    import wheelq
    from wheelq import outbox
    from eager_tasks import app, ran, send_email

    call_command("migrate", "wheelq", verbosity=0)  # on SQLite: no tables
    said = {}
    for name, enqueue in [
        ("outbox.enqueue", lambda: outbox.enqueue(connection, "t", {"a": 1})),
        ("options(outbox=)", lambda: send_email.options(outbox=connection).enqueue("x", n=1)),
    ]:
        try:
            with transaction.atomic():
                enqueue()
            said[name] = None
        except Exception as exc:
            said[name] = [type(exc).__name__, str(exc)]

    with app.eager():
        with transaction.atomic():
            kept = send_email.options(outbox=connection).enqueue_in(60, "kept", n=1)
            said["before commit"] = list(ran)
        said["after commit"] = list(ran)
        try:
            with transaction.atomic():
                send_email.options(outbox=connection).enqueue("rolled back", n=2)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        with transaction.atomic():
            send_email.options(outbox=connection).enqueue("outer", n=3)
            try:
                with transaction.atomic():  # a savepoint
                    send_email.options(outbox=connection).enqueue("savepoint", n=4)
                    raise RuntimeError("roll the savepoint back")
            except RuntimeError:
                pass
        send_email.options(outbox=connection).enqueue("autocommit", n=5)  # at once
        said["ran"] = list(ran)
        said["kept"] = kept.result(timeout=0)
        client = Client()
        said["view"] = client.get("/send", {"to": "ada@example.com", "n": 2}).json()
        said["signup"] = client.get("/signup", {"to": "bob@example.com"}).json()
        said["async view"] = client.get("/asend", {"to": "cy@example.com"}).json()
    said["client made"] = app._client is not None or len(app._aclients) > 0
    print(json.dumps(said))
"""


def test_django_on_sqlite_eager_runs_on_commit_and_a_view_gets_its_result(
    tmp_path: Path,
) -> None:
    for name, text in [("eager_tasks", TASKS), ("eager_urls", URLS), ("script", DJANGO)]:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    done = _run_in(tmp_path, [PYTHON, str(tmp_path / "script.py")])
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("outbox.enqueue", "options(outbox=)"):  # without eager mode
        kind, message = said[name]
        assert kind == "OutboxNotInstalledError", said[name]
        assert "sqlite" in message and "app.eager()" in message, message
    assert (said["before commit"], said["after commit"]) == ([], ["kept"])
    assert said["ran"] == ["kept", "outer", "autocommit"]  # never what rolled back
    assert said["kept"] == {"sent": "kept", "copies": 1, "attempt": 1}
    assert said["view"]["result"] == {"sent": "ada@example.com", "copies": 2, "attempt": 1}
    assert said["signup"]["result"] == {"sent": "bob@example.com", "copies": 1, "attempt": 1}
    assert said["async view"]["result"] == {"sent": "cy@example.com", "copies": 3, "attempt": 1}
    assert said["client made"] is False  # no Redis client was ever made


# --- PostgreSQL, with no outbox tables ------------------------------------------------------

app = wheelq.App(URL)
ran: list[tuple[str, object]] = []


@app.task
def sync_task(name: str) -> str:
    ran.append((name, None))
    return name


@app.task
async def async_task(name: str) -> str:
    ran.append((name, asyncio.get_running_loop()))
    return name


@pytest.fixture(autouse=True)
def clean() -> None:
    ran.clear()


def _sqlalchemy(dsn: str) -> str:
    return dsn.replace("postgresql://", "postgresql+psycopg://", 1)


def test_psycopg_runs_at_once_outside_a_transaction_and_refuses_inside_one(
    postgres_dsn: str,
) -> None:
    with app.eager(), psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert sync_task.options(outbox=conn).enqueue("autocommit").result(timeout=0)
        with conn.transaction(), pytest.raises(wheelq.EagerModeError, match="psycopg"):
            sync_task.options(outbox=conn).enqueue("in a transaction")
    with (
        app.eager(),
        psycopg.connect(postgres_dsn) as conn,  # its first statement would begin one
        pytest.raises(wheelq.EagerModeError, match="autocommit"),
    ):
        sync_task.options(outbox=conn).enqueue("implicit")
    assert ran == [("autocommit", None)]


def test_a_sqlalchemy_session_on_postgresql_runs_on_commit_never_on_rollback(
    postgres_dsn: str,
) -> None:
    engine = create_engine(_sqlalchemy(postgres_dsn))
    try:
        with app.eager():
            with Session(engine) as session:
                kept = sync_task.options(outbox=session).enqueue_in(60, "kept")
                assert ran == []
                session.commit()
            with Session(engine) as session:
                sync_task.options(outbox=session).enqueue("rolled back")
                session.rollback()
    finally:
        engine.dispose()
    assert ran == [("kept", None)] and kept.result(timeout=0) == "kept"


async def test_an_async_session_runs_an_async_task_on_its_loop_after_commit(
    postgres_dsn: str,
) -> None:
    engine = create_async_engine(_sqlalchemy(postgres_dsn))
    loop = asyncio.get_running_loop()
    try:
        with app.eager():
            async with AsyncSession(engine) as session:
                kept = await async_task.options(outbox=session).aenqueue_in(60, "kept")
                plain = await sync_task.options(outbox=session).aenqueue("sync")
                assert ran == []
                await session.commit()
            assert await kept.aresult(timeout=5) == "kept"  # scheduled on this loop
            assert await plain.aresult(timeout=0) == "sync"
            async with AsyncSession(engine) as session:
                await async_task.options(outbox=session).aenqueue("rolled back")
                await session.rollback()
    finally:
        await engine.dispose()
    assert sorted(ran, key=lambda r: r[0]) == [("kept", loop), ("sync", None)]


def test_sync_form_of_async_task_in_sync_session_commit_runs_in_a_loop_of_its_own(
    postgres_dsn: str,
) -> None:
    engine = create_engine(_sqlalchemy(postgres_dsn))
    try:
        with app.eager(), Session(engine) as session:
            handle: Any = async_task.options(outbox=session).enqueue("sync commit")
            session.commit()
    finally:
        engine.dispose()
    assert handle.result(timeout=0) == "sync commit" and ran[0][1] is not None


async def test_async_psycopg_runs_at_once_outside_a_transaction_and_refuses_inside_one(
    postgres_dsn: str,
) -> None:
    loop = asyncio.get_running_loop()
    conn = await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True)
    async with conn:
        with app.eager():
            handle = await async_task.options(outbox=conn).aenqueue_in(60, "autocommit")
            assert await handle.aresult(timeout=0) == "autocommit"
            async with conn.transaction():
                with pytest.raises(wheelq.EagerModeError, match="psycopg"):
                    await async_task.options(outbox=conn).aenqueue("in a transaction")
    assert ran == [("autocommit", loop)]


async def test_a_sqlalchemy_async_connection_is_refused_in_eager_mode(postgres_dsn: str) -> None:
    engine = create_async_engine(_sqlalchemy(postgres_dsn))
    try:
        async with engine.connect() as conn:
            with app.eager(), pytest.raises(wheelq.EagerModeError, match="Session"):
                await async_task.options(outbox=conn).aenqueue("refused")
    finally:
        await engine.dispose()
    assert ran == []
