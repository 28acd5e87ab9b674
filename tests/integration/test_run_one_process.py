"""One process for a small app: ``wheelq run MODULE:APP --topic TOPIC=MODULE:HANDLER`` leads
and runs plain topics beside the app's tasks, and ``--relay-dsn`` runs the outbox relay on
the same loop (docs/guides/tasks.md, "Running"; docs/guides/outbox.md)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psycopg
import pytest

import wheelq
from tests.support.cli import assert_one_line_error, run_wheelq
from tests.support.tasks import URL_VARIABLE, module_name, running, write_module
from tests.support.waiting import eventually_sync
from wheelq import outbox

ON_TIME_MS = 1000
"""How late a job may run after its due time (the wheel fires within a tick of it; the
worker reads at once): a bound far above both, far below a missed fire."""

TASKS = f"""
    import os

    import wheelq

    app = wheelq.App(os.environ["{URL_VARIABLE}"])


    @app.task
    def send(to: str) -> str:
        return "sent to " + to
"""

HANDLERS = f"""
    import json, os

    import redis

    r = redis.Redis.from_url(os.environ["{URL_VARIABLE}"])  # TIME: any node of a cluster


    def note(job):
        seconds, micros = r.time()  # the clock due times are on
        ran_ms = seconds * 1000 + micros // 1000
        with open("ran-" + job.topic + ".jsonl", "a") as noted:
            noted.write(json.dumps([job.id, job.due_ms, ran_ms, job.payload]) + "\\n")


    def handler(job):
        note(job)


    async def ahandler(job):
        note(job)
"""


@pytest.fixture
def app_module(
    tmp_path: Path, topic: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """The test's tasks module and its handlers module (``<tasks>_handlers``) in `tmp_path`."""
    monkeypatch.setenv(URL_VARIABLE, redis_url)
    name = module_name(topic)
    write_module(tmp_path, f"{name}_handlers", HANDLERS)
    module = write_module(tmp_path, name, TASKS)
    yield module
    module.app.close()


def ran(folder: Path, topic: str) -> list[list[object]]:
    """The runs the handlers noted of `topic` (in `folder`, the process's working
    directory): [job id, due ms, ran ms, payload] each."""
    noted = folder / f"ran-{topic}.jsonl"
    lines = noted.read_text().splitlines() if noted.exists() else []
    return [json.loads(line) for line in lines if line.endswith("]")]


def run_once(
    folder: Path, app_module: ModuleType, url: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    """``wheelq run MODULE:app FLAGS`` in `folder` until it exits (a refusal)."""
    return run_wheelq(
        "run", f"{app_module.__name__}:app", *flags, cwd=folder, env={URL_VARIABLE: url}
    )


def placed(handle: wheelq.TaskHandle[object]) -> bool:
    """Whether the job of `handle` is in Redis (the relay placed it)."""
    return handle.info().state is not wheelq.JobState.UNKNOWN


@pytest.mark.both_servers
@pytest.mark.cluster_too
def test_wheelq_run_with_topic_fires_and_runs_a_delayed_job_of_a_plain_topic_once_on_time(
    tmp_path: Path, app_module: ModuleType, redis_url: str, topic: str
) -> None:
    """The Done-when case: ``wheelq run tasks:app --topic plain=mod:handler`` (and an async
    handler on a second plain topic) leads the plain topics and runs their delayed jobs,
    never before due, within `ON_TIME_MS`, each once; the app's task runs beside them."""
    handlers = f"{app_module.__name__}_handlers"
    plain, aplain = f"{topic}-plain", f"{topic}-aplain"
    flags = ("--topic", f"{plain}={handlers}:handler", "--topic", f"{aplain}={handlers}:ahandler")
    with (
        running(tmp_path, app_module.__name__, redis_url, *flags),
        wheelq.Client.from_url(redis_url) as client,
    ):
        first = {t: client.enqueue(t, {"n": 1}, delay=0.5) for t in (plain, aplain)}
        then = {t: client.enqueue(t, {"n": 2}, delay=1.0) for t in (plain, aplain)}
        assert app_module.send.enqueue_in(0.2, "ada").result(timeout=15) == "sent to ada"
        for t in (plain, aplain):
            eventually_sync(lambda t=t: len(ran(tmp_path, t)) >= 2, timeout_s=15, what=t)
    for t in (plain, aplain):
        runs = ran(tmp_path, t)
        # the later job ran after the first: had the first run twice, it would show here
        assert [run[0] for run in runs] == [first[t], then[t]], runs
        for job_id, due_ms, ran_ms, _ in runs:
            assert isinstance(due_ms, int) and isinstance(ran_ms, int)
            assert 0 <= ran_ms - due_ms <= ON_TIME_MS, (job_id, ran_ms - due_ms)
        assert [run[3] for run in runs] == [{"n": 1}, {"n": 2}]


def test_a_plain_topic_that_is_a_tasks_topic_is_refused_naming_it(
    tmp_path: Path, app_module: ModuleType, redis_url: str
) -> None:
    handlers = f"{app_module.__name__}_handlers"
    task_topic = app_module.send.topic
    done = run_once(tmp_path, app_module, redis_url, "--topic", f"{task_topic}={handlers}:handler")
    assert_one_line_error(done, 2, f"{task_topic!r} is task {app_module.send.name!r}'s topic")


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("plain", "--topic must be TOPIC=MODULE:HANDLER, got 'plain'"),
        ("plain=nosuchmodule_xyz:handler", "no module named 'nosuchmodule_xyz'"),
        ("plain=handler", "handler must be module:function, got 'handler'"),
        ("bad topic!=m:f", "topic"),
    ],
)
def test_a_bad_topic_flag_exits_2_saying_why_in_one_line(
    tmp_path: Path, app_module: ModuleType, redis_url: str, flag: str, said: str
) -> None:
    assert_one_line_error(run_once(tmp_path, app_module, redis_url, "--topic", flag), 2, said)


def test_relay_dsn_places_a_committed_outbox_job_which_runs_in_the_same_process(
    tmp_path: Path, app_module: ModuleType, redis_url: str, postgres_dsn: str, topic: str
) -> None:
    """``--relay-dsn``: a task enqueued in a committed transaction (and a job of a plain
    topic) reach Redis through the process's own relay and run there; a rolled-back one
    never exists."""
    outbox.install(postgres_dsn)
    handlers = f"{app_module.__name__}_handlers"
    plain = f"{topic}-plain"
    flags = ("--relay-dsn", postgres_dsn, "--topic", f"{plain}={handlers}:handler")
    send = app_module.send
    with running(tmp_path, app_module.__name__, redis_url, *flags) as proc:
        with psycopg.connect(postgres_dsn) as conn:
            with conn.transaction():
                handle = send.options(outbox=conn).enqueue_in(0.2, "ada")
                plain_id = outbox.enqueue(conn, plain, {"n": 1}, delay=0.2)
            with conn.transaction():
                rolled_back = send.options(outbox=conn).enqueue("never")
                raise psycopg.Rollback  # the transaction's exit rolls back, raising nothing
            with conn.transaction():
                after = send.options(outbox=conn).enqueue("bob")
        eventually_sync(lambda: placed(handle), timeout_s=15, what="the relay to place it")
        assert handle.result(timeout=15) == "sent to ada"
        eventually_sync(lambda: ran(tmp_path, plain), timeout_s=15, what="the plain job")
        assert [run[0] for run in ran(tmp_path, plain)] == [plain_id]
        eventually_sync(lambda: placed(after), timeout_s=15, what="the relay to place it")
        assert after.result(timeout=15) == "sent to bob"
        assert not placed(rolled_back)  # a job committed after it was placed and ran
        assert proc.poll() is None


def test_relay_dsn_without_the_outbox_tables_exits_1_saying_what_to_run(
    tmp_path: Path, app_module: ModuleType, redis_url: str, postgres_dsn: str
) -> None:
    """The relay's check runs first on the loop: the process stops before its worker
    reads, its last line saying what to run (after the "running ..." log line)."""
    done = run_once(tmp_path, app_module, redis_url, "--relay-dsn", postgres_dsn)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("wheelq run: the outbox's tables are missing"), last
    assert "wheelq outbox init" in last, last
