"""A Celery team's first week, from a fresh venv holding only the built wheel (the session's
``wheel_venv``, tests/support/wheel_venv.py), on the venv's own embedded server.

One tasks module declares a periodic task with `App.periodic`, a task that reads its
attempt from `wheelq.current_job()`, and a task used in eager mode; a plain handler takes a
plain topic. Two ``wheelq run tasks:app --topic plain=plain:handler`` processes run it:
the periodic task runs about once a second and never twice for one occurrence; the task
that fails its first attempt returns 2 from its second; a job whose ``expires`` has passed
at its due time never runs and `get()` says expired; a delayed job of the plain topic
fires and runs. A periodic declaration with an argument that does not fit fails at
declaration naming the parameter, and eager mode answers at once with no Redis.
"""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import pytest

from tests.support.tasks import URL_VARIABLE
from tests.support.waiting import eventually_sync
from tests.support.wheel_venv import WheelVenv

pytestmark = pytest.mark.timeout(600)  # the first use builds the wheel and the venv

RUNS_VARIABLE = "FIRST_WEEK_RUNS"

TASKS = f"""
    import os
    import pathlib
    import time

    import wheelq

    app = wheelq.App.from_url(os.environ["{URL_VARIABLE}"])
    RUNS = pathlib.Path(os.environ["{RUNS_VARIABLE}"])


    def note(what: str) -> None:
        job = wheelq.current_job()
        with RUNS.open("a") as runs:  # one short append per run: whole lines
            runs.write(f"{{what}} {{job.id}} {{job.due_ms}} {{time.time_ns() // 1_000_000}}\\n")


    @app.task
    def report(kind: str) -> None:
        note(kind)


    @app.task(max_attempts=3, retry=wheelq.RetryPolicy(base=0.05, max=0.05))
    def flaky(n: int) -> int:
        if wheelq.current_job().attempt == 1:
            raise RuntimeError("the first attempt fails")
        return wheelq.current_job().attempt


    @app.task
    def send(to: str, n: int) -> str:
        note("send")
        return f"sent {{n}} to {{to}}"


    app.periodic(report, every=1, args=("daily",))
"""

PLAIN = """
    import tasks


    def handler(job):
        tasks.note("plain")
"""

BAD_DECLARATION = """
    import wheelq
    from tasks import app, report

    try:
        app.periodic(report, every=1, args=(5,), name="bad")
    except wheelq.InvalidArgumentError as exc:
        print(exc.parameter, "|", exc)
    print(sorted(app.periodics))
"""

EAGER = """
    import json
    import time

    from tasks import app, send

    began = time.monotonic()
    with app.eager():
        value = send.enqueue_in(60, "a@b", n=2).result(timeout=1)
    print(json.dumps([value, time.monotonic() - began]))
"""

LATER = """
    import json
    import time

    import wheelq
    from tasks import app, flaky, send

    attempts = flaky.enqueue(1).result(timeout=30)
    expiring = send.options(expires=0.2).enqueue_in(0.6, "x@y", n=1)
    with wheelq.Client.from_url(app.url) as client:
        plain = client.enqueue("plain", {"k": 1}, delay=0.5)
        deadline = time.monotonic() + 30
        while expiring.info().state != wheelq.JobState.EXPIRED and time.monotonic() < deadline:
            time.sleep(0.05)
        state = expiring.info().state
        try:
            expiring.result(timeout=1)
            failed = ""
        except wheelq.JobFailedError as exc:
            failed = exc.state
    print(json.dumps([attempts, expiring.id, state, failed, plain]))
    app.close()
"""


def _runs(path: Path) -> list[tuple[str, str, int, int]]:
    """Each run noted: (what, job id, due ms, start ms)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        what, job_id, due_ms, start_ms = line.split()
        out.append((what, job_id, int(due_ms), int(start_ms)))
    return out


def test_a_celery_teams_first_week_holds_from_the_built_wheel(
    wheel_venv: WheelVenv, tmp_path: Path
) -> None:
    (tmp_path / "tasks.py").write_text(textwrap.dedent(TASKS))
    (tmp_path / "plain.py").write_text(textwrap.dedent(PLAIN))
    runs = tmp_path / "runs.txt"
    env = {RUNS_VARIABLE: str(runs)}

    bad = wheel_venv.python_code(
        textwrap.dedent(BAD_DECLARATION),
        cwd=tmp_path,
        env={**env, URL_VARIABLE: "redis://127.0.0.1:1/0"},
    )
    assert bad.returncode == 0, bad.stderr
    parameter, message = bad.stdout.splitlines()[0].split(" | ", 1)
    assert "kind" in f"{parameter} {message}", bad.stdout  # the parameter that does not fit
    assert bad.stdout.splitlines()[1] == "['tasks.report']"  # nothing declared

    eager = wheel_venv.python_code(
        textwrap.dedent(EAGER), cwd=tmp_path, env={**env, URL_VARIABLE: "redis://127.0.0.1:1/0"}
    )
    assert eager.returncode == 0, eager.stderr
    value, took_s = json.loads(eager.stdout)
    assert value == "sent 2 to a@b"
    assert took_s < 1, took_s  # at once, with nothing listening on the URL

    with wheel_venv.server(tmp_path) as url:
        env[URL_VARIABLE] = url
        run = ("wheelq", "run", "tasks:app", "--topic", "plain=plain:handler")
        with (
            wheel_venv.running(*run, cwd=tmp_path, env=env) as one,
            wheel_venv.running(*run, cwd=tmp_path, env=env) as two,
        ):
            later = wheel_venv.python_code(textwrap.dedent(LATER), cwd=tmp_path, env=env)
            assert later.returncode == 0, (later.stderr, one.err, two.err)
            eventually_sync(
                lambda: sum(what == "daily" for what, *_ in _runs(runs)) >= 5,
                timeout_s=30,
                what="five runs of the periodic report",
            )
        for service in (one, two):
            assert service.proc.returncode == 0, service.err  # SIGTERM: a graceful stop
            assert "Traceback" not in service.err, service.err

    attempts, expiring, state, failed, plain = json.loads(later.stdout)
    assert attempts == 2  # current_job().attempt on the run after the failed one
    assert (state, failed) == ("expired", "expired")
    noted = _runs(runs)
    assert not [r for r in noted if r[1] == expiring], "a job past its expiry ran"
    assert [r[0] for r in noted if r[1] == plain] == ["plain"]  # the plain topic's job, once
    (_, _, plain_due, plain_start) = next(r for r in noted if r[1] == plain)
    assert plain_due <= plain_start  # never before its due time
    daily = sorted((due, start, job_id) for what, job_id, due, start in noted if what == "daily")
    ids = [job_id for *_, job_id in daily]
    assert len(ids) == len(set(ids)), f"an occurrence ran twice: {ids}"
    dues = [due for due, *_ in daily]
    assert all(b - a == 1000 for a, b in itertools.pairwise(dues)), dues  # every second
    late = [start - due for due, start, _ in daily]
    assert all(0 <= ms < 1000 for ms in late), late  # about on time, never early
