"""Jobs that follow jobs over HTTP (docs/guides/workflows.md): ``after`` in a job's body,
``POST /v1/flows`` and ``GET /v1/topics/{topic}/flows/{id}``, run by a scheduler and a worker; and
a table of bad bodies, each a problem naming its field, with nothing written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.integration.test_web_dashboard import get, post
from tests.integration.test_worker import holds
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import Served, assert_problem, serving
from wheelq import Admin, Client, Job, JobSpec, JobState, Scheduler, Worker
from wheelq.web.auth import Token

pytestmark = pytest.mark.cluster_too


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


@pytest.fixture
async def ran(redis_url: str, topic: str) -> AsyncIterator[list[Any]]:
    seen: list[Any] = []

    async def handler(job: Job) -> Any:
        seen.append(job.payload)
        return job.payload

    node = Scheduler.from_url(redis_url, None, preload_interval_ms=100)
    worker = Worker.from_url(redis_url, topic, handler)
    await node.start()
    await worker.start()
    try:
        yield seen
    finally:
        await worker.stop()
        await node.stop()


async def test_a_job_after_another_over_http(api: Served, topic: str, ran: list[Any]) -> None:
    status, first, _ = await api.call(
        "POST", f"/v1/topics/{topic}/jobs", {"payload": "first", "delay_ms": 200}
    )
    assert status == 201
    status, second, headers = await api.call(
        "POST",
        f"/v1/topics/{topic}/jobs",
        {"payload": "second", "after": {"id": first["id"]}, "on_parent_failure": "cancel"},
    )
    assert (status, second["due_ms"]) == (201, None)
    status, job, _ = await api.call("GET", headers["Location"])
    assert job["state"] == "awaiting"
    await eventually(holds(lambda: ran == ["first", "second"]), timeout_s=10, what="both, in order")


async def test_a_flow_over_http_and_its_children(api: Served, topic: str, ran: list[Any]) -> None:
    body = {
        "parent": {"topic": topic, "payload": "parent"},
        "children": [{"topic": topic, "payload": n, "delay_ms": 10 * n} for n in range(3)],
    }
    status, flow, headers = await api.call("POST", "/v1/flows", body)
    assert status == 201
    assert [c["topic"] for c in flow["children"]] == [topic] * 3
    await eventually(holds(lambda: "parent" in ran), timeout_s=10, what="the parent")
    assert ran.index("parent") == 3
    status, found, _ = await api.call("GET", headers["Location"])
    assert status == 200
    assert [c["groups"][0]["result"] for c in found["children"]] == [0, 1, 2]


def _flow(t: str, parent: Any = None, children: Any = None, **more: Any) -> dict[str, Any]:
    one = [{"topic": t, "payload": 1}]
    return {
        "parent": {"topic": t, "payload": 1} if parent is None else parent,
        "children": one if children is None else children,
        **more,
    }


BAD: list[tuple[str, Callable[[str], Any], str]] = [
    ("jobs", lambda t: {"payload": 1, "after": {"id": ""}}, "after.id"),
    ("jobs", lambda t: {"payload": 1, "after": {"id": "x", "group": ""}}, "after.group"),
    (
        "jobs",
        lambda t: {"payload": 1, "after": {"id": "x"}, "on_parent_failure": "maybe"},
        "on_parent_failure",
    ),
    ("jobs", lambda t: {"payload": 1, "on_parent_failure": "run"}, "on_parent_failure"),
    ("jobs", lambda t: {"payload": 1, "after": {"id": "never-enqueued"}}, "after"),
    ("jobs", lambda t: {"payload": 1, "after": {"id": "x"}, "at": 1_900_000_000_000}, "at"),
    ("batch", lambda t: {"jobs": [{"payload": 1, "after": {"id": "x"}}]}, "jobs[0].after"),
    ("flows", lambda t: _flow(t, children=[]), "children"),
    ("flows", lambda t: _flow(t, parent={"payload": 1}), "parent.topic"),
    ("flows", lambda t: _flow(t, on_child_failure="cancel"), "on_child_failure"),
    (
        "flows",
        lambda t: _flow(t, parent={"topic": t, "payload": 1, "at": 1_900_000_000_000}),
        "at",
    ),
]


@pytest.mark.parametrize(("route", "body", "field"), BAD)
async def test_a_bad_body_is_a_problem_naming_its_field_and_writes_nothing(
    api: Served, topic: str, route: str, body: Callable[[str], Any], field: str
) -> None:
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": "x", "id": "x"})
    path = {
        "jobs": f"/v1/topics/{topic}/jobs",
        "batch": f"/v1/topics/{topic}/jobs/batch",
        "flows": "/v1/flows",
    }[route]
    got = await api.call("POST", path, body(topic))
    assert_problem(got, 404 if field == "after" else 422, field)
    _, stats, _ = await api.call("GET", f"/v1/topics/{topic}")
    assert stats["pending"] + stats["ready"] == 1  # the job "x" alone


async def test_unknown_flow_parent_is_404(api: Served, topic: str) -> None:
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": "x", "id": "x"})
    assert_problem(await api.call("GET", f"/v1/topics/{topic}/flows/x"), 404, "job_id")


async def test_the_console_shows_an_awaiting_job_and_a_flows_children(
    api: Served, topic: str
) -> None:
    status, first, _ = await api.call(
        "POST", f"/v1/topics/{topic}/jobs", {"payload": 1, "delay_ms": 600_000}
    )
    _, second, _ = await api.call(
        "POST", f"/v1/topics/{topic}/jobs", {"payload": 2, "after": {"id": first["id"]}}
    )
    body = {
        "parent": {"topic": topic, "payload": "p"},
        "children": [{"topic": topic, "payload": n, "delay_ms": 600_000} for n in range(3)],
    }
    _, flow, _ = await api.call("POST", "/v1/flows", body)
    html, _ = await get(api, f"/ui/topics/{topic}/jobs/{second['id']}")
    assert 'id="job-awaiting"' in html and "Run now" not in html and "Cancel" in html
    html, _ = await get(api, f"/ui/topics/{topic}/jobs/{flow['id']}")
    assert 'id="job-children"' in html
    assert all(c["id"] in html for c in flow["children"])
    html, _ = await get(api, f"/ui/topics/{topic}/jobs/{first['id']}")
    assert 'id="job-children"' not in html  # no flow's parent
    assert 'id="job-tied"' in html and second["id"] in html and "follows it" in html
    html, _ = await get(api, f"/ui/topics/{topic}/jobs/{second['id']}")
    assert "it follows" in html and first["id"] in html
    child = flow["children"][0]["id"]
    html, _ = await get(api, f"/ui/topics/{topic}/jobs/{child}")
    assert "flow parent" in html and flow["id"] in html and 'id="job-tree-actions"' in html
    _, shown, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{child}")
    assert shown["parent"]["job_id"] == flow["id"] and shown["continuations"] == []
    _, parent, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{flow['id']}")
    assert (parent["children"], parent["state"]) == (3, "awaiting")
    _, before, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{child}")
    status, where = await post(
        api, f"/ui/topics/{topic}/job/shift-tree", [("id", flow["id"]), ("by_s", "-60")]
    )
    assert status == 303 and "rescheduled+3" in where, where
    _, after, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{child}")
    assert after["due_ms"] == before["due_ms"] - 60_000
    status, asked = await post(api, f"/ui/topics/{topic}/job/cancel-tree", [("id", flow["id"])])
    assert status == 200 and "whole tree" in asked  # a confirmation first: nothing cancelled
    _, still, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{child}")
    assert still["state"] == "pending"
    status, gone, _ = await api.call("DELETE", f"/v1/topics/{topic}/jobs/{flow['id']}?tree=true")
    assert (status, gone) == (200, {"cancelled": 4})
    status, where = await post(
        api, f"/ui/topics/{topic}/job/cancel", [("id", second["id"]), ("confirm", "1")]
    )
    assert status == 303, where
    _, job, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{second['id']}")
    assert job["state"] == "cancelled"


async def test_a_tree_moves_over_http_and_a_bad_move_is_a_problem_moving_nothing(
    api: Served, topic: str
) -> None:
    body = {
        "parent": {"topic": topic, "payload": "p"},
        "children": [{"topic": topic, "payload": n, "delay_ms": 600_000} for n in range(2)],
    }
    _, flow, _ = await api.call("POST", "/v1/flows", body)
    path = f"/v1/topics/{topic}/jobs/{flow['id']}"

    async def dues() -> list[int]:
        rows = [
            await api.call("GET", f"/v1/topics/{topic}/jobs/{c['id']}") for c in flow["children"]
        ]
        return [row[1]["due_ms"] for row in rows]

    before = await dues()
    for move, field in (
        ({"delay_ms": 5}, "delay_ms"),
        ({"at": 1_900_000_000_000}, "at"),
        ({}, "by_ms"),
        ({"by_ms": 1, "to": 1_900_000_000_000}, "by_ms"),
        ({"by_ms": 11 * 365 * 86_400_000}, "by_ms"),
        ({"by_ms": "soon"}, "by_ms"),
        ({"to": "tomorrow"}, "to"),
    ):
        assert_problem(await api.call("PATCH", f"{path}?tree=true", move), 422, field)
    assert_problem(await api.call("PATCH", path, {"by_ms": 1}), 422, "by_ms")
    assert await dues() == before
    status, moved, _ = await api.call("PATCH", f"{path}?tree=true", {"by_ms": -60_000})
    assert (status, moved) == (200, {"moved": 2})
    assert await dues() == [d - 60_000 for d in before]


async def test_a_pull_consumers_ack_releases_what_follows_and_a_nack_to_dead_cancels(
    redis_url: str, api: Served, topic: str
) -> None:
    # Pull consumers settle jobs over HTTP (ack.lua and dead_letter.lua with receipts): a
    # job they ack releases its continuation; one they dead-letter cancels its own.
    node = Scheduler.from_url(redis_url, None, preload_interval_ms=100)
    await node.start()
    try:
        _, good, _ = await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": "good"})
        status, _, _ = await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "default"})
        assert status == 201
        group = f"/v1/topics/{topic}/groups/default"
        _, bad, _ = await api.call(
            "POST", f"/v1/topics/{topic}/jobs", {"payload": "bad", "max_attempts": 1}
        )
        follows = {}
        for name, parent in (("after-good", good), ("after-bad", bad)):
            body = {"payload": name, "after": {"id": parent["id"]}}
            _, made, _ = await api.call("POST", f"/v1/topics/{topic}/jobs", body)
            follows[name] = made["id"]
        pulled: dict[str, dict[str, Any]] = {}

        async def pull_both() -> bool:
            _, got, _ = await api.call("POST", f"{group}/pull", {"max": 10, "wait_ms": 100})
            pulled.update({j["payload"]: j for j in got["jobs"]})
            return {"good", "bad"} <= pulled.keys()

        await eventually(pull_both, timeout_s=10, what="both parents pulled")
        status, _, _ = await api.call(
            "POST", f"{group}/ack", {"receipts": [pulled["good"]["receipt"]]}
        )
        assert status == 200
        status, _, _ = await api.call(
            "POST", f"{group}/nack", {"receipts": [pulled["bad"]["receipt"]]}
        )
        assert status == 200

        async def settled() -> bool:
            _, a, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{follows['after-good']}")
            _, b, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{follows['after-bad']}")
            return (a["state"], b["state"]) == ("ready", "cancelled")

        await eventually(settled, timeout_s=10, what="one released, one cancelled")
    finally:
        await node.stop()


async def test_a_nested_flow_over_http_runs_inner_first(
    api: Served, topic: str, ran: list[Any]
) -> None:
    inner = {
        "parent": {"topic": topic, "payload": "mid"},
        "children": [{"topic": topic, "payload": f"d{n}"} for n in range(2)],
    }
    body = {"parent": {"topic": topic, "payload": "top"}, "children": [inner]}
    status, flow, _ = await api.call("POST", "/v1/flows", body)
    assert status == 201, flow
    await eventually(holds(lambda: "top" in ran), timeout_s=15, what="the top parent")
    assert ran.index("mid") > max(ran.index("d0"), ran.index("d1"))
    assert ran[-1] == "top" and ran.count("top") == 1
    _, mid, _ = await api.call("GET", f"/v1/topics/{topic}/flows/{flow['children'][0]['id']}")
    assert [c["payload"] for c in mid["children"]] == ["d0", "d1"]


async def test_a_nested_flow_needs_write_access_to_every_topic_in_it(
    redis_url: str, topic: str
) -> None:
    secret = "w" * 24
    tokens = (Token(secret, "write", (topic,)),)
    inner = {
        "parent": {"topic": topic, "payload": "mid"},
        "children": [{"topic": "elsewhere", "payload": 1}],
    }
    body = {"parent": {"topic": topic, "payload": "top"}, "children": [inner]}
    async with serving(redis_url, tokens=tokens) as api:
        auth = {"Authorization": f"Bearer {secret}"}
        status, _, _ = await api.call("POST", "/v1/flows", body, headers=auth)
        assert status == 403
        inner["children"] = [{"topic": topic, "payload": 1, "delay_ms": -1}]
        got = await api.call("POST", "/v1/flows", body, headers=auth)
        assert got[0] == 422 and "delay_ms" in str(got[1]), got
        status, _, _ = await api.call("GET", f"/v1/topics/{topic}", headers=auth)
        assert status == 404  # nothing written: not even the topic


async def test_awaiting_jobs_have_a_list_of_their_own_in_every_face(
    redis_url: str, api: Served, topic: str
) -> None:
    """Awaiting jobs were listed as pending, due 9999-12-31, and a bulk action on the
    pending list took them; now they are the awaiting list's, which a cancel acts on."""
    with Client.from_url(redis_url) as client, Admin.from_url(redis_url) as admin:
        first = client.enqueue(topic, "first", delay=600, key="k")
        then = client.enqueue(topic, "then", after=first, key="k")
        flow = client.enqueue_flow(JobSpec(topic, "p"), [JobSpec(topic, "c", delay=600)])
        pending = {first, flow.children[0].job_id}
        awaiting = {then, flow.id}
        assert {j.id for j in admin.jobs(topic, "pending")} == pending
        rows = admin.jobs(topic, "awaiting")
        assert {j.id for j in rows} == awaiting and {j.due_ms for j in rows} == {None}
        assert [j.id for j in admin.jobs(topic, "awaiting", key="k")] == [then]
        assert [j.id for j in admin.jobs(topic, "pending", key="k")] == [first]
        _, listed, _ = await api.call("GET", f"/v1/topics/{topic}/jobs?state=awaiting")
        assert {j["id"] for j in listed["jobs"]} == awaiting
        _, listed, _ = await api.call("GET", f"/v1/topics/{topic}/jobs?state=pending")
        assert {j["id"] for j in listed["jobs"]} == pending
        shown = run_wheelq(
            "jobs", "list", topic, "--state", "awaiting", "--json", "--redis-url", redis_url
        )
        assert shown.returncode == 0, shown.stderr
        assert {json.loads(line)["id"] for line in shown.stdout.splitlines()} == awaiting
        html, _ = await get(api, f"/ui/topics/{topic}/jobs?state=awaiting")
        assert all(job in html for job in awaiting) and first not in html
        assert admin.bulk(topic, "cancel", state="pending", dry_run=True).matched == 2
        done = admin.bulk(topic, "cancel", state="awaiting")
        assert (done.matched, done.acted) == (2, 2)
        assert {client.get(topic, j).state for j in awaiting} == {JobState.CANCELLED}
        assert {client.get(topic, j).state for j in pending} == {JobState.PENDING}
