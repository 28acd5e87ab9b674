"""A topic's consumer groups for operators, on real servers: `groups()` lists them with their
consumers, entries in flight and entries not yet delivered; `delete_group()` deletes one on
every shard, refused while it has entries in flight unless forced; the same through
``wheelq groups`` and ``/v1/topics/{topic}/groups``.

Client tests run through `Client` and `AsyncClient` (`tests.support.clients`). Groups are
made and read with plain stream commands, so what the test expects is counted apart from
the code under test.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.support.cli import assert_one_line_error, run_wheelq
from tests.support.clients import MakeClient, admin_of
from tests.support.scripts import Runner
from tests.support.waiting import eventually
from tests.support.web import serving
from wheelq import (
    Admin,
    AsyncAdmin,
    AsyncClient,
    Client,
    EnqueueItem,
    GroupBusyError,
    GroupNotFoundError,
    InvalidArgumentError,
    Job,
    JobState,
    Worker,
)
from wheelq.admin import groups as grp
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.core.settings import ClientSettings
from wheelq.producer.operations import Producer
from wheelq.store import groups as store_groups
from wheelq.store import history
from wheelq.store.call import Call
from wheelq.store.executor import SyncExecutor, drive
from wheelq.store.groups import GroupDrop
from wheelq.store.scripts import GroupOutcome
from wheelq.web.auth import Token

SHARDS = 4
JOBS = 24
HOUR_MS = 3_600_000


@pytest.fixture
def client(make_client: MakeClient) -> Any:
    return make_client()


def group_names(r: redis.Redis, stream: str) -> set[str]:
    if not r.exists(stream):
        return set()
    return {_text(g["name"]) for g in r.xinfo_groups(stream)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read(r: redis.Redis, stream: str, group: str, consumer: str, count: int) -> int:
    """XREADGROUP up to `count` entries (in flight from then on); how many came."""
    got = r.xreadgroup(group, consumer, {stream: ">"}, count=count)
    return sum(len(entries) for _, entries in got or ())


async def fired_topic(client: Any, r: redis.Redis, topic: str) -> list[ShardKeys]:
    """A topic of SHARDS shards with JOBS jobs due now (in its ready streams at once), as
    many on each shard."""
    await admin_of(client).create_topic(topic, SHARDS)
    await client.enqueue_many(topic, _even_jobs())
    shards = all_shards(topic, SHARDS)
    assert [r.xlen(k.ready) for k in shards] == [JOBS // SHARDS] * SHARDS
    return shards


def sync_fired_topic(client: Client, r: redis.Redis, topic: str) -> list[ShardKeys]:
    """`fired_topic` with a blocking client."""
    Admin.of(client).create_topic(topic, SHARDS)
    client.enqueue_many(topic, _even_jobs())
    shards = all_shards(topic, SHARDS)
    assert [r.xlen(k.ready) for k in shards] == [JOBS // SHARDS] * SHARDS
    return shards


def _even_jobs() -> list[EnqueueItem]:
    ids = [j for s in range(SHARDS) for j in _ids_of_shard(s)[: JOBS // SHARDS]]
    return [EnqueueItem(payload=n, job_id=j) for n, j in enumerate(ids)]


def _ids_of_shard(shard: int) -> list[str]:
    return [j for j in (f"j{n}" for n in range(1000)) if shard_of(j, SHARDS) == shard]


# --- groups() -------------------------------------------------------------------------------


@pytest.mark.cluster_too
async def test_groups_lists_each_group_with_consumers_in_flight_and_ready(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    shards = await fired_topic(client, redis_sync, topic)
    per_shard: dict[int, int] = {}
    for k in shards:
        redis_sync.xgroup_create(k.ready, "busy", id="0")
        redis_sync.xgroup_create(k.ready, "stale", id="0")
        # Two workers of "busy" hold up to 2 entries each on every shard.
        per_shard[k.shard] = read(redis_sync, k.ready, "busy", "w1", 2)
        per_shard[k.shard] += read(redis_sync, k.ready, "busy", "w2", 2)
    redis_sync.xgroup_create(shards[1].callbacks, "deliver", id="0", mkstream=True)
    redis_sync.xgroup_create(shards[1].callbacks, "busy", id="0")
    held = sum(per_shard.values())
    assert 0 < held < JOBS

    listed = await admin.groups(topic)

    assert [(g.stream, g.name) for g in listed] == [
        ("ready", "busy"),
        ("ready", "stale"),
        ("callbacks", "busy"),
        ("callbacks", "deliver"),
    ]
    busy, stale, cb_busy, deliver = listed
    assert (busy.consumers, busy.in_flight, busy.ready) == (2, held, JOBS - held)
    assert busy.idle_ms is not None and busy.idle_ms >= 0
    assert [(s.shard, s.in_flight, s.consumers) for s in busy.shards] == [
        (
            k.shard,
            per_shard[k.shard],
            2,  # XREADGROUP makes its consumer, whatever it reads
        )
        for k in shards
    ]
    assert (stale.consumers, stale.in_flight, stale.ready, stale.idle_ms) == (0, 0, JOBS, None)
    assert [s.ready for s in stale.shards] == [redis_sync.xlen(k.ready) for k in shards]
    assert [(s.shard, s.in_flight, s.ready) for s in deliver.shards] == [(1, 0, 0)]
    assert [s.shard for s in cb_busy.shards] == [1]


async def test_groups_of_an_unknown_topic_is_none_and_of_a_topic_without_groups_empty(
    client: Any, admin: Any, topic: str
) -> None:
    assert await admin.groups(topic) is None
    await admin.create_topic(topic, SHARDS)
    assert await admin.groups(topic) == []


# --- delete_group() -------------------------------------------------------------------------


@pytest.mark.cluster_too
async def test_delete_group_is_refused_while_entries_are_in_flight_and_deletes_nothing(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    shards = await fired_topic(client, redis_sync, topic)
    for k in shards:
        redis_sync.xgroup_create(k.ready, "busy", id="0")
    held = read(redis_sync, shards[2].ready, "busy", "w1", 3)  # in flight on one shard only
    assert held

    with pytest.raises(GroupBusyError) as refused:
        await admin.delete_group(topic, "busy")

    assert (refused.value.group, refused.value.in_flight, refused.value.deleted) == (
        "busy",
        held,
        0,
    )
    message = str(refused.value)
    assert f"{held} entries in flight" in message and "force=True" in message
    assert "nothing was deleted" in message
    assert [("busy" in group_names(redis_sync, k.ready)) for k in shards] == [True] * SHARDS


@pytest.mark.cluster_too
async def test_a_forced_delete_drops_the_group_on_every_shard_and_keeps_the_others(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    shards = await fired_topic(client, redis_sync, topic)
    for k in shards:
        redis_sync.xgroup_create(k.ready, "busy", id="0")
        redis_sync.xgroup_create(k.ready, "other", id="0")
    held = sum(read(redis_sync, k.ready, "busy", "w1", 1) for k in shards)

    deleted = await admin.delete_group(topic, "busy", force=True)

    assert (deleted.name, deleted.stream, deleted.shards, deleted.in_flight) == (
        "busy",
        "ready",
        SHARDS,
        held,
    )
    assert [group_names(redis_sync, k.ready) for k in shards] == [{"other"}] * SHARDS
    assert [g.name for g in await admin.groups(topic)] == ["other"]


@pytest.mark.cluster_too
async def test_a_group_with_nothing_in_flight_is_deleted_without_force(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    shards = await fired_topic(client, redis_sync, topic)
    for k in shards[:3]:  # not on every shard: deleted where it is
        redis_sync.xgroup_create(k.ready, "done", id="0")
        for _, entries in redis_sync.xreadgroup("done", "w", {k.ready: ">"}) or ():
            redis_sync.xack(k.ready, "done", *[entry_id for entry_id, _ in entries])

    deleted = await admin.delete_group(topic, "done")

    assert (deleted.shards, deleted.in_flight) == (3, 0)
    assert not any("done" in group_names(redis_sync, k.ready) for k in shards)


@pytest.mark.cluster_too
async def test_deleting_an_unknown_group_or_topic_is_not_found_and_names_the_groups_there(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    with pytest.raises(GroupNotFoundError, match=r"^no topic"):
        await admin.delete_group(topic, "g")
    shards = await fired_topic(client, redis_sync, topic)
    redis_sync.xgroup_create(shards[0].ready, "kept", id="0")
    redis_sync.xgroup_create(shards[0].callbacks, "deliver", id="0", mkstream=True)

    with pytest.raises(GroupNotFoundError) as missing:
        await admin.delete_group(topic, "gone")
    assert missing.value.known == ["kept"] and "'kept'" in str(missing.value)
    # A group of the callbacks stream is not one of the ready stream's, and back.
    with pytest.raises(GroupNotFoundError, match="a group of that name reads its callbacks"):
        await admin.delete_group(topic, "deliver")
    with pytest.raises(GroupNotFoundError):
        await admin.delete_group(topic, "kept", stream="callbacks", force=True)
    assert group_names(redis_sync, shards[0].ready) == {"kept"}
    assert group_names(redis_sync, shards[0].callbacks) == {"deliver"}

    await admin.delete_group(topic, "deliver", stream="callbacks")
    assert group_names(redis_sync, shards[0].callbacks) == set()


@pytest.mark.cluster_too
@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"group": ""}, "group"),
        ({"group": "g" * 201}, "group"),
        ({"group": "a\nb"}, "group"),
        ({"group": 7}, "group"),
        ({"group": "kept", "stream": "dead"}, "stream"),
        ({"group": "kept", "force": "yes"}, "force"),
        ({"group": "kept", "topic": "no spaces"}, "topic"),
    ],
)
async def test_bad_arguments_are_refused_by_name_and_delete_nothing(
    client: Any,
    admin: Any,
    redis_sync: redis.Redis,
    topic: str,
    kwargs: dict[str, Any],
    parameter: str,
) -> None:
    shards = await fired_topic(client, redis_sync, topic)
    redis_sync.xgroup_create(shards[0].ready, "kept", id="0")
    args = {"topic": topic, **kwargs}

    with pytest.raises(InvalidArgumentError) as refused:
        await admin.delete_group(args.pop("topic"), args.pop("group"), **args)

    assert refused.value.parameter == parameter and parameter in str(refused.value)
    assert group_names(redis_sync, shards[0].ready) == {"kept"}


@pytest.mark.cluster_too
async def test_an_entry_delivered_between_the_check_and_the_delete_keeps_the_group_on_its_shard(
    client: Any, redis_sync: redis.Redis, topic: str
) -> None:
    # The operation is driven by hand, round by round, so that an entry is delivered after
    # every shard was checked (nothing in flight) and before the shards' deletes.
    shards = await fired_topic(client, redis_sync, topic)
    for k in shards:
        redis_sync.xgroup_create(k.ready, "racing", id="0")
    late = shards[3]
    executor = SyncExecutor(redis_sync)
    delivered: list[int] = []

    def send(calls: list[Call[Any]]) -> list[Any]:
        if {c.args[1] for c in calls if c.script == "delete_group"} == {"delete"}:
            delivered.append(read(redis_sync, late.ready, "racing", "late", 1))
        return executor.run(calls)

    with pytest.raises(GroupBusyError) as refused:
        drive(grp.delete_group(Producer(ClientSettings()), topic, "racing", "ready", False), send)

    assert delivered == [1]
    assert (refused.value.in_flight, refused.value.deleted) == (1, SHARDS - 1)
    assert f"deleted on {SHARDS - 1} shards" in str(refused.value)
    assert [("racing" in group_names(redis_sync, k.ready)) for k in shards] == [
        k == late for k in shards
    ]


@pytest.mark.cluster_too
def test_the_delete_script_refuses_a_group_with_entries_in_flight_in_one_step(
    run: Runner, redis_sync: redis.Redis, topic: str
) -> None:
    keys = ShardKeys(topic, 0)
    redis_sync.xadd(keys.ready, {"id": "j"})
    redis_sync.xgroup_create(keys.ready, "g", id="0")
    assert read(redis_sync, keys.ready, "g", "w", 1) == 1

    def drop(mode: str, at: ShardKeys = keys) -> GroupDrop:
        return run(store_groups.delete_group(at, "g", mode))

    assert drop("check") == GroupDrop(GroupOutcome.GROUP_FOUND, 1)
    assert drop("delete") == GroupDrop(GroupOutcome.GROUP_BUSY, 1)
    assert group_names(redis_sync, keys.ready) == {"g"}
    assert drop("force") == GroupDrop(GroupOutcome.GROUP_DESTROYED, 1)
    assert group_names(redis_sync, keys.ready) == set()
    assert drop("force") == GroupDrop(GroupOutcome.NO_GROUP, 0)
    assert drop("check") == GroupDrop(GroupOutcome.NO_GROUP, 0)
    no_stream = ShardKeys(topic, 1)
    assert drop("delete", no_stream) == GroupDrop(GroupOutcome.NO_GROUP, 0)
    assert not redis_sync.exists(no_stream.ready)


# --- a stale group and a job's state ---------------------------------------------------------


@pytest.mark.cluster_too
async def test_after_deleting_a_stale_group_a_job_the_live_group_ran_reads_succeeded(
    redis_url: str, redis_sync: redis.Redis, run: Runner, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, SHARDS)
        for k in all_shards(topic, SHARDS):  # what a stopped service leaves behind
            redis_sync.xgroup_create(k.ready, "stale", id="0", mkstream=True)
        worker = Worker.from_url(redis_url, topic, _done, group="live", shutdown_grace_ms=0)
        await worker.start()
        try:
            job_id = await client.enqueue(topic, {"n": 1})

            async def ran_by_live() -> Any:
                info = await client.get(topic, job_id)
                states = {g.group: g.state for g in info.groups}
                return info if states.get("live") is JobState.SUCCEEDED else None

            info = await eventually(ran_by_live, timeout_s=20, what="the live group to run it")
        finally:
            await worker.stop(grace_ms=0)
        assert info.state is JobState.READY  # held back by the stale group
        keys = ShardKeys(topic, shard_of(job_id, SHARDS))
        trim = history.trim(keys, 0, 100, HOUR_MS)  # retention 0: every entry acked by all
        assert run(trim).trimmed == 0

        await admin.delete_group(topic, "stale")

        after = await client.get(topic, job_id)
        assert after.state is JobState.SUCCEEDED
        assert [g.group for g in after.groups] == ["live"]
        assert run(trim).trimmed == 1


async def _done(job: Job) -> None:
    return None


# --- wheelq groups ---------------------------------------------------------------------------


def test_wheelq_groups_list_prints_a_row_per_group_and_per_shard(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url) as c:
        shards = sync_fired_topic(c, redis_sync, topic)
    for k in shards:
        redis_sync.xgroup_create(k.ready, "busy", id="0")
        redis_sync.xgroup_create(k.ready, "stale", id="0")
    held = [read(redis_sync, k.ready, "busy", "w1", k.shard + 1) for k in shards]

    table = run_wheelq("groups", "list", topic, "--redis-url", redis_url)
    by_shard = run_wheelq("groups", "list", topic, "--shards", "--redis-url", redis_url)

    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows[0] == ["GROUP", "STREAM", "CONSUMERS", "IN_FLIGHT", "READY", "IDLE", "PAUSED"]
    assert [r[:5] for r in rows[1:]] == [
        ["busy", "ready", "1", str(sum(held)), str(JOBS - sum(held))],
        ["stale", "ready", "0", "0", str(JOBS)],
    ]
    assert rows[1][5].endswith("s") and rows[2][5] == "-"  # idle: seconds, none w/o consumers
    assert by_shard.returncode == 0, by_shard.stderr
    busy_rows = [line.split() for line in by_shard.stdout.splitlines() if line.startswith("busy")]
    assert [(int(r[2]), int(r[4])) for r in busy_rows] == [(k.shard, held[k.shard]) for k in shards]
    assert_one_line_error(
        run_wheelq("groups", "list", topic + "-none", "--redis-url", redis_url), 1, "no such topic"
    )


def test_wheelq_groups_delete_is_refused_in_flight_says_force_and_deletes_with_it(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url) as c:
        shards = sync_fired_topic(c, redis_sync, topic)
    for k in shards:
        redis_sync.xgroup_create(k.ready, "busy", id="0")
    held = read(redis_sync, shards[0].ready, "busy", "w1", 2)

    refused = run_wheelq("groups", "delete", topic, "busy", "--redis-url", redis_url)
    line = assert_one_line_error(refused, 1, f"{held} entries in flight", "--force")
    assert "force=True" not in line
    assert all("busy" in group_names(redis_sync, k.ready) for k in shards)

    forced = run_wheelq("groups", "delete", topic, "busy", "--force", "--redis-url", redis_url)
    assert (forced.returncode, forced.stdout.strip()) == (
        0,
        f"deleted group busy of {topic} on {SHARDS} shards; {held} entries in flight dropped",
    )
    assert not any("busy" in group_names(redis_sync, k.ready) for k in shards)
    assert_one_line_error(
        run_wheelq("groups", "delete", topic, "busy", "--redis-url", redis_url),
        1,
        "no consumer group 'busy'",
    )
    assert_one_line_error(
        run_wheelq("groups", "delete", topic, "a\tb", "--redis-url", redis_url), 2, "group must"
    )
    assert_one_line_error(
        run_wheelq("groups", "delete", topic, "g", "--stream", "x", "--redis-url", redis_url),
        2,
        "stream must be one of ready, callbacks",
    )


# --- /v1/topics/{topic}/groups ----------------------------------------------------------------

PROBLEM = "application/problem+json"


@pytest.mark.cluster_too
async def test_http_lists_groups_and_deletes_one_409_in_flight_unless_forced_404_unknown(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    reader, writer = "r" * 32, "w" * 32
    tokens = (Token(reader, "read"), Token(writer, "write"))
    async with serving(redis_url, tokens=tokens) as api:
        read_only = {"Authorization": f"Bearer {reader}"}
        write = {"Authorization": f"Bearer {writer}"}
        shards = await fired_topic(api.service.client, redis_sync, topic)
        for k in shards:
            redis_sync.xgroup_create(k.ready, "busy", id="0")
        held = read(redis_sync, shards[1].ready, "busy", "w1", 3)
        redis_sync.xgroup_create(shards[0].callbacks, "deliver", id="0", mkstream=True)

        status, body, _ = await api.call("GET", f"/v1/topics/{topic}/groups", headers=read_only)
        assert status == 200, body
        assert [(g["stream"], g["group"]) for g in body["groups"]] == [
            ("ready", "busy"),
            ("callbacks", "deliver"),
        ]
        busy = body["groups"][0]
        assert (busy["consumers"], busy["in_flight"], busy["ready"]) == (1, held, JOBS - held)
        assert [(s["shard"], s["in_flight"]) for s in busy["shards"]] == [
            (k.shard, held if k == shards[1] else 0) for k in shards
        ]

        path = f"/v1/topics/{topic}/groups/busy"
        status, body, _ = await api.call("DELETE", path, headers=read_only)
        assert status == 403, body
        status, body, headers = await api.call("DELETE", path, headers=write)
        assert status == 409 and headers["Content-Type"].startswith(PROBLEM), body
        assert f"{held} entries in flight" in body["detail"] and "?force=true" in body["detail"]
        assert "force=True" not in body["detail"]
        assert all("busy" in group_names(redis_sync, k.ready) for k in shards)

        status, body, _ = await api.call("DELETE", path + "?force=true", headers=write)
        assert (status, body) == (204, None)
        assert not any("busy" in group_names(redis_sync, k.ready) for k in shards)

        status, body, _ = await api.call("DELETE", path, headers=write)
        assert status == 404 and body["field"] == "group" and "'busy'" in body["detail"]
        deliver = f"/v1/topics/{topic}/groups/deliver"
        status, body, _ = await api.call("DELETE", deliver, headers=write)
        assert status == 404 and "callbacks stream" in body["detail"]
        status, body, _ = await api.call("DELETE", deliver + "?stream=dead", headers=write)
        assert status == 422 and body["field"] == "stream", body
        status, body, _ = await api.call("DELETE", deliver + "?stream=callbacks", headers=write)
        assert status == 204, body
        assert group_names(redis_sync, shards[0].callbacks) == set()

        for bad in ("%E2%80%A8", "g" * 201):  # U+2028: not printable
            status, body, _ = await api.call(
                "DELETE", f"/v1/topics/{topic}/groups/{bad}", headers=write
            )
            assert status == 422 and body["field"] == "group", body
        unknown = f"/v1/topics/{topic}-none/groups"
        status, body, _ = await api.call("GET", unknown, headers=read_only)
        assert status == 404 and body["field"] == "topic"
        status, body, _ = await api.call("DELETE", unknown + "/busy", headers=write)
        assert status == 404 and body["field"] == "topic"


# --- creating groups on purpose ---------------------------------------------------------------


@pytest.mark.cluster_too
async def test_a_pull_of_an_unknown_group_is_404_and_creates_nothing(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """2,000 names pulled made 2,000 groups on every shard: a pull never creates one."""
    async with serving(redis_url) as api:
        shards = await fired_topic(api.service.client, redis_sync, topic)
        for n in range(20):
            status, body, headers = await api.call(
                "POST", f"/v1/topics/{topic}/groups/made-up-{n}/pull", {"max": 5, "wait_ms": 10}
            )
            assert status == 404 and headers["Content-Type"].startswith(PROBLEM), body
            assert body["field"] == "group"
            assert f"POST /v1/topics/{topic}/groups" in body["detail"]
        status, body, _ = await api.call(
            "POST", f"/v1/topics/{topic}/groups/g/pull", {"max": 5, "create": True}
        )
        assert (status, body["field"]) == (422, "create"), body
        assert "pull_creates_groups" in body["detail"]
        assert [group_names(redis_sync, k.ready) for k in shards] == [set()] * SHARDS
        assert await api.service.admin.groups(topic) == []


@pytest.mark.cluster_too
async def test_a_group_made_over_http_is_pulled_from_and_made_once(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    async with serving(redis_url) as api:
        shards = await fired_topic(api.service.client, redis_sync, topic)
        path = f"/v1/topics/{topic}/groups"
        status, body, _ = await api.call("POST", path, {"name": "pullers"})
        assert (status, body) == (201, {"group": "pullers", "created": True, "shards": SHARDS})
        assert all(group_names(redis_sync, k.ready) == {"pullers"} for k in shards)
        status, body, _ = await api.call("POST", path, {"name": "pullers"})
        assert (status, body) == (200, {"group": "pullers", "created": False, "shards": 0})
        status, body, _ = await api.call("POST", path, {"name": "late", "start": "now"})
        assert status == 201, body
        status, pulled, _ = await api.call("POST", f"{path}/pullers/pull", {"max": JOBS})
        assert status == 200 and len(pulled["jobs"]) > 0, pulled
        status, pulled, _ = await api.call("POST", f"{path}/late/pull", {"max": JOBS})
        assert (status, pulled) == (200, {"jobs": []})  # started at the next job
        for bad, field in [({"name": ""}, "name"), ({"name": "g", "start": "x"}, "start")]:
            status, body, _ = await api.call("POST", path, bad)
            assert (status, body["field"]) == (422, field), body
        status, body, _ = await api.call("POST", f"/v1/topics/{topic}-none/groups", {"name": "g"})
        assert (status, body["field"]) == (404, "topic"), body


@pytest.mark.cluster_too
async def test_the_group_cap_holds_for_every_way_in_and_creates_nothing_past_it(
    redis_url: str, redis_sync: redis.Redis, topic: str, make_client: MakeClient
) -> None:
    from wheelq import GroupLimitError
    from wheelq.core.settings import ServeSettings

    cap = 3
    settings = ServeSettings(max_groups_per_topic=cap, pull_creates_groups=1)
    async with serving(redis_url, settings=settings) as api:
        shards = await fired_topic(api.service.client, redis_sync, topic)
        path = f"/v1/topics/{topic}/groups"
        status, _, _ = await api.call("POST", f"{path}/g0/pull", {"create": True})
        assert status == 200  # allowed here, under the cap
        for n in (1, 2):
            status, body, _ = await api.call("POST", path, {"name": f"g{n}"})
            assert status == 201, body
        status, body, _ = await api.call("POST", path, {"name": "one-too-many"})
        assert status == 409 and body["field"] == "name", body
        assert "max_groups_per_topic" in body["detail"] and str(cap) in body["detail"]
        status, body, _ = await api.call("POST", f"{path}/g4/pull", {"create": True})
        assert status == 409, body
        status, body, _ = await api.call("POST", path, {"name": "g1"})
        assert status == 200, body  # an existing group is no new one
        with pytest.raises(GroupLimitError):
            await admin_of(make_client()).create_group(topic, "lib", max_groups=cap)
        expected = {"g0", "g1", "g2"}
        assert [group_names(redis_sync, k.ready) for k in shards] == [expected] * SHARDS
        # A shard that is full alone (a group made there by hand) refuses the whole group:
        # the shards made on are undone.
        redis_sync.xgroup_destroy(shards[0].ready, "g2")
        redis_sync.xgroup_destroy(shards[1].ready, "g2")
        redis_sync.xgroup_create(shards[1].ready, "by-hand", id="0")
        with pytest.raises(GroupLimitError):
            await admin_of(make_client()).create_group(topic, "partial", max_groups=cap)
        assert not any("partial" in group_names(redis_sync, k.ready) for k in shards)


def test_wheelq_groups_create_makes_a_group_once_and_refuses_past_the_cap(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url) as c:
        shards = sync_fired_topic(c, redis_sync, topic)
    made = run_wheelq("groups", "create", topic, "pullers", "--redis-url", redis_url)
    assert (made.returncode, made.stdout.strip()) == (
        0,
        f"created group pullers of {topic} on {SHARDS} shards",
    ), made.stderr
    again = run_wheelq("groups", "create", topic, "pullers", "--redis-url", redis_url)
    assert (again.returncode, again.stdout.strip()) == (
        0,
        f"group pullers of {topic} exists already",
    )
    assert all(group_names(redis_sync, k.ready) == {"pullers"} for k in shards)
    assert_one_line_error(
        run_wheelq(
            "groups", "create", topic, "more", "--max-groups", "1", "--redis-url", redis_url
        ),
        1,
        "max_groups_per_topic",
    )
    assert_one_line_error(
        run_wheelq("groups", "create", topic + "-none", "g", "--redis-url", redis_url),
        1,
        "no such topic",
    )
    assert all(group_names(redis_sync, k.ready) == {"pullers"} for k in shards)
