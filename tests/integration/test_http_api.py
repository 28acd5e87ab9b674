"""The HTTP API against a real server, through uvicorn on a loopback port: every endpoint,
and every error as a problem (RFC 9457) naming the field, with nothing changed by bad
input."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import dedicated_server
from tests.support.waiting import eventually
from tests.support.web import PROBLEM, Served, assert_problem, serving
from wheelq import Job, Worker
from wheelq.core.flow import TopicLimits
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.core.settings import ServeSettings
from wheelq.embedded import ServerBinary
from wheelq.errors import DuplicateJobError
from wheelq.metrics.server import READY_PING_S
from wheelq.testing.proxy import CuttingProxy


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url, settings=ServeSettings(max_body_bytes=64 * 1024)) as served:
        yield served


async def pending(api: Served, topic: str) -> int:
    status, body, _ = await api.call("GET", f"/v1/topics/{topic}")
    return 0 if status == 404 else int(body["pending"]) + int(body["ready"])


# --- enqueue ---------------------------------------------------------------------------------


async def test_enqueue_with_a_delay_answers_201_with_the_due_time_and_where_to_look(
    api: Served, topic: str
) -> None:
    before = time.time() * 1000
    status, body, headers = await api.call(
        "POST", f"/v1/topics/{topic}/jobs", {"payload": {"to": "ada"}, "delay_ms": 60_000}
    )
    assert status == 201
    assert body["topic"] == topic and body["id"]
    assert before + 60_000 - 50 <= body["due_ms"] <= time.time() * 1000 + 60_000 + 50
    assert headers["Location"] == f"/v1/topics/{topic}/jobs/{body['id']}"
    status, job, _ = await api.call("GET", headers["Location"])
    assert status == 200
    assert (job["state"], job["payload"], job["due_ms"]) == (
        "pending",
        {"to": "ada"},
        job["due_ms"],
    )
    assert abs(job["due_ms"] - body["due_ms"]) <= 5


def not_json(sent: str, body: bytes) -> dict[str, Any]:
    """aiohttp's arguments that send `body` other than as JSON."""
    if sent == "form data":  # application/x-www-form-urlencoded, as curl -d sends
        return {"data": {"body": body.decode()}}
    if sent == "no content type":
        return {"data": body, "skip_auto_headers": ["Content-Type"]}
    if sent == "text/plain, chunked":  # no Content-Length: never the fast path

        async def chunks() -> AsyncIterator[bytes]:
            yield body

        return {"data": chunks(), "headers": {"Content-Type": "text/plain"}}
    return {"data": body, "headers": {"Content-Type": sent}}


@pytest.mark.parametrize(
    "sent", ["text/plain", "text/plain, chunked", "no content type", "form data"]
)
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/jobs", b'{"payload": 1}'),  # the fast path when sent as JSON
        ("/jobs/batch", b'{"jobs": [{"payload": 1}]}'),  # the fast path too
        ("/groups/g/pull", b"{}"),  # only the FastAPI route
    ],
)
async def test_a_body_not_sent_as_json_is_415_saying_what_to_send(
    api: Served, topic: str, path: str, body: bytes, sent: str
) -> None:
    url = f"{api.base}/v1/topics/{topic}{path}"
    assert (await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 0}))[0] == 201
    assert (await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "g"}))[0] == 201
    before = await pending(api, topic)
    async with api.http.post(url, **not_json(sent, body)) as r:
        problem = await r.json(content_type=None)
        headers = r.headers
    assert (r.status, problem["status"]) == (415, 415), problem
    assert headers["Content-Type"].startswith(PROBLEM)
    assert "Content-Type: application/json" in problem["detail"], problem
    assert await pending(api, topic) == before
    # The same body, sent as JSON in any spelling, on either path, is taken.
    for ctype in ("application/json", "Application/JSON; charset=utf-8"):
        async with api.http.post(url, data=body, headers={"Content-Type": ctype}) as r:
            assert r.status in (200, 201), await r.text()


@pytest.mark.parametrize(
    ("at", "expected_ms"),
    [
        ("2031-01-02T03:04:05.250Z", 1925089445250),
        ("2031-01-02T04:04:05.250+01:00", 1925089445250),
        (1925089445250, 1925089445250),
    ],
)
async def test_enqueue_at_an_rfc3339_time_or_epoch_ms(
    api: Served, topic: str, at: object, expected_ms: int
) -> None:
    status, body, _ = await api.call(
        "POST", f"/v1/topics/{topic}/jobs", {"payload": 1, "at": at, "id": "a1"}
    )
    assert (status, body["id"], body["due_ms"]) == (201, "a1", expected_ms)
    _, job, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/a1")
    assert job["due_ms"] == expected_ms


async def test_a_job_enqueued_over_http_carries_its_key_and_order_to_the_stream(
    api: Served, topic: str, redis_sync: redis.Redis
) -> None:
    path = f"/v1/topics/{topic}/jobs"
    body = {"payload": 1, "id": "j", "key": "tenant-7", "ordered": True}
    assert (await api.call("POST", path, body))[0] == 201
    shards = await api.service.admin.create_topic(topic)
    ready = ShardKeys(topic, shard_of("j", shards)).ready
    ((_, fields),) = redis_sync.xrange(ready)
    assert (fields[b"key"], fields[b"ordered"]) == (b"tenant-7", b"1")
    status, problem, _ = await api.call("POST", path, {"payload": 1, "ordered": True})
    assert (status, problem["field"]) == (422, "ordered")


async def test_an_existing_id_is_409_unless_replaced(api: Served, topic: str) -> None:
    path = f"/v1/topics/{topic}/jobs"
    assert (await api.call("POST", path, {"payload": 1, "id": "x", "delay_ms": 9000}))[0] == 201
    assert_problem(await api.call("POST", path, {"payload": 2, "id": "x"}), 409, "id")
    status, _, _ = await api.call(
        "POST", path, {"payload": 3, "id": "x", "replace": True, "delay_ms": 9000}
    )
    assert status == 201
    _, job, _ = await api.call("GET", f"{path}/x")
    assert job["payload"] == 3


async def test_a_duplicate_id_says_how_to_replace_it_as_each_interface_spells_it(
    api: Served, topic: str
) -> None:
    path = f"/v1/topics/{topic}/jobs"
    assert (await api.call("POST", path, {"payload": 1, "id": "x", "delay_ms": 9000}))[0] == 201
    again = json.dumps({"payload": 2, "id": "x"}).encode()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the FastAPI route
        yield again

    for body in (again, chunked()):
        headers = {"Content-Type": "application/json"}
        async with api.http.post(api.base + path, data=body, headers=headers) as r:
            problem = await r.json(content_type=None)
        assert (r.status, problem["field"]) == (409, "id"), problem
        assert problem["detail"] == (
            f"id 'x' already pending on topic {topic!r}; send \"replace\": true to replace it"
        )
    with pytest.raises(DuplicateJobError) as raised:
        await api.service.client.enqueue(topic, 2, job_id="x")
    assert str(raised.value) == (
        f"job_id 'x' already pending on topic {topic!r}; pass replace=True to replace it"
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"payload": 1, "delay_ms": -1}, "delay_ms"),
        ({"payload": 1, "delay_ms": 1.5}, "delay_ms"),
        ({"payload": 1, "delay_ms": 10**13}, "delay_ms"),
        ({"payload": 1, "delay_ms": 5, "at": 5}, "at"),
        ({"payload": 1, "at": "tomorrow"}, "at"),
        ({"payload": 1, "at": "2031-01-02T03:04:05"}, "at"),
        ({"payload": 1, "at": -5}, "at"),
        ({"payload": 1, "id": ""}, "id"),
        ({"payload": 1, "id": "a\nb"}, "id"),
        ({"payload": 1, "id": "x" * 257}, "id"),
        ({"payload": 1, "max_attempts": 0}, "max_attempts"),
        ({"payload": 1, "max_attempts": 1001}, "max_attempts"),
        ({"payload": 1, "colour": 3}, "colour"),  # no such option
        ({"delay_ms": 5}, "payload"),
        ({"payload": 1, "callback": {"url": "ftp://x/"}}, "callback.url"),
        ({"payload": 1, "callback": {"url": "http://127.0.0.1:9/"}}, "callback.url"),
        ({"payload": 1, "callback": {"url": "http://10.0.0.1/"}}, "callback.url"),
        (
            {"payload": 1, "callback": {"url": "https://e.com/", "timeout_ms": 0}},
            "callback.timeout_ms",
        ),
        (
            {"payload": 1, "callback": {"url": "https://e.com/", "headers": {"Host": "x"}}},
            "callback.headers",
        ),
        ({"payload": "x" * 40_000}, "payload"),
    ],
)
async def test_bad_input_is_a_problem_naming_the_field_and_writes_nothing(
    redis_url: str, topic: str, body: dict[str, object], field: str
) -> None:
    async with serving(redis_url, max_payload_bytes=30_000) as api:
        assert (await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 0}))[0] == 201
        assert_problem(await api.call("POST", f"/v1/topics/{topic}/jobs", body), 422, field)
        assert await pending(api, topic) == 1


async def test_a_bad_topic_name_a_non_json_body_and_a_huge_body_change_nothing(
    api: Served, topic: str
) -> None:
    assert_problem(
        await api.call("POST", "/v1/topics/bad%20name/jobs", {"payload": 1}), 422, "topic"
    )
    status, body, headers = await api.call(
        "POST",
        f"/v1/topics/{topic}/jobs",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert_problem((status, body, headers), 422, None)
    big = {"payload": "x" * (65 * 1024)}
    assert_problem(await api.call("POST", f"/v1/topics/{topic}/jobs", big), 413, None)
    chunked = await api.call(
        "POST",
        f"/v1/topics/{topic}/jobs",
        data=_chunks(b'{"payload": "' + b"x" * (65 * 1024) + b'"}'),
        headers={"Content-Type": "application/json"},
    )
    assert_problem(chunked, 413, None)
    assert await pending(api, topic) == 0


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 8192):
        yield data[i : i + 8192]


# --- batch -----------------------------------------------------------------------------------


async def test_a_batch_answers_each_job_duplicates_as_409(api: Served, topic: str) -> None:
    path = f"/v1/topics/{topic}/jobs"
    assert (await api.call("POST", path, {"payload": 0, "id": "taken", "delay_ms": 9000}))[0] == 201
    jobs = [
        {"payload": 1, "delay_ms": 9000},
        {"payload": 2, "id": "taken"},
        {"payload": 3, "id": "mine", "at": "2031-01-02T03:04:05Z"},
    ]
    status, body, _ = await api.call("POST", f"{path}/batch", {"jobs": jobs})
    assert status == 200
    first, dup, mine = body["results"]
    assert first["status"] == 201 and first["id"] and first["due_ms"] > 0
    assert (dup["status"], dup["id"]) == (409, "taken")
    assert (mine["status"], mine["id"], mine["due_ms"]) == (201, "mine", 1925089445000)
    assert await pending(api, topic) == 3


async def test_a_bad_job_refuses_the_whole_batch(api: Served, topic: str) -> None:
    jobs = [{"payload": 1}, {"payload": 2, "delay_ms": -5}]
    got = await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs})
    assert_problem(got, 422, "jobs[1].delay_ms")
    bad_at = [{"payload": 1}, {"payload": 2, "at": "soon"}]
    got = await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": bad_at})
    assert_problem(got, 422, "jobs[1].at")
    twice = [{"payload": 1, "id": "a"}, {"payload": 2, "id": "a"}]
    got = await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": twice})
    assert_problem(got, 422, "jobs[1].id")
    assert_problem(
        await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": []}), 422, "jobs"
    )
    assert await pending(api, topic) == 0


async def test_a_batch_over_max_batch_is_refused(redis_url: str, topic: str) -> None:
    async with serving(redis_url, settings=ServeSettings(max_batch=2)) as api:
        jobs = [{"payload": i} for i in range(3)]
        got = await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs})
        assert_problem(got, 422, "jobs")
        assert await pending(api, topic) == 0


# --- look up, cancel, reschedule -------------------------------------------------------------


async def test_a_job_id_with_a_slash_or_spaces_is_looked_up_cancelled_and_moved(
    api: Served, topic: str
) -> None:
    path = f"/v1/topics/{topic}/jobs"
    job_id = "orders/42 é"
    status, _, headers = await api.call(
        "POST", path, {"payload": 1, "id": job_id, "delay_ms": 60_000}
    )
    assert status == 201 and headers["Location"] == f"{path}/orders%2F42%20%C3%A9"
    status, job, _ = await api.call("GET", f"{path}/orders%2F42%20%C3%A9")
    assert (status, job["id"]) == (200, job_id)
    assert (await api.call("PATCH", f"{path}/orders/42 é", {"delay_ms": 90_000}))[0] == 200
    assert (await api.call("DELETE", f"{path}/orders%2F42%20%C3%A9"))[0] == 204


async def test_a_result_is_long_polled_shown_with_the_job_and_409_for_a_dead_job(
    redis_url: str, api: Served, topic: str
) -> None:
    done = (await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 20, "id": "a/b"}))[1]
    dead = await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": -1, "max_attempts": 1})
    later = await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1, "delay_ms": 60_000})
    path = f"/v1/topics/{topic}/jobs"
    await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "default"})  # before a worker
    status, body, _ = await api.call("GET", f"{path}/{later[1]['id']}/result?wait_ms=50")
    assert (status, body["state"], body["result"]) == (202, "pending", None), body
    waiting = asyncio.create_task(api.call("GET", f"{path}/a/b/result?wait_ms=20000"))

    def handler(job: Job) -> Any:
        if job.payload < 0:
            raise ValueError("negative")
        return {"n": job.payload + 1, "raw": b"\x01"}

    async with Worker.from_url(redis_url, topic, handler, claim_interval_ms=100):
        status, body, _ = await asyncio.wait_for(waiting, 10)
        assert status == 200, body
        assert body == {
            "id": "a/b",
            "topic": topic,
            "group": "default",
            "state": "succeeded",
            "result": {"n": 21, "raw": {"$bytes": "AQ=="}},
        }
        got = await api.call("GET", f"{path}/{dead[1]['id']}/result?wait_ms=10000")
        assert_problem(got, 409, None)
        assert "dead" in got[1]["detail"] and "negative" in got[1]["detail"]
    status, job, _ = await api.call("GET", f"{path}/a/b")
    assert status == 200 and job["groups"][0]["result"] == {"n": 21, "raw": {"$bytes": "AQ=="}}
    assert (await api.call("GET", f"{path}/nobody/result"))[0] == 404
    for method in ("PATCH", "DELETE"):  # a result is only read (not the job a/b/result)
        assert_problem(await api.call(method, f"{path}/a/b/result", {"delay_ms": 1}), 405, None)
    assert done["id"] == "a/b"


async def test_a_result_of_a_group_that_does_not_exist_is_404_at_once(
    api: Served, topic: str
) -> None:
    later = {"payload": 1, "id": "j", "delay_ms": 60_000}
    assert (await api.call("POST", f"/v1/topics/{topic}/jobs", later))[0] == 201
    for wait_ms in (0, 30_000):
        path = f"/v1/topics/{topic}/jobs/j/result?group=nope&wait_ms={wait_ms}"
        got = await asyncio.wait_for(api.call("GET", path), 5)  # not after the 30 s wait
        assert_problem(got, 404, "group")
        assert "'nope'" in got[1]["detail"], got


@pytest.mark.parametrize(
    "query", ["wait_ms=-1", "wait_ms=30001", "wait_ms=abc", "wait_ms=1.5", "group="]
)
async def test_a_bad_result_query_is_422_naming_it(api: Served, topic: str, query: str) -> None:
    await api.service.admin.create_topic(topic)  # else: 404, no such topic
    got = await api.call("GET", f"/v1/topics/{topic}/jobs/x/result?{query}")
    assert_problem(got, 422, query.split("=", maxsplit=1)[0])


async def test_cancel_is_204_then_409_and_an_unknown_job_is_404(api: Served, topic: str) -> None:
    path = f"/v1/topics/{topic}/jobs"
    await api.call("POST", path, {"payload": 1, "id": "c", "delay_ms": 60_000})
    assert (await api.call("DELETE", f"{path}/c"))[:2] == (204, None)
    assert_problem(await api.call("DELETE", f"{path}/c"), 409, None)
    _, job, _ = await api.call("GET", f"{path}/c")
    assert job["state"] == "cancelled"
    assert_problem(await api.call("DELETE", f"{path}/nope"), 404, None)
    assert_problem(await api.call("GET", f"{path}/nope"), 404, None)
    assert_problem(await api.call("GET", "/v1/topics/never-made/jobs/x"), 404, None)


async def test_pause_and_resume_answer_what_is_paused_and_refuse_bad_names(
    api: Served, topic: str
) -> None:
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1, "delay_ms": 60_000})
    await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "g"})
    status, body, _ = await api.call("POST", f"/v1/topics/{topic}/pause?group=g")
    assert status == 200 and body["topic"] == topic and body["since_ms"] is None, body
    assert set(body["groups"]) == {"g"}
    _, groups, _ = await api.call("GET", f"/v1/topics/{topic}/groups")
    assert [g["paused_since_ms"] for g in groups["groups"]] == [body["groups"]["g"]]
    status, body, _ = await api.call("POST", f"/v1/topics/{topic}/pause")
    assert status == 200 and isinstance(body["since_ms"], int), body
    _, stats, _ = await api.call("GET", f"/v1/topics/{topic}")
    assert stats["paused_since_ms"] == body["since_ms"] and set(stats["paused_groups"]) == {"g"}
    attacks = [
        ("POST", f"/v1/topics/{topic}-nope/pause", 404, "topic"),
        ("POST", f"/v1/topics/{topic}/pause?group=nope", 404, "group"),
        ("POST", f"/v1/topics/{topic}/pause?group=" + "g" * 201, 422, "group"),
        ("POST", f"/v1/topics/{topic}/pause?group=", 422, "group"),
        ("POST", f"/v1/topics/{topic}/pause?group=%07bell", 422, "group"),
        ("POST", f"/v1/topics/{topic}/resume?group=g", 422, "group"),  # the topic is paused
        ("GET", f"/v1/topics/{topic}/pause", 405, None),
    ]
    for method, path, code, field in attacks:
        assert_problem(await api.call(method, path), code, field)
    _, after, _ = await api.call("GET", f"/v1/topics/{topic}")
    assert (after["paused_since_ms"], after["paused_groups"]) == (
        stats["paused_since_ms"],
        stats["paused_groups"],
    )  # nothing changed
    status, body, _ = await api.call("POST", f"/v1/topics/{topic}/resume")
    assert (status, body["since_ms"], body["groups"]) == (200, None, {}), body


async def test_limits_are_read_and_set_and_bad_ones_change_nothing(api: Served, topic: str) -> None:
    path = f"/v1/topics/{topic}/limits"
    assert_problem(await api.call("GET", path), 404, "topic")  # no such topic yet
    await api.service.admin.create_topic(topic)
    status, body, _ = await api.call("GET", path)
    unset = {"topic": topic, "priority_credit_ms": 1000, "fair": False, "fair_weights": {}}
    assert (status, body) == (200, {"max_pending": None, "max_ready": None, **unset})
    status, body, _ = await api.call("PUT", path, {"max_pending": 10, "max_ready": 5})
    assert (status, body) == (200, {"max_pending": 10, "max_ready": 5, **unset})
    assert await api.service.admin.limits(topic) == TopicLimits(10, 5)
    attacks: list[tuple[dict[str, object], str]] = [
        ({"max_pending": 0}, "max_pending"),
        ({"max_pending": -1}, "max_pending"),
        ({"max_pending": 1.5}, "max_pending"),
        ({"max_pending": "10"}, "max_pending"),
        ({"max_pending": 2**41}, "max_pending"),
        ({"max_ready": True}, "max_ready"),
        ({"max_total": 1}, "max_total"),
    ]
    for bad, field in attacks:
        assert_problem(await api.call("PUT", path, bad), 422, field)
    assert await api.service.admin.limits(topic) == TopicLimits(10, 5)  # nothing changed
    status, body, _ = await api.call("PUT", path, {})
    assert (status, body["max_pending"], body["max_ready"]) == (200, None, None)
    assert await api.service.admin.limits(topic) == TopicLimits()


async def test_the_due_line_settings_are_set_patched_and_bad_ones_change_nothing(
    api: Served, topic: str
) -> None:
    path = f"/v1/topics/{topic}/limits"
    settings = {"priority_credit_ms": 250, "fair": True, "fair_weights": {"big": 5, "é": 2}}
    status, body, _ = await api.call("PUT", path, {"max_ready": 7, **settings})  # creates it
    assert (status, body) == (200, {"topic": topic, "max_pending": None, "max_ready": 7} | settings)
    want = TopicLimits(None, 7, 250, True, {"big": 5, "é": 2})
    assert await api.service.admin.limits(topic) == want
    # PUT: both limits as sent (left out: none); the due line's settings left out: unchanged.
    status, body, _ = await api.call("PUT", path, {"max_pending": 9})
    assert (status, body) == (200, {"topic": topic, "max_pending": 9, "max_ready": None} | settings)
    # PATCH: only what is sent; a limit sent as null is removed.
    status, body, _ = await api.call("PATCH", path, {"max_ready": 3, "fair": False})
    assert (status, body["max_pending"], body["max_ready"], body["fair"]) == (200, 9, 3, False)
    status, body, _ = await api.call("PATCH", path, {"max_pending": None, "fair_weights": {}})
    shown = (body["max_pending"], body["max_ready"], body["fair_weights"])
    assert (status, shown) == (200, (None, 3, {}))
    now = await api.service.admin.limits(topic)
    assert now == TopicLimits(None, 3, 250, False, {})
    attacks: list[tuple[dict[str, object], str]] = [
        ({"priority_credit_ms": -1}, "priority_credit_ms"),
        ({"priority_credit_ms": 86_400_001}, "priority_credit_ms"),
        ({"priority_credit_ms": 1.5}, "priority_credit_ms"),
        ({"priority_credit_ms": "1000"}, "priority_credit_ms"),
        ({"fair": 1}, "fair"),
        ({"fair": "true"}, "fair"),
        ({"fair_weights": {"a": 0}}, "fair_weights.a"),
        ({"fair_weights": {"a": 1001}}, "fair_weights.a"),
        ({"fair_weights": {"a": True}}, "fair_weights.a"),
        ({"fair_weights": {"a": "2"}}, "fair_weights.a"),
        ({"fair_weights": ["a"]}, "fair_weights"),
        ({"fair_weights": {"": 2}}, "fair_weights"),
        ({"fair_weights": {"a\nb": 2}}, "fair_weights"),
        ({"fair_weights": {"é" * 200: 2}}, "fair_weights"),  # 400 UTF-8 bytes
    ]
    for method in ("PUT", "PATCH"):
        for bad, field in attacks:
            got = await api.call(method, path, {"max_ready": 1, "fair": True, **bad})
            assert_problem(got, 422, None)
            assert got[1]["field"].startswith(field), (bad, got[1])  # type: ignore[index]
    assert await api.service.admin.limits(topic) == now  # nothing changed


async def test_dropping_a_topic_is_409_while_jobs_wait_then_204_with_force(
    api: Served, topic: str
) -> None:
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1, "delay_ms": 60_000})
    got = await api.call("DELETE", f"/v1/topics/{topic}")
    assert_problem(got, 409, None)
    assert "?force=true" in got[1]["detail"]
    assert_problem(await api.call("DELETE", f"/v1/topics/{topic}?force=maybe"), 422, "force")
    assert topic in await api.service.admin.topics()  # nothing dropped
    assert (await api.call("DELETE", f"/v1/topics/{topic}?force=true"))[0] == 204
    assert topic not in await api.service.admin.topics()
    assert_problem(await api.call("DELETE", f"/v1/topics/{topic}"), 404, "topic")


async def test_reschedule_moves_a_pending_job_and_is_409_once_fired(
    api: Served, topic: str
) -> None:
    path = f"/v1/topics/{topic}/jobs"
    await api.call("POST", path, {"payload": 1, "id": "r", "delay_ms": 60_000})
    status, body, _ = await api.call("PATCH", f"{path}/r", {"at": "2031-01-02T03:04:05Z"})
    assert (status, body["due_ms"]) == (200, 1925089445000)
    _, job, _ = await api.call("GET", f"{path}/r")
    assert job["due_ms"] == 1925089445000
    assert (await api.call("PATCH", f"{path}/r", {"delay_ms": 0}))[0] == 200  # fires now
    _, job, _ = await api.call("GET", f"{path}/r")
    assert job["state"] == "ready"
    assert_problem(await api.call("PATCH", f"{path}/r", {"delay_ms": 5}), 409, None)
    assert_problem(await api.call("PATCH", f"{path}/nope", {"delay_ms": 5}), 404, None)
    assert_problem(await api.call("PATCH", f"{path}/r", {}), 422, "delay_ms")
    assert_problem(await api.call("PATCH", f"{path}/r", {"delay_ms": 1, "at": 1}), 422, "at")


# --- topics and dead letters -----------------------------------------------------------------


async def test_topics_are_listed_a_page_at_a_time_and_stats_by_shard(
    api: Served, topic: str
) -> None:
    for name in (f"{topic}-a", f"{topic}-b", f"{topic}-c"):
        await api.call("POST", f"/v1/topics/{name}/jobs", {"payload": 1, "delay_ms": 60_000})
    names: list[str] = []
    after = f"{topic}-"
    while True:
        status, body, _ = await api.call("GET", "/v1/topics", params={"limit": "1", "after": after})
        assert status == 200 and len(body["topics"]) <= 1
        names += [t["topic"] for t in body["topics"] if t["topic"].startswith(topic)]
        if body["next"] is None or not body["next"].startswith(topic):
            break
        after = body["next"]
    assert names == [f"{topic}-a", f"{topic}-b", f"{topic}-c"]
    status, stats, _ = await api.call("GET", f"/v1/topics/{topic}-a")
    assert status == 200 and stats["pending"] == 1
    assert sum(s["pending"] for s in stats["shards"]) == 1
    assert_problem(await api.call("GET", f"/v1/topics/{topic}-zzz"), 404, None)
    assert_problem(await api.call("GET", "/v1/topics", params={"limit": "0"}), 422, "limit")


async def test_topic_stats_and_groups_are_the_client_s_records_as_the_document_says(
    api: Served, topic: str
) -> None:
    """Both bodies: the client's `TopicStats` and `GroupStats` with their totals as fields,
    `name` as ``group`` and no spool, each key in the OpenAPI document with its type and
    (but names and shards) a description."""
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 0, "delay_ms": 60_000})
    await dead_letters(api, topic, 2)
    jobs = [{"payload": i} for i in range(7)]
    assert (await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs}))[0] == 200
    _, pulled, _ = await api.call("POST", f"/v1/topics/{topic}/groups/g/pull", {"max": 3})
    assert len(pulled["jobs"]) == 3

    status, stats_body, _ = await api.call("GET", f"/v1/topics/{topic}")
    status_groups, groups_body, _ = await api.call("GET", f"/v1/topics/{topic}/groups")
    assert (status, status_groups) == (200, 200)
    stats = await api.service.admin.stats(topic)
    groups = await api.service.admin.groups(topic)
    assert stats is not None and groups is not None and len(groups) == 1
    totals = (stats.pending, stats.ready, stats.in_flight, stats.dead)
    assert 0 not in totals and len(set(totals)) == 4, totals  # a swapped key shows
    expected_stats = {
        "topic": topic,
        "pending": stats.pending,
        "ready": stats.ready,
        "in_flight": stats.in_flight,
        "in_stream": stats.in_stream,
        "dead": stats.dead,
        "far": stats.far,
        "unled": stats.unled,
        "expired": stats.expired,
        "waiting": stats.waiting,
        "shards": [asdict(s) for s in stats.shards],
        "paused_since_ms": None,
        "paused_groups": {},
        "far_horizon_ms": stats.far_horizon_ms,
    }
    assert stats_body == expected_stats and list(stats_body) == list(expected_stats)
    group = groups[0]
    (served,) = groups_body["groups"]
    assert 0 <= served["idle_ms"] <= group.idle_ms  # read again later: idle longer
    expected_group = {
        "group": "g",
        "stream": "ready",
        "consumers": 1,
        "in_flight": group.in_flight,
        "ready": group.ready,
        "idle_ms": served["idle_ms"],
        "shards": [asdict(s) for s in group.shards],
        "paused_since_ms": None,
    }
    assert groups_body == {"topic": topic, "groups": [expected_group]}
    assert (group.in_flight, group.ready) == (stats.in_flight, stats.ready)

    _, doc, _ = await api.call("GET", "/openapi.json")
    schemas = doc["components"]["schemas"]
    ok = doc["paths"]["/v1/topics/{topic}"]["get"]["responses"]["200"]
    stats_doc = schemas[ok["content"]["application/json"]["schema"]["$ref"].split("/")[-1]]
    group_doc = schemas[
        schemas["ConsumerGroupsOut"]["properties"]["groups"]["items"]["$ref"].split("/")[-1]
    ]
    kinds = {"topic": ["string"], "group": ["string"], "stream": ["string"]}
    kinds |= {"shards": ["array"], "idle_ms": ["integer", "null"]}
    kinds |= {"paused_since_ms": ["integer", "null"], "paused_groups": ["object"]}
    for body, schema in ((stats_body, stats_doc), (served, group_doc)):
        assert list(schema["properties"]) == schema["required"] == list(body)
        for name, prop in schema["properties"].items():
            assert name in {"topic", "group", "shards"} or prop.get("description"), name
            got = [p.get("type") for p in prop.get("anyOf", [prop])]
            assert got == kinds.get(name, ["integer"]), name


async def dead_letters(api: Served, topic: str, n: int) -> list[str]:
    """Make `n` dead letters through a pull consumer's nacks (1 attempt each)."""
    jobs = [{"payload": i, "id": f"d{i}", "max_attempts": 1} for i in range(n)]
    await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs})
    await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "g"})
    group = f"/v1/topics/{topic}/groups/g"
    _, pulled, _ = await api.call("POST", f"{group}/pull", {"max": n})
    receipts = [j["receipt"] for j in pulled["jobs"]]
    assert len(receipts) == n
    _, nacked, _ = await api.call("POST", f"{group}/nack", {"receipts": receipts})
    assert (nacked["retried"], nacked["dead_lettered"]) == (0, n)
    assert {r["outcome"] for r in nacked["results"]} == {"dead_lettered"}
    return [f"d{i}" for i in range(n)]


async def test_dead_letters_are_listed_in_pages_replayed_and_purged(
    api: Served, topic: str
) -> None:
    await dead_letters(api, topic, 5)
    dead = f"/v1/topics/{topic}/dead"
    refs: list[str] = []
    after = None
    while True:
        params = {"limit": "2"} | ({"after": after} if after else {})
        status, page, _ = await api.call("GET", dead, params=params)
        assert status == 200
        refs += [d["ref"] for d in page["dead"]]
        assert all(d["reason"] == "failed" and d["group"] == "g" for d in page["dead"])
        if page["next"] is None:
            break
        after = page["next"]
    assert len(refs) == len(set(refs)) == 5
    assert_problem(await api.call("POST", f"{dead}/replay", {}), 422, "refs")
    assert_problem(
        await api.call("POST", f"{dead}/replay", {"refs": refs, "all": True}), 422, "refs"
    )
    assert_problem(await api.call("POST", f"{dead}/replay", {"refs": ["nope"]}), 422, "refs[0]")
    replayed = {"count": 2, "skipped": 0}
    assert (await api.call("POST", f"{dead}/replay", {"refs": refs[:2]}))[1] == replayed
    status, body, _ = await api.call("DELETE", dead, params=[("ref", refs[2])])
    assert (status, body) == (200, {"count": 1})
    assert (await api.call("DELETE", dead, params={"all": "true"}))[1] == {"count": 2}
    assert_problem(await api.call("DELETE", dead), 422, "refs")
    assert (await api.call("GET", dead))[1]["dead"] == []


# --- health, metrics, errors -----------------------------------------------------------------


async def test_health_readiness_and_metrics(api: Served, topic: str) -> None:
    assert (await api.call("GET", "/healthz"))[:2] == (200, {"status": "ok"})
    assert (await api.call("GET", "/readyz"))[:2] == (200, {"status": "ready"})
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1})
    status, text, headers = await api.call("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert "wheelq_client_enqueued_total 1.0" in text
    assert "wheelq_http_enqueue_batched_jobs_total 1.0" in text
    assert 'wheelq_http_requests_total{route="/v1/topics/{topic}/jobs",status="201"} 1.0' in text


async def test_the_service_s_own_parts_report_in_the_metrics(api: Served) -> None:
    def up(text: str) -> dict[str, float]:
        return {
            s.labels["part"]: s.value
            for f in text_string_to_metric_families(text)
            if f.name == "wheelq_part_up"
            for s in f.samples
            if s.labels["role"] == "serve"
        }

    assert api.service.status()["parts"].keys() == {"clock", "unled", "sampler"}
    running = {"clock": 1.0, "unled": 1.0, "sampler": 1.0}
    assert up((await api.call("GET", "/metrics"))[1]) == running
    sampler = api.service.sampler
    assert sampler is not None
    await sampler.stop()  # as if its loop had ended: the metric says so
    assert up((await api.call("GET", "/metrics"))[1]) == {**running, "sampler": 0.0}


async def test_unknown_paths_and_methods_are_problems(api: Served) -> None:
    assert_problem(await api.call("GET", "/v2/nothing"), 404, None)
    assert_problem(await api.call("PUT", "/v1/topics"), 405, None)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/topics", {"GET"}),
        ("PUT", "/v1/topics/t/pause", {"POST"}),
        ("PUT", "/v1/topics/t/jobs", {"GET", "POST", "DELETE", "PATCH"}),
        ("PUT", "/v1/topics/t/jobs/j", {"GET", "PATCH", "DELETE"}),
        ("OPTIONS", "/v1/topics/t/jobs/batch", {"POST"}),  # not /jobs/{job_id}'s
        ("PUT", "/v1/topics/t/jobs/j/result", {"GET"}),
    ],
)
async def test_a_405_names_every_method_the_path_takes_in_allow(
    api: Served, method: str, path: str, allowed: set[str]
) -> None:
    """FastAPI keeps an included router whole, so a walk of `router.routes` found no route
    and answered ``Allow:`` empty, which RFC 9110 forbids for a 405. It names what the API
    documents for the path's most literal template."""
    status, _, headers = await api.call(method, path)
    assert status == 405
    assert set(headers.get("Allow", "").replace(" ", "").split(",")) == allowed, headers


async def test_the_openapi_document_and_docs_are_served(api: Served) -> None:
    status, doc, _ = await api.call("GET", "/openapi.json")
    assert status == 200
    paths = set(doc["paths"])
    assert {
        "/v1/topics/{topic}/jobs",
        "/v1/topics/{topic}/jobs/batch",
        "/v1/topics/{topic}/jobs/{job_id}",
        "/v1/topics",
        "/v1/topics/{topic}",
        "/v1/topics/{topic}/dead",
        "/v1/topics/{topic}/dead/replay",
        "/v1/topics/{topic}/groups/{group}/pull",
        "/v1/topics/{topic}/groups/{group}/ack",
        "/v1/topics/{topic}/groups/{group}/nack",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= paths
    assert (await api.call("GET", "/docs"))[0] == 200


ASSET = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["']([^"']+)["']""", re.IGNORECASE)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_pages_load_everything_from_the_service(api: Served, page: str) -> None:
    """A host without internet access still renders them: no CDN, no font service."""
    status, html, headers = await api.call("GET", page)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "://" not in html, "an absolute URL: another host"
    assets = ASSET.findall(html)
    assert any(a.endswith(".js") for a in assets), assets
    for asset in assets:
        assert asset.startswith("/") and not asset.startswith("//"), asset
        async with api.http.get(api.base + asset) as r:
            assert r.status == 200 and await r.read(), asset


async def test_readyz_answers_every_probe_within_the_ping_bound_while_redis_hangs(
    redis_url: str,
) -> None:
    """Redis hung, the connection open (the proxy holds every byte): a flood of probes is
    answered 503 within READY_PING_S, through one PING, and 200 once Redis answers."""
    proxy = CuttingProxy(urlsplit(redis_url).port or 0)
    async with proxy, serving(f"redis://127.0.0.1:{proxy.port}/0") as api:
        assert (await api.call("GET", "/readyz"))[0] == 200
        sent = proxy.accepted
        proxy.stall()

        async def probe() -> tuple[tuple[int, Any, dict[str, str]], float]:
            started = time.monotonic()
            got = await api.call("GET", "/readyz")
            return got, time.monotonic() - started

        for (status, body, headers), took in await asyncio.gather(*[probe() for _ in range(20)]):
            assert_problem((status, body, headers), 503, None)
            assert body["detail"] == f"no answer within {READY_PING_S:g} s", body
            assert took < 2 * READY_PING_S, took  # not the socket timeout
        assert proxy.accepted - sent <= 1  # one PING waits (a connection at most)
        proxy.unstall()
        await eventually(lambda: _status(api, "/readyz", 200), timeout_s=10, what="ready again")


async def _status(api: Served, path: str, status: int) -> bool:
    return (await api.call("GET", path))[0] == status


async def test_readyz_is_503_while_redis_is_down_and_200_once_it_is_back(
    server_binary: ServerBinary,
) -> None:
    with dedicated_server(server_binary) as server:
        async with serving(server.url) as api:
            assert (await api.call("GET", "/readyz"))[0] == 200
            server.kill()
            assert_problem(await api.call("GET", "/readyz"), 503, None)
            assert (await api.call("GET", "/healthz"))[0] == 200, "the process itself is up"
            server.restart()
            assert (await api.call("GET", "/readyz"))[0] == 200
