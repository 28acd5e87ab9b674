"""``manage.py wheelq worker|scheduler|relay`` in a Django project on a real PostgreSQL: the
roles apart, plain topics (``--topic``) beside the tasks, the relay on the project's own
database (``DATABASES['default']``), and stale database connections closed around each
job, so a handler whose connection the server closed recovers (docs/guides/tasks.md, "In
Django")."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import psycopg
import pytest

import wheelq
from tests.integration.test_contrib_django import MANAGE
from tests.support.cli import PYTHON, clean_env, stop
from tests.support.tasks import URL_VARIABLE, module_name, write_module
from tests.support.waiting import eventually_sync
from wheelq import outbox

DSN_VARIABLE = "WHEELQ_TEST_DJANGO_DSN"

TASKS = """
    from asgiref.sync import sync_to_async
    from django.db import connection

    import wheelq

    app = wheelq.App.from_url("redis://127.0.0.1:1/0")  # nothing there: WHEELQ["URL"] replaces it


    def pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]


    @app.task(max_attempts=1)  # a run on a dead connection fails the job for good
    def backend() -> int:
        return pid()


    @app.task(max_attempts=1)
    async def abackend() -> int:
        return await sync_to_async(pid)()  # the ORM's thread, as `await Model.objects.aget()`


    def plain(job):  # a plain topic's handler (--topic): notes the job in the cwd
        with open("plain.jsonl", "a") as noted:
            noted.write(json.dumps([job.id, pid()]) + "\\n")
"""

SETTINGS = """
    import os
    from urllib.parse import urlsplit

    SECRET_KEY = "not a secret: a test"
    INSTALLED_APPS = ["wheelq.contrib.django"]
    dsn = urlsplit(os.environ["{dsn}"])
    DATABASES = {{
        "default": {{
            "ENGINE": "django.db.backends.postgresql",
            "NAME": dsn.path.lstrip("/"),
            "USER": dsn.username,
            "HOST": dsn.hostname,
            "PORT": dsn.port,
            "CONN_MAX_AGE": None,  # kept for ever: only a health check finds it dead
            "CONN_HEALTH_CHECKS": True,  # checked on the first use after close_old_connections
        }}
    }}
    WHEELQ = {{"APP": "{tasks}:app", "URL": os.environ["{url}"]}}
"""


class Project(NamedTuple):
    folder: Path
    tasks: ModuleType
    env: dict[str, str]

    def manage(self, *args: str) -> subprocess.Popen[str]:
        """``python manage.py ARGS`` in the project's folder."""
        return subprocess.Popen(
            [PYTHON, "manage.py", *args],
            cwd=self.folder,
            env=clean_env(self.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def project(tmp_path: Path, topic: str, redis_url: str, postgres_dsn: str) -> Iterator[Project]:
    """A Django project on the test's PostgreSQL database (with the outbox's tables) and
    Redis; its tasks module imported here too."""
    outbox.install(postgres_dsn)
    name = module_name(topic)
    settings = f"settings_{name}"
    names = {"tasks": name, "settings": settings, "url": URL_VARIABLE, "dsn": DSN_VARIABLE}
    (tmp_path / f"{settings}.py").write_text(textwrap.dedent(SETTINGS.format(**names)))
    (tmp_path / "manage.py").write_text(textwrap.dedent(MANAGE.format(**names)))
    tasks = write_module(tmp_path, name, "import json\n" + textwrap.dedent(TASKS))
    tasks.app.url = redis_url
    yield Project(tmp_path, tasks, {URL_VARIABLE: redis_url, DSN_VARIABLE: postgres_dsn})
    tasks.app.close()


def terminate(dsn: str, pid: int) -> None:
    """Close backend `pid`'s connection from the server's side, as a restart or an idle
    timeout does."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def all_up(project: Project, procs: list[subprocess.Popen[str]]) -> None:
    """Wait until every process of `procs` beats (its roles started, SIGTERM handled): a
    stop before that finds one still starting Django (a scheduler the test's jobs never
    needed) and ends it by the signal's default, -15, not the clean exit asserted."""
    with wheelq.Admin.from_url(project.env[URL_VARIABLE]) as admin:
        eventually_sync(
            lambda: {p.pid for p in procs} <= {p.pid for p in admin.processes()},
            timeout_s=30,
            what="every process beating",
        )


@pytest.mark.parametrize("role", ["worker", "run"])
def test_a_job_whose_connection_the_server_closed_runs_on_a_new_one(
    project: Project, postgres_dsn: str, role: str
) -> None:
    """Sync and async tasks on one handler thread (``--concurrency 1``), the connection
    kept (``CONN_MAX_AGE`` None): the server closes it between two jobs, and the second
    job, after ``close_old_connections()``, connects anew and succeeds; without it, the
    second job would run on the dead connection and fail (``max_attempts=1``)."""
    procs = [project.manage("wheelq", role, "--concurrency", "1")]
    if role == "worker":
        procs.append(project.manage("wheelq", "scheduler"))
    try:
        for task in (project.tasks.backend, project.tasks.abackend):
            first = task.enqueue().result(timeout=20)
            terminate(postgres_dsn, first)
            second = task.enqueue().result(timeout=20)  # JobFailedError without the fix
            assert isinstance(second, int) and second != first, (first, second)
        all_up(project, procs)
    finally:
        outputs = [stop(proc, signal.SIGTERM) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, (proc.returncode, out, err)
        assert "Traceback" not in err, err


def test_worker_scheduler_and_relay_apart_run_an_outbox_job_and_a_plain_topic(
    project: Project, postgres_dsn: str, topic: str
) -> None:
    """``manage.py wheelq worker --topic P=M:H``, ``scheduler --topic P`` and ``relay`` (the
    DSN from ``DATABASES['default']``), each a process: a task enqueued in a committed
    transaction runs, and a delayed job of the plain topic runs by its handler."""
    plain = f"{topic}-plain"
    handler = f"{plain}={project.tasks.__name__}:plain"
    procs = [
        project.manage("wheelq", "worker", "--topic", handler),
        project.manage("wheelq", "scheduler", "--topic", plain),
        project.manage("wheelq", "relay"),
    ]
    try:
        with psycopg.connect(postgres_dsn) as conn, conn.transaction():
            handle = project.tasks.backend.options(outbox=conn).enqueue_in(0.2)
        eventually_sync(
            lambda: handle.info().state is not wheelq.JobState.UNKNOWN,
            timeout_s=20,
            what="the relay to place the job",
        )
        assert isinstance(handle.result(timeout=20), int)
        with wheelq.Client.from_url(project.env[URL_VARIABLE]) as client:
            job_id = client.enqueue(plain, {"n": 1}, delay=0.3)
        noted = project.folder / "plain.jsonl"
        eventually_sync(
            lambda: noted.exists() and noted.read_text().endswith("\n"),
            timeout_s=20,
            what="the plain job to run",
        )
        assert [json.loads(line)[0] for line in noted.read_text().splitlines()] == [job_id]
        all_up(project, procs)
    finally:
        outputs = [stop(proc, signal.SIGTERM) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, (proc.returncode, out, err)
        assert "Traceback" not in err, err


def test_relay_refuses_a_project_database_that_is_not_postgresql(
    project: Project,
) -> None:
    settings = next(project.folder.glob("settings_*.py"))
    settings.write_text(
        settings.read_text().replace("django.db.backends.postgresql", "django.db.backends.sqlite3")
    )
    proc = project.manage("wheelq", "relay")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert "Traceback" not in err, err
    assert "DATABASES['default'] to be a PostgreSQL database" in err, err
