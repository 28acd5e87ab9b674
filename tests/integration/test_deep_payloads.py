"""Payloads nested deep (issue 43, item 4): refused past `MAX_PAYLOAD_DEPTH` levels in every
face that enqueues, and one stored deeper by an older version (or straight into Redis) is
still shown by every reader, and costs its pull batch nothing but itself."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

import wheelq.core.payload
from tests.support.cli import run_wheelq
from tests.support.clients import admin_of
from tests.support.web import assert_problem, serving
from wheelq import Admin, AsyncClient, Client, PayloadTooDeepError
from wheelq.core.job import Field, pack_envelope
from wheelq.core.keys import ShardKeys
from wheelq.core.payload import MAX_PAYLOAD_DEPTH, jsonable
from wheelq.web.problems import MAX_BODY_DEPTH

pytestmark = [
    pytest.mark.cluster_too,
    pytest.mark.both_servers,  # the servers' Lua cjson and cmsgpack nesting
]

DEEP = 500


def nested(levels: int) -> Any:
    """1 inside `levels` maps and lists, alternating."""
    value: Any = 1
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


def truncated(shown: Any) -> tuple[int, Any]:
    """How deep the `$truncated` marker sits in a rendered `nested` payload, and the marker."""
    depth = 0
    while not (isinstance(shown, dict) and "$truncated" in shown):
        shown = shown[0] if isinstance(shown, list) else shown["k"]
        depth += 1
    return depth, shown


async def test_a_payload_nested_500_levels_deep_is_refused_by_every_enqueue_face(
    redis_url: str, topic: str
) -> None:
    deep = nested(DEEP)
    over = nested(MAX_PAYLOAD_DEPTH + 1)
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        client.enqueue(topic, nested(MAX_PAYLOAD_DEPTH), job_id="at-the-limit")
        for payload in (deep, over):
            for call in (
                lambda p=payload: client.enqueue(topic, p),
                lambda p=payload: client.enqueue_many(topic, [{"payload": 1}, {"payload": p}]),
                lambda p=payload: client.enqueue_bulk(topic, [1, p]),
                lambda p=payload: admin.schedule("s", topic, p, every_ms=60_000),
            ):
                with pytest.raises(PayloadTooDeepError, match=f"at most {MAX_PAYLOAD_DEPTH} lev"):
                    call()
    async with AsyncClient.from_url(redis_url) as aclient:
        with pytest.raises(PayloadTooDeepError) as info:
            await aclient.enqueue(topic, deep)
        assert info.value.parameter == "payload"
        with pytest.raises(PayloadTooDeepError, match=r"items\[1\]"):
            await aclient.enqueue_many(topic, [{"payload": 1}, {"payload": over}])
        with pytest.raises(PayloadTooDeepError, match=r"payloads\[1\]"):
            await aclient.enqueue_bulk(topic, [1, over])

    async with serving(redis_url) as api:
        jobs = f"/v1/topics/{topic}/jobs"
        for payload in (deep, over):  # 500: past the JSON parser's limit; 101: past ours
            got = await api.call("POST", jobs, {"payload": payload})
            assert_problem(got, 422, "payload")
            assert f"at most {MAX_PAYLOAD_DEPTH} levels" in got[1]["detail"]
            got = await api.call(
                "POST", f"{jobs}/batch", {"jobs": [{"payload": 1}, {"payload": payload}]}
            )
            assert got[0] == 422 and got[1]["field"] in ("payload", "jobs[1].payload"), got[1]
            assert f"at most {MAX_PAYLOAD_DEPTH} levels" in got[1]["detail"]
            got = await api.call(
                "PUT", f"/v1/topics/{topic}/schedules/s", {"payload": payload, "every_ms": 60_000}
            )
            assert got[0] == 422 and "payload" in got[1]["field"], got[1]

    done = run_wheelq("enqueue", topic, json.dumps(deep), "--redis-url", redis_url)
    assert done.returncode == 2, done
    (line,) = done.stderr.strip().splitlines()
    assert "payload" in line and f"at most {MAX_PAYLOAD_DEPTH} levels" in line

    with Admin.from_url(redis_url) as admin:  # nothing of it was written
        stats = admin.stats(topic)
        assert stats is not None
        assert sum(s.pending + s.ready for s in stats.shards) == 1  # the one at the limit
        assert admin.schedules(topic) == []


async def test_a_stored_payload_nested_500_levels_deep_is_shown_and_costs_its_pull_batch_nothing(
    redis_url: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: the job's page, its HTTP answer and any pull whose batch held it answered 500
    (RecursionError); the pull's other jobs were taken and never handed out, so they were
    dead-lettered for `deliveries` without any consumer seeing them."""
    async with serving(redis_url) as api:
        client = api.service.client
        admin = admin_of(client)
        with monkeypatch.context() as old_version:  # as a version without the limit wrote it
            old_version.setattr(wheelq.core.payload, "MAX_PAYLOAD_DEPTH", 10_000)
            await client.enqueue(topic, {"n": 0}, job_id="before")
            await client.enqueue(topic, nested(DEEP), job_id="deep")
            await client.enqueue(topic, {"n": 2}, job_id="after")

        status, info, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/deep")
        assert status == 200, info
        assert truncated(info["payload"])[0] == MAX_PAYLOAD_DEPTH
        async with api.http.get(f"{api.base}/ui/topics/{topic}/jobs/deep") as page:
            assert page.status == 200
            assert "$truncated" in await page.text()
        shown = run_wheelq("job", topic, "deep", "--json", "--redis-url", redis_url)
        assert shown.returncode == 0, shown
        assert truncated(json.loads(shown.stdout)["payload"])[0] == MAX_PAYLOAD_DEPTH

        status, body, _ = await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "g"})
        assert status == 201, body
        status, pulled, _ = await api.call("POST", f"/v1/topics/{topic}/groups/g/pull", {"max": 10})
        assert status == 200, pulled
        assert [(j["id"], j["payload"]) for j in pulled["jobs"]] == [
            ("before", {"n": 0}),
            ("after", {"n": 2}),
        ]
        receipts = [j["receipt"] for j in pulled["jobs"]]
        status, acked, _ = await api.call(
            "POST", f"/v1/topics/{topic}/groups/g/ack", {"receipts": receipts}
        )
        assert (status, acked["acked"]) == (200, 2)
        status, dead, _ = await api.call("GET", f"/v1/topics/{topic}/dead")
        assert status == 200, dead
        ((letter,),) = [dead["dead"]]
        assert (letter["job_id"], letter["reason"]) == ("deep", "malformed")
        assert f"deeper than {MAX_PAYLOAD_DEPTH} levels" in letter["error"]
        assert truncated(letter["payload"])[0] == MAX_PAYLOAD_DEPTH

        # A replay would run it again as no enqueue may: named, it is refused in every face
        # (nothing replayed); replaying all leaves it where it is.
        replay = f"/v1/topics/{topic}/dead/replay"
        assert_problem(await api.call("POST", replay, {"refs": [letter["ref"]]}), 422, "payload")
        with pytest.raises(PayloadTooDeepError, match=f"at most {MAX_PAYLOAD_DEPTH} levels"):
            await admin.replay(topic, [letter["ref"]])
        done = run_wheelq("dlq", "replay", topic, letter["ref"], "--redis-url", redis_url)
        assert done.returncode == 2 and "payload" in done.stderr, done
        assert await admin.replay(topic) == 0
        status, dead, _ = await api.call("GET", f"/v1/topics/{topic}/dead")
        assert [d["ref"] for d in dead["dead"]] == [letter["ref"]]


LIST_DEPTHS = (150, 500, 3000)
"""Past the bound; past Python's recursion limit; past msgpack's own 1,024 levels."""
NOW_MS = 1_800_000_000_000


def deep_list(levels: int) -> bytes:
    """msgpack of 1 inside `levels` one-item lists, byte by byte (msgpack cannot pack it
    past 511 levels; an older version or a foreign writer could store it)."""
    return b"\x91" * levels + b"\x01"


def shown_list() -> Any:
    """How every face renders a `deep_list` past the bound: 100 lists, then the marker."""
    shown: Any = {"$truncated": f"a list nested deeper than {MAX_PAYLOAD_DEPTH} levels"}
    for _ in range(MAX_PAYLOAD_DEPTH):
        shown = [shown]
    return shown


def store_deep_lists(r: redis.Redis, topic: str) -> None:
    """For each of `LIST_DEPTHS`: a pending job, a fired one and a dead letter, as an older
    version could have stored them (shard 0 of a one-shard topic)."""
    keys = ShardKeys(topic, 0)
    for levels in LIST_DEPTHS:
        data = deep_list(levels)
        r.hset(keys.jobs, f"pending-{levels}", pack_envelope(data, 1, 3, NOW_MS))
        r.zadd(keys.delayed, {f"pending-{levels}": NOW_MS + 3_600_000})
        fields: dict[Any, Any] = dict.fromkeys(Field.READY, NOW_MS)
        fields |= {Field.ID: f"ready-{levels}", Field.TOPIC: topic, Field.PAYLOAD: data}
        fields |= {Field.ATTEMPT: 1, Field.MAX_ATTEMPTS: 3}
        r.hset(keys.history, f"ready-{levels}", r.xadd(keys.ready, fields))
        dead = {**fields, Field.ID: f"dead-{levels}", Field.REASON: "failed"}
        r.xadd(keys.dead, dead | {Field.ERROR: "x", Field.GROUP: "g", Field.ENTRY: "1-0"})


async def test_a_stored_list_past_the_bound_renders_the_same_truncated_in_every_face(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """Bug: stored lists nested 150 levels came back whole over HTTP and `--json` (the CLI's
    text and the console cut them at 100); 500 levels answered 500 (RecursionError) on GET
    of the job (pending, ready or dead) and of the dead letters; a pending job nested 3,000
    levels answered 500 (MalformedJobError) on GET and on the console's page."""
    expected = shown_list()
    async with serving(redis_url) as api:
        client = api.service.client
        admin = admin_of(client)
        await admin.create_topic(topic, 1)
        store_deep_lists(redis_sync, topic)
        for levels in LIST_DEPTHS:
            for job_id in (f"pending-{levels}", f"ready-{levels}"):
                info = await client.get(topic, job_id)
                assert jsonable(info.payload) == expected, job_id  # the library's rendering
                status, body, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{job_id}")
                assert (status, body["payload"]) == (200, expected), (job_id, status)
                async with api.http.get(f"{api.base}/ui/topics/{topic}/jobs/{job_id}") as page:
                    assert page.status == 200, job_id
                    assert "a list nested deeper than 100 levels" in await page.text()
        status, dead, _ = await api.call("GET", f"/v1/topics/{topic}/dead")
        assert status == 200, dead
        assert [d["payload"] for d in dead["dead"]] == [expected] * len(LIST_DEPTHS)

        # An envelope that does not decode at all is said so (409), never a 500.
        redis_sync.hset(ShardKeys(topic, 0).jobs, "garbled", b"\xc1")
        redis_sync.zadd(ShardKeys(topic, 0).delayed, {"garbled": NOW_MS + 3_600_000})
        got = await api.call("GET", f"/v1/topics/{topic}/jobs/garbled")
        assert (got[0], got[1]["type"]) == (409, "urn:wheelq:problem:malformed"), got
        assert "'garbled'" in got[1]["detail"] and "cannot be decoded" in got[1]["detail"]
        async with api.http.get(f"{api.base}/ui/topics/{topic}/jobs/garbled") as page:
            assert page.status == 409 and "cannot be decoded" in await page.text()
        async with api.http.get(f"{api.base}/ui/topics/{topic}/dead") as page:
            assert page.status == 200

    url = ["--redis-url", redis_url]
    for job_id in ("pending-3000", "ready-500", "ready-150"):
        shown = run_wheelq("job", topic, job_id, "--json", *url)
        assert shown.returncode == 0, shown
        assert json.loads(shown.stdout)["payload"] == expected, job_id
    listed = run_wheelq("dlq", "list", topic, "--json", *url)
    assert listed.returncode == 0, listed
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [row["payload"] for row in rows] == [expected] * len(LIST_DEPTHS)


def deep_json(levels: int) -> str:
    """JSON text of 1 inside `levels` lists (json.dumps recurses once per level)."""
    return "[" * levels + "1" + "]" * levels


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    """`data` as a body aiohttp sends chunked (no Content-Length)."""
    yield data


BODIES = [  # (method, path under the topic, body with {deep} where the deep value goes, field)
    ("POST", "jobs", '{"payload": {deep}}', "payload"),
    ("POST", "jobs/batch", '{"jobs": [{"payload": 1}, {"payload": {deep}}]}', "jobs[1].payload"),
    ("PUT", "schedules/s", '{"every_ms": 60000, "payload": {deep}}', "payload"),
    ("PUT", "limits", '{"max_pending": {deep}}', "max_pending"),
    ("POST", "groups/g/pull", '{"max": {deep}}', "max"),
    ("POST", "groups/g/ack", '{"receipts": {deep}}', "receipts"),
    ("POST", "groups", '{"name": {deep}}', "name"),
    ("POST", "dead/replay", '{"refs": {deep}}', "refs"),
    ("PATCH", "jobs/j", '{"delay_ms": {deep}}', "delay_ms"),
    ("PUT", "schedules/s", '{"every_ms": 60000, "payload": 1, "callback": {"headers": {deep}}}',
     "callback.headers"),
]  # fmt: skip


@pytest.mark.parametrize("levels", [300, 500, 1000, 5000])
async def test_a_body_nested_past_the_bound_is_the_same_short_422_on_every_route(
    redis_url: str, topic: str, levels: int
) -> None:
    """Bug: `PUT .../schedules/{name}` with a payload 500 levels deep answered a 422 whose
    detail was a path of ~500 ``[0]``; from 1,000 levels it, `PUT .../limits` and the pull
    answered 400 "There was an error parsing the body", while `POST .../jobs` answered the
    documented 422 naming `payload`."""
    async with serving(redis_url) as api:
        await api.service.admin.create_topic(topic, 1)
        headers = {"Content-Type": "application/json"}
        for method, path, body, field in BODIES:
            data = body.replace("{deep}", deep_json(levels))
            for chunked in (False, True):  # with a Content-Length, and without one
                sent: Any = chunks(data.encode()) if chunked else data.encode()

                status, got, _ = await api.call(
                    method, f"/v1/topics/{topic}/{path}", data=sent, headers=headers
                )
                assert (status, got["field"]) == (422, field), (method, path, chunked, got)
                assert len(got["detail"]) < 200, got["detail"]
                bound = MAX_PAYLOAD_DEPTH if field.endswith("payload") else MAX_BODY_DEPTH
                assert f"at most {bound} levels" in got["detail"], got["detail"]
        # Nothing was written.
        assert await api.service.admin.schedules(topic) == []
        stats = await api.service.admin.stats(topic)
        assert stats is not None and sum(s.pending for s in stats.shards) == 0
