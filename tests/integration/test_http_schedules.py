"""Schedules over HTTP against a real server: each endpoint does what `Client.schedule` and
its kin do (checked through the library), and every bad name, body or time is a problem
naming the field that changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio

from tests.support.web import Served, assert_problem, serving
from wheelq import AsyncAdmin, AsyncClient
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.core.options import RUN
from wheelq.runtime.role import executor_of
from wheelq.store import schedules as sched
from wheelq.web import schedule_json

pytestmark = pytest.mark.cluster_too

NIGHTLY = {"payload": {"report": "daily"}, "cron": "30 2 * * *", "tz": "Europe/Berlin"}


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        yield c


def base(topic: str, name: str = "nightly") -> str:
    return f"/v1/topics/{topic}/schedules/{name}"


def same(body: dict[str, Any], expected: dict[str, Any]) -> bool:
    """The HTTP answer is the library's schedule (its next run from a clock a moment apart)."""
    return {k: v for k, v in body.items() if k != "next_run_ms"} == {
        k: v for k, v in expected.items() if k != "next_run_ms"
    }


async def test_a_schedule_is_created_updated_listed_paused_resumed_and_deleted(
    api: Served, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    status, made, _ = await api.call("PUT", base(topic), NIGHTLY)
    assert status == 201, made
    stored = await admin.get_schedule("nightly", topic)
    assert stored is not None and same(made, schedule_json(stored, 0))
    assert made["cron"] == "30 2 * * *" and made["tz"] == "Europe/Berlin"
    assert made["payload"] == {"report": "daily"} and made["next_run_ms"] > 0

    update = {"payload": 2, "every_ms": 60_000, "start": "2030-01-01T00:00:00Z"}
    status, changed, _ = await api.call("PUT", base(topic), update)
    assert status == 200, changed
    assert (changed["cron"], changed["every_ms"], changed["payload"]) == (None, 60_000, 2)
    assert changed["start_ms"] == 1_893_456_000_000

    await api.call("PUT", base(topic, "hourly"), {"payload": 3, "cron": "@hourly"})
    status, listed, _ = await api.call("GET", f"/v1/topics/{topic}/schedules")
    assert status == 200 and [s["name"] for s in listed["schedules"]] == ["hourly", "nightly"]

    status, paused, _ = await api.call("POST", base(topic) + "/pause")
    assert status == 200 and paused["paused"] and paused["next_run_ms"] is None, paused
    assert (await admin.get_schedule("nightly", topic)).paused  # type: ignore[union-attr]
    status, resumed, _ = await api.call("POST", base(topic) + "/resume")
    assert status == 200 and not resumed["paused"] and resumed["next_run_ms"], resumed

    assert (await api.call("DELETE", base(topic)))[0] == 204
    assert await admin.get_schedule("nightly", topic) is None
    for method, path in [
        ("DELETE", base(topic)),
        ("GET", base(topic)),
        ("POST", base(topic) + "/pause"),
        ("POST", base(topic) + "/resume"),
    ]:
        assert_problem(await api.call(method, path), 404, "name")
    assert [s.name for s in await admin.schedules(topic)] == ["hourly"]


BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"cron": "0 * * * *"}, "payload"),
    ({"payload": 1}, "cron"),  # neither cron nor every_ms
    ({"payload": 1, "cron": "0 * * * *", "every_ms": 60_000}, "cron"),
    ({"payload": 1, "cron": "61 * * * *"}, "cron"),
    ({"payload": 1, "cron": "* * * * * *"}, "cron"),  # seconds: use every_ms
    ({"payload": 1, "cron": "x" * 201}, "cron"),
    ({"payload": 1, "every_ms": 99}, "every_ms"),
    ({"payload": 1, "every_ms": 1.5}, "every_ms"),
    ({"payload": 1, "every_ms": "60000"}, "every_ms"),
    ({"payload": 1, "cron": "0 * * * *", "tz": "Mars/Olympus_Mons"}, "tz"),
    ({"payload": 1, "cron": "0 * * * *", "tz": "America"}, "tz"),  # a directory of zones
    ({"payload": 1, "cron": "0 * * * *", "tz": "../../etc/passwd"}, "tz"),
    ({"payload": 1, "every_ms": 60_000, "tz": "Europe/Berlin"}, "tz"),
    ({"payload": 1, "cron": "0 * * * *", "start": "tomorrow"}, "start"),
    ({"payload": 1, "cron": "0 * * * *", "start": "2030-01-01T00:00:00"}, "start"),  # no offset
    ({"payload": 1, "cron": "0 * * * *", "start": -1}, "start"),
    ({"payload": 1, "cron": "0 * * * *", "start": 2**60}, "start"),
    ({"payload": 1, "cron": "0 * * * *", "start": 2_000, "end": 1_000}, "end"),
    # item 7: out of the range every time of a schedule takes (ten years on, as a job's at)
    ({"payload": 1, "cron": "* * * * *", "start": "9999-12-31T23:59:59Z"}, "start"),
    ({"payload": 1, "every_ms": 1000, "start": "9999-12-31T23:59:59Z"}, "start"),
    ({"payload": 1, "cron": "* * * * *", "start": "9999-12-31T23:00:00-05:00"}, "start"),
    ({"payload": 1, "cron": "* * * * *", "start": 253_402_300_799_000}, "start"),
    ({"payload": 1, "cron": "* * * * *", "end": "9999-12-31T23:59:59Z"}, "end"),
    (
        {"payload": 1, "cron": "0 0 29 2 *", "tz": "Asia/Tokyo", "end": "2204-02-29T00:00:00Z"},
        "end",
    ),
    ({"payload": 1, "cron": "0 * * * *", "misfire": "never"}, "misfire"),
    ({"payload": 1, "cron": "0 * * * *", "max_catch_up": 0}, "max_catch_up"),
    ({"payload": 1, "cron": "0 * * * *", "max_catch_up": 10_001}, "max_catch_up"),
    ({"payload": 1, "cron": "0 * * * *", "max_attempts": 0}, "max_attempts"),
    ({"payload": 1, "cron": "0 * * * *", "callback": {"url": "http://127.0.0.1:9/"}}, "url"),
    ({"payload": 1, "cron": "0 * * * *", "colour": 3}, "colour"),  # no such option
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
async def test_a_bad_schedule_is_a_problem_naming_the_field_and_writes_nothing(
    api: Served,
    client: AsyncClient,
    admin: AsyncAdmin,
    topic: str,
    body: dict[str, Any],
    field: str,
) -> None:
    assert (await api.call("PUT", base(topic), NIGHTLY))[0] == 201
    before = await admin.get_schedule("nightly", topic)
    code, problem, headers = await api.call("PUT", base(topic), body)
    assert_problem((code, problem, headers), 422, None)
    assert problem["field"].rsplit(".", 1)[-1] == field, problem
    assert await admin.get_schedule("nightly", topic) == before  # the old one stands
    assert (await api.call("PUT", base(topic, "other"), body))[0] == 422
    assert [s.name for s in await admin.schedules(topic)] == ["nightly"]


@pytest.mark.parametrize(
    "name", ["a" * 101, "with space", "semi;colon", "%00", "caf%C3%A9", "a%2Fb"]
)
async def test_a_bad_schedule_name_is_refused_in_every_verb(
    api: Served, client: AsyncClient, admin: AsyncAdmin, topic: str, name: str
) -> None:
    for method, suffix, body in [
        ("PUT", "", NIGHTLY),
        ("GET", "", None),
        ("DELETE", "", None),
        ("POST", "/pause", None),
    ]:
        code, problem, _ = await api.call(method, base(topic, name) + suffix, body)
        assert code in (404, 422), (method, name, code, problem)  # a slash: no such route
    assert await admin.schedules(topic) == []


async def test_a_far_start_is_refused_before_anything_is_stored(
    api: Served, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    """Item 7: ``start: 9999-12-31T23:59:59Z`` answered 500 (OverflowError) and was stored, so
    the listing answered 500 too; now 422 naming the range, and no topic, no schedule."""
    body = {"payload": 1, "cron": "* * * * *", "start": "9999-12-31T23:59:59Z"}
    problem = await api.call("PUT", base(topic), body)
    assert_problem(problem, 422, "start")
    assert "ten years from now" in problem[1]["detail"], problem
    assert topic not in await admin.topics()
    assert await admin.schedules(topic) == []
    assert (await api.call("GET", f"/v1/topics/{topic}/schedules"))[0] in (200, 404)


async def test_a_stored_record_that_cannot_be_read_is_listed_with_its_error(
    api: Served,
    client: AsyncClient,
    admin: AsyncAdmin,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    """Item 7: one unreadable record (an older wheelq's, or written by hand) made the list, the
    schedule and the console page answer 500; now each shows it, with the reason."""
    assert (await api.call("PUT", base(topic), NIGHTLY))[0] == 201
    shards = await admin.create_topic(topic)  # made by the PUT: its count
    home = ShardKeys(topic, shard_of("broken", shards))
    put = sched.put(home, "broken", b"\x93no", False)  # as by hand: unchecked
    await executor_of(redis_async).run([sched.index(home), put])
    try:
        status, listed, _ = await api.call("GET", f"/v1/topics/{topic}/schedules")
        assert status == 200, listed
        by_name = {s["name"]: s for s in listed["schedules"]}
        assert sorted(by_name) == ["broken", "nightly"]
        assert by_name["nightly"]["error"] is None
        assert by_name["broken"]["error"] and by_name["broken"]["next_run_ms"] is None
        status, one, _ = await api.call("GET", base(topic, "broken"))
        assert status == 200 and one == by_name["broken"], one
        status, page, _ = await api.call("GET", f"/ui/topics/{topic}/schedules")
        assert status == 200 and "unreadable" in page
    finally:
        assert (await api.call("DELETE", base(topic, "broken")))[0] == 204


async def test_a_schedule_put_over_http_stores_every_option_its_runs_carry(
    redis_url: str, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    """Each option of the runs the table gives a JSON field (and max_attempts, callback) is
    stored as `Admin.schedule` stores it, shown in the answer and on the console's page."""
    given = {"text": "tenant-1", "flag": True, "int": 3, "priority": 0}
    fields = {o.name: given[o.kind or ""] for o in RUN if o.http is not None}
    hook = "https://hooks.example/run"
    body = NIGHTLY | fields | {"max_attempts": 7, "callback": {"url": hook}}
    async with serving(redis_url, allow_private=True) as api:
        status, made, _ = await api.call("PUT", base(topic), body)
        assert status == 201, made
        stored = await admin.get_schedule("nightly", topic)
        assert stored is not None and same(made, schedule_json(stored, 0))
        assert made["max_attempts"] == 7 and made["callback"] == hook
        assert {n: made[n] for n in fields} == fields
        await admin.schedule("same", topic, NIGHTLY["payload"], cron="0 0 * * *", max_attempts=7,
                             callback=hook, **fields)  # fmt: skip
        by_admin = await admin.get_schedule("same", topic)
        assert by_admin is not None and by_admin.options == stored.options
        status, page, _ = await api.call("GET", f"/ui/topics/{topic}/schedules")
        assert status == 200 and hook in page
        for name, value in fields.items():
            assert f'{name} <span class="mono">{value}</span>' in page, name
