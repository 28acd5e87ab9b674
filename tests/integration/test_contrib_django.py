"""wheelq in a Django project (`wheelq.contrib.django`): the app the ``WHEELQ`` setting
names, loaded when Django starts with the setting's URL; a view enqueueing a task through
Django's test client; ``manage.py wheelq run`` running it and exiting 0 on SIGTERM
(docs/guides/tasks.md, "In Django")."""

from __future__ import annotations

import signal
import subprocess
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

import wheelq
from tests.support.cli import PYTHON, clean_env, stop
from tests.support.docs import blocks
from tests.support.tasks import URL_VARIABLE, module_name, write_module

TASKS = """
    import wheelq

    app = wheelq.App.from_url("redis://127.0.0.1:1/0")  # nothing there: WHEELQ["URL"] replaces it


    @app.task
    def send_email(to: str, n: int) -> dict:
        return {"sent": to, "copies": n}
"""

SETTINGS = """
    import os

    SECRET_KEY = "not a secret: a test"
    ALLOWED_HOSTS = ["testserver"]
    INSTALLED_APPS = ["wheelq.contrib.django"]
    ROOT_URLCONF = "{urls}"
    MIDDLEWARE = []
    DATABASES = {{}}
    WHEELQ = {{"APP": "{tasks}:app", "URL": os.environ["{variable}"]}}
"""

URLS = """
    from django.http import JsonResponse
    from django.urls import path

    from {tasks} import send_email


    def send(request):
        handle = send_email.enqueue_in(0.2, request.GET["to"], n=int(request.GET["n"]))
        return JsonResponse({{"id": handle.id}})


    urlpatterns = [path("send", send)]
"""

MANAGE = """
    import os
    import sys

    if __name__ == "__main__":
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "{settings}")
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
"""


class Project(NamedTuple):
    folder: Path
    tasks: str
    settings: str
    url: str

    def manage(self, *args: str) -> subprocess.Popen[str]:
        """``python manage.py ARGS`` in the project's folder, on the test's server."""
        return subprocess.Popen(
            [PYTHON, "manage.py", *args],
            cwd=self.folder,
            env=clean_env({URL_VARIABLE: self.url}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def project(tmp_path: Path, topic: str, redis_url: str) -> Project:
    """A Django project in `tmp_path`: a tasks module, settings, urls and manage.py."""
    tasks = module_name(topic)
    settings, urls = f"settings_{tasks}", f"urls_{tasks}"
    names = {"tasks": tasks, "settings": settings, "urls": urls, "variable": URL_VARIABLE}
    (tmp_path / f"{settings}.py").write_text(textwrap.dedent(SETTINGS.format(**names)))
    (tmp_path / f"{urls}.py").write_text(textwrap.dedent(URLS.format(**names)))
    (tmp_path / "manage.py").write_text(textwrap.dedent(MANAGE.format(**names)))
    (tmp_path / f"{tasks}.py").write_text(textwrap.dedent(TASKS))
    return Project(tmp_path, tasks, settings, redis_url)


@pytest.fixture(scope="module")
def django_set_up() -> None:
    """Django set up once a process, with no app installed: each test installs
    ``wheelq.contrib.django`` with its own settings (`override_settings`), which runs the
    app's ``ready()`` again, as Django's own tests of installed apps do."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            SECRET_KEY="not a secret: a test",
            ALLOWED_HOSTS=["testserver"],
            INSTALLED_APPS=[],
            MIDDLEWARE=[],
            DATABASES={},
        )
        django.setup()


def test_a_view_enqueues_a_task_that_manage_py_wheelq_run_runs(
    project: Project, django_set_up: None
) -> None:
    from django.apps import apps
    from django.test import Client, override_settings

    tasks = write_module(project.folder, project.tasks, TASKS)
    wheelq_setting = {"APP": f"{project.tasks}:app", "URL": project.url}
    urls = f"urls_{project.tasks}"
    try:
        with (
            override_settings(WHEELQ=wheelq_setting, ROOT_URLCONF=urls),
            override_settings(INSTALLED_APPS=["wheelq.contrib.django"]),
        ):
            app = apps.get_app_config("wheelq").app
            assert app is tasks.app and app.url == project.url  # the setting's, not the module's

            answer = Client().get("/send", {"to": "ada@example.com", "n": 2})
            assert answer.status_code == 200, answer.content
            handle = wheelq.TaskHandle(tasks.send_email, answer.json()["id"])

        proc = project.manage("wheelq", "run", "--concurrency", "2")
        try:
            assert handle.result(timeout=15) == {"sent": "ada@example.com", "copies": 2}
        finally:
            out, err = stop(proc, signal.SIGTERM)
        assert proc.returncode == 0, (proc.returncode, out, err)
        assert "Traceback" not in err, err
        assert f"running {project.tasks}.send_email" in err, err  # the log, as `wheelq run`'s
    finally:
        tasks.app.close()


def test_manage_py_wheelq_run_refuses_a_task_the_app_has_not_with_exit_2(
    project: Project,
) -> None:
    proc = project.manage("wheelq", "run", "--tasks", "nope")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert "Traceback" not in err, err
    assert err.strip().splitlines() == [
        f"CommandError: app '{project.tasks}:app': the app has no task or topic 'nope'; "
        f"its tasks: {project.tasks}.send_email"
    ]


def _docs_views(tasks: str) -> str:
    """The guide's ``myproject/views.py`` ("In Django"), its tasks module made `tasks`."""
    (body,) = [
        b.body
        for b in blocks("docs/guides/tasks.md")
        if b.section == "In Django" and b.body.startswith("# myproject/views.py\n")
    ]
    assert "from myproject.tasks import send_email" in body, body
    return body.replace("from myproject.tasks import", f"from {tasks} import")


DOCS_URLS = """
    from django.urls import path

    from {views} import sent, signup

    urlpatterns = [path("signup", signup), path("emails/<str:job>", sent)]
"""


def test_the_guides_view_answers_200_404_202_and_409_as_result_does(
    project: Project, django_set_up: None
) -> None:
    """The guide's views, through Django's test client: a signup's job pending (202, after
    the view's short wait), an id nothing is known of (404), a job dead-lettered (409, with
    its error), and one that succeeded (200, its result)."""
    from django.test import Client, override_settings

    tasks = write_module(project.folder, project.tasks, TASKS)
    views, urls = f"views_{project.tasks}", f"docs_urls_{project.tasks}"
    (project.folder / f"{views}.py").write_text(_docs_views(project.tasks))
    write_module(project.folder, urls, DOCS_URLS.format(views=views))
    wheelq_setting = {"APP": f"{project.tasks}:app", "URL": project.url}
    proc = project.manage("wheelq", "run", "--concurrency", "2")
    try:
        with (
            override_settings(WHEELQ=wheelq_setting, ROOT_URLCONF=urls),
            override_settings(INSTALLED_APPS=["wheelq.contrib.django"]),
            wheelq.Client.from_url(project.url) as raw,
        ):
            http = Client()
            signed = http.post("/signup", {"email": "ada@example.com"})
            assert signed.status_code == 200, signed.content
            job = signed.json()["job"]  # due in 30 s
            waiting = http.get(f"/emails/{job}")
            unknown = http.get("/emails/no-such-job")
            unfit = raw.enqueue(tasks.send_email.topic, {"to": 5, "n": 1})  # dead-lettered
            with pytest.raises(wheelq.JobFailedError):  # the worker has it: not the view's wait
                wheelq.TaskHandle(tasks.send_email, unfit).result(timeout=15)
            failed = http.get(f"/emails/{unfit}")
            due = tasks.send_email.enqueue("bob@example.com", n=2)
            assert due.result(timeout=15) == {"sent": "bob@example.com", "copies": 2}
            done = http.get(f"/emails/{due.id}")
    finally:
        out, err = stop(proc, signal.SIGTERM)
        tasks.app.close()
    assert proc.returncode == 0, (proc.returncode, out, err)
    assert (waiting.status_code, waiting.json()) == (202, {"job": job, "state": "pending"})
    assert unknown.status_code == 404, unknown.content
    assert "nothing is known of job 'no-such-job'" in unknown.json()["error"]
    assert failed.status_code == 409, failed.content
    assert (failed.json()["state"], failed.json()["reason"]) == ("dead", "failed")
    assert "the payload does not fit the task" in failed.json()["error"]
    assert (done.status_code, done.json()) == (
        200, {"job": due.id, "result": {"sent": "bob@example.com", "copies": 2}}
    )  # fmt: skip
