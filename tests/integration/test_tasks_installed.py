"""Issue 45's first point, as a user meets it: a task module and a script, both run by
`tests.support.cli.PYTHON` (this interpreter here; in CI's `.ci/installed` also a fresh
venv that holds only the built wheel), beside ``wheelq run mod:app`` in one process.

The script enqueues the task due in half a second and reads its dict back, never before it
was due; a wrong argument type is refused naming the parameter, and nothing is written;
``wheelq.Admin.from_url(URL).pause(topic)`` pauses the task's topic (a job waits while it is
paused and runs once it is resumed)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from tests.support.cli import PYTHON, clean_env
from tests.support.tasks import URL_VARIABLE, module_name, running

MODULE = f"""
import os, time

import wheelq

app = wheelq.App.from_url(os.environ["{URL_VARIABLE}"])


@app.task
def f(to: str, n: int) -> dict:
    return {{"to": to, "n": n, "ran": time.time()}}
"""

SCRIPT = f"""
import os, sys, time

import wheelq
from {{module}} import f

sent = time.time()
got = f.enqueue_in(0.5, "a@b", n=2).result(timeout=10)
ran = got.pop("ran")
assert got == {{"to": "a@b", "n": 2}}, got
assert ran >= sent + 0.5, ("ran before it was due", sent, ran)

admin = wheelq.Admin.from_url(os.environ["{URL_VARIABLE}"])
pending = admin.stats(f.topic).pending
try:
    f.enqueue_in(0.5, "a@b", n="two")
except wheelq.InvalidArgumentError as refused:
    assert refused.parameter == "n", refused
    print("refused:", refused)
else:
    sys.exit("n='two' was enqueued")
assert admin.stats(f.topic).pending == pending, "the refused call wrote a job"

state = admin.pause(f.topic)
assert state.paused and admin.paused(f.topic).paused, state
# due in a second: a pause reaches the worker in milliseconds (its message), not at once
waiting = f.enqueue_in(1, "c@d", n=3)
try:
    waiting.result(timeout=3)
except wheelq.ResultTimeoutError:
    print("paused: the job waits")
else:
    sys.exit("a job ran while its topic was paused")
admin.resume(f.topic)
assert waiting.result(timeout=10)["n"] == 3
print("resumed: it ran")
"""


def test_a_task_runs_once_due_a_bad_argument_is_refused_and_admin_pauses_its_topic(
    tmp_path: Path, topic: str, redis_url: str
) -> None:
    name = module_name(topic)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "check.py").write_text(textwrap.dedent(SCRIPT).replace("{module}", name))
    with running(tmp_path, name, redis_url):
        done = subprocess.run(
            [PYTHON, "check.py"],
            cwd=tmp_path,
            env=clean_env({URL_VARIABLE: redis_url}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: ") and "'n'" in lines[0], lines
    assert lines[1:] == ["paused: the job waits", "resumed: it ran"], lines
    assert "Warning" not in done.stderr, done.stderr
