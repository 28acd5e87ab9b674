"""A FastAPI app with `wheelq.contrib.asgi.lifespan`: a route awaits ``aenqueue_in`` on the
app's asyncio client of the server's loop, a ``wheelq run`` process runs the task, and the
lifespan's end closes every connection the app opened (docs/guides/tasks.md, "In FastAPI
and Starlette")."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient

import wheelq
from tests.support.tasks import module_name, running, write_module
from tests.support.waiting import eventually_sync
from wheelq.contrib.asgi import lifespan

TASKS = """
    import os

    import wheelq

    app = wheelq.App(os.environ["WHEELQ_TEST_APP_URL"])


    @app.task
    async def send_email(to: str, n: int) -> dict:
        return {"sent": to, "copies": n}
"""


def named(client: redis.Redis, name: str) -> int:
    """How many of the server's connections are named `name`."""
    return sum(1 for c in client.client_list() if c.get("name") == name)


@pytest.fixture
def tasks(
    tmp_path: Path, topic: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> ModuleType:
    monkeypatch.setenv("WHEELQ_TEST_APP_URL", redis_url)
    return write_module(tmp_path, module_name(topic), TASKS)


def test_a_route_enqueues_on_the_lifespans_client_and_its_end_closes_it(
    tmp_path: Path, tasks: ModuleType, topic: str, redis_sync: redis.Redis, redis_url: str
) -> None:
    app, send_email = tasks.app, tasks.send_email
    # this process's connections, told apart from the worker's on the same server
    name = f"asgi-{topic}"
    app.redis_options["client_name"] = name
    api = FastAPI(lifespan=lifespan(app))
    used: list[object] = []

    @api.post("/emails")
    async def send(to: str) -> dict[str, str]:
        handle = await send_email.aenqueue_in(0.2, to, n=2)
        used.append(app.aclient)
        return {"id": handle.id}

    @api.get("/emails/{job_id}")
    async def result(job_id: str) -> dict[str, object]:
        return await wheelq.TaskHandle(send_email, job_id).aresult(timeout=15)

    with running(tmp_path, tasks.__name__, redis_url), TestClient(api) as http:
        job_id = http.post("/emails", params={"to": "ada@example.com"}).json()["id"]
        assert http.get(f"/emails/{job_id}").json() == {"sent": "ada@example.com", "copies": 2}
        http.post("/emails", params={"to": "bob@example.com"})
        assert used[0] is used[1]  # one client for both requests: the server's loop's
        assert named(redis_sync, name) >= 1
    eventually_sync(
        lambda: named(redis_sync, name) == 0, timeout_s=5, what="the app's connections closed"
    )
