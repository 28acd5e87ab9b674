"""`at` over HTTP: epoch ms from 2001-01-01 (a number below can only be seconds) to ten years
from now, the same bound the library's `at=` has; refused with a 422 naming the field, its
unit and the range, on the fast enqueue path and on the FastAPI route alike, single and batch,
and on reschedule. And a due time already stored beyond what a datetime holds is answered by
the job lookup and the dashboard, never a 500."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from tests.support.web import Served, serving
from wheelq.core.due import MAX_DELAY_S
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.web.models import MIN_AT_MS

PROBLEM = "application/problem+json"
TEN_YEARS_MS = MAX_DELAY_S * 1000


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def post(api: Served, path: str, body: Any, route: str) -> tuple[int, Any]:
    """POST `body` as JSON; "fast" sends its length (the ASGI fast path takes it), "fastapi"
    sends it chunked (no length: the FastAPI route takes it)."""
    raw = json.dumps(body).encode()
    data: Any = raw if route == "fast" else _chunks(raw)
    headers = {"Content-Type": "application/json"}
    status, answer, got = await api.call("POST", path, data=data, headers=headers)
    if status >= 400:
        assert got["Content-Type"].startswith(PROBLEM), answer
    return status, answer


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def bad_ats() -> list[tuple[object, tuple[str, ...]]]:
    """(at, what the problem's detail says beyond the field, unit and range)."""
    seconds = now_ms() // 1000 + 3600
    return [
        (seconds, (f"{seconds} looks like seconds: send {seconds * 1000}",)),
        (MIN_AT_MS - 1, ()),
        (0, ()),
        (-5, ()),
        (now_ms() + TEN_YEARS_MS + 60_000, ()),
        (now_ms() * 1000, ()),
    ]


def assert_at_problem(status: int, problem: Any, field: str, says: tuple[str, ...]) -> None:
    assert status == 422, problem
    assert problem["field"] == field, problem
    detail = problem["detail"]
    for part in ("at is epoch ms", "milliseconds since 1970-01-01", f"[{MIN_AT_MS}, "):
        assert part in detail, detail
    assert "ten years from now" in detail, detail
    for part in says:
        assert part in detail, detail


@pytest.mark.parametrize("route", ["fast", "fastapi"])
async def test_an_at_that_can_only_be_seconds_or_is_too_far_is_refused_single_and_batch(
    api: Served, topic: str, route: str
) -> None:
    path = f"/v1/topics/{topic}/jobs"
    for at, says in bad_ats():
        status, problem = await post(api, path, {"payload": 1, "id": "s", "at": at}, route)
        assert_at_problem(status, problem, "at", says)
        jobs = [{"payload": 1, "id": "b0"}, {"payload": 2, "id": "b1", "at": at}]
        status, problem = await post(api, f"{path}/batch", {"jobs": jobs}, route)
        assert_at_problem(status, problem, "jobs[1].at", says)
    far = "2200-01-01T00:00:00Z"
    status, problem = await post(api, path, {"payload": 1, "id": "s", "at": far}, route)
    assert (status, problem["field"]) == (422, "at"), problem
    assert "at most ten years from now" in problem["detail"]
    for job_id in ("s", "b0", "b1"):
        assert (await api.call("GET", f"{path}/{job_id}"))[0] == 404  # nothing written

    soon = now_ms() + 3_600_000
    status, made = await post(api, path, {"payload": 1, "id": "ok", "at": soon}, route)
    assert (status, made["due_ms"]) == (201, soon), made
    latest = now_ms() + TEN_YEARS_MS - 60_000
    jobs = [{"payload": 1, "id": "b2", "at": MIN_AT_MS}, {"payload": 2, "id": "b3", "at": latest}]
    status, made = await post(api, f"{path}/batch", {"jobs": jobs}, route)
    assert status == 200, made
    assert [r["status"] for r in made["results"]] == [201, 201]
    assert made["results"][1]["due_ms"] == latest
    _, job, _ = await api.call("GET", f"{path}/b3")
    assert (job["state"], job["due_ms"]) == ("pending", latest)


async def test_reschedule_refuses_the_same_ats(api: Served, topic: str) -> None:
    path = f"/v1/topics/{topic}/jobs"
    assert (await api.call("POST", path, {"payload": 1, "id": "r", "delay_ms": 60_000}))[0] == 201
    _, before, _ = await api.call("GET", f"{path}/r")
    for at, says in bad_ats():
        status, problem, _ = await api.call("PATCH", f"{path}/r", {"at": at})
        assert_at_problem(status, problem, "at", says)
    _, after, _ = await api.call("GET", f"{path}/r")
    assert after["due_ms"] == before["due_ms"]


async def test_the_openapi_document_says_at_is_epoch_ms_and_its_range(api: Served) -> None:
    _, doc, _ = await api.call("GET", "/openapi.json")
    at = doc["components"]["schemas"]["JobIn"]["properties"]["at"]
    assert "epoch milliseconds" in at["description"]
    assert str(MIN_AT_MS) in at["description"] and "ten years from now" in at["description"]
    assert at["minimum"] == MIN_AT_MS


@pytest.mark.parametrize(
    "score", [1_795_577_999_000_000, -(10**15), float("inf")], ids=["58869", "year-0", "inf"]
)
async def test_a_stored_due_time_no_datetime_holds_is_answered_and_shown(
    api: Served, topic: str, redis_sync: redis.Redis, score: float
) -> None:
    # Written before `at` had a bound, or by hand: lookup, answer and page still work.
    path = f"/v1/topics/{topic}/jobs"
    assert (await api.call("POST", path, {"payload": 1, "id": "far", "delay_ms": 60_000}))[0] == 201
    shards = await api.service.admin.create_topic(topic)
    keys = ShardKeys(topic, shard_of("far", shards))
    assert redis_sync.zadd(keys.delayed, {"far": score}, xx=True, ch=True) == 1
    status, job, _ = await api.call("GET", f"{path}/far")
    assert (status, job["state"]) == (200, "pending"), job
    assert job["due_ms"] == (2**63 - 1 if score == float("inf") else score)
    status, page, _ = await api.call("GET", f"/ui/topics/{topic}/jobs/far")
    assert status == 200, page
    assert f"{job['due_ms']} ms since the epoch" in page
