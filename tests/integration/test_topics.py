"""Topics as a whole against a real server: dropping one (`drop_topic`), registry entries
that are not shard counts (a typed error at the call site; a scheduler skips the topic and
says so once), and one topic name given where several are taken.

Client tests run through `Client` and `AsyncClient` (`tests.support.clients`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from tests.integration.test_client import topic_keys
from tests.support.clients import MakeClient, admin_of
from tests.support.waiting import eventually
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    EnqueueItem,
    InvalidArgumentError,
    InvalidTopicError,
    Scheduler,
    TopicConfigError,
    TopicNotEmptyError,
    Worker,
)
from wheelq.core.job import Job
from wheelq.core.keys import TOPICS_KEY, ShardKeys, all_shards, nodes_key, shard_of

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

SHARDS = 4
FAST = {"preload_interval_ms": 50, "check_interval_ms": 50, "lease_ttl_ms": 1000}


@pytest.fixture
def client(make_client: MakeClient) -> Any:
    return make_client()


@pytest.fixture
async def producer(redis_url: str) -> AsyncIterator[AsyncClient]:
    """One async client, for the scheduler tests (the client kind is not what they test)."""
    async with AsyncClient.from_url(redis_url) as c:
        yield c


async def _value(v: Any) -> Any:
    return v


def dump(r: redis.Redis, topic: str) -> dict[bytes, Any]:
    """Every key of the topic with its content and TTL, and its registry entry."""
    state: dict[bytes, Any] = {b"registry": r.hget(TOPICS_KEY, topic)}
    for key in topic_keys(r, topic):
        state[key] = (r.dump(key), r.pttl(key))
    return state


def ack_everything(r: redis.Redis, topic: str, group: str) -> None:
    for keys in all_shards(topic, SHARDS):
        r.xgroup_create(keys.ready, group, id="0", mkstream=True)
        for _, entries in r.xreadgroup(group, "c", {keys.ready: ">"}):
            for entry_id, _ in entries:
                r.xack(keys.ready, group, entry_id)


# --- drop_topic -----------------------------------------------------------------------------


async def test_drop_topic_deletes_every_key_of_every_shard_and_the_registry_entry(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await admin.create_topic(topic, SHARDS)
    await client.enqueue_many(topic, [EnqueueItem(payload=i) for i in range(40)])  # fired at once
    ack_everything(redis_sync, topic, "g1")
    keys = ShardKeys(topic, 1)
    redis_sync.xadd(keys.dead, {"id": "dead", "reason": "failed"})  # dead letters do not count
    redis_sync.set(keys.lease, "some-node", px=60_000)
    redis_sync.set(keys.horizon, 1, px=60_000)
    redis_sync.rpush(keys.inbox, "1:x")
    redis_sync.zadd(nodes_key(topic), {"some-node": 1})
    assert len(topic_keys(redis_sync, topic)) >= SHARDS + 5

    assert await admin.drop_topic(topic) is True

    assert topic_keys(redis_sync, topic) == set()
    assert redis_sync.hexists(TOPICS_KEY, topic) == 0
    assert topic not in await admin.topics()
    assert await admin.stats(topic) is None
    assert await admin.drop_topic(topic) is False


@pytest.mark.parametrize("what", ["pending job", "entry no group read", "entry not acked"])
async def test_drop_topic_refuses_while_jobs_are_left_to_run_and_changes_nothing(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str, what: str
) -> None:
    await admin.create_topic(topic, SHARDS)
    await client.enqueue_many(topic, [EnqueueItem(payload=i) for i in range(10)])
    ack_everything(redis_sync, topic, "g1")
    if what == "pending job":
        await client.enqueue(topic, "later", delay=60)
    else:
        job = await client.enqueue(topic, "now")
        keys = ShardKeys(topic, shard_of(job, SHARDS))
        if what == "entry not acked":
            redis_sync.xreadgroup("g1", "c", {keys.ready: ">"})
        else:
            redis_sync.xgroup_destroy(keys.ready, "g1")
    before = dump(redis_sync, topic)

    with pytest.raises(TopicNotEmptyError) as caught:
        await admin.drop_topic(topic)

    assert dump(redis_sync, topic) == before
    err = caught.value
    expected = (1, 0) if what == "pending job" else (0, 1)
    if what == "entry no group read":  # every entry of that shard counts, none acked
        expected = (0, len(redis_sync.xrange(keys.ready)))
    assert (err.topic, err.pending, err.unacked) == (topic, *expected)
    assert f"topic {topic!r} has {expected[0]} pending jobs and {expected[1]}" in str(err)
    assert "pass force=True" in str(err)


async def test_drop_topic_with_force_drops_pending_and_unacked_jobs(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await admin.create_topic(topic, SHARDS)
    await client.enqueue_many(topic, [EnqueueItem(payload=i, delay=60) for i in range(20)])
    await client.enqueue_many(topic, [EnqueueItem(payload=i) for i in range(20)])

    assert await admin.drop_topic(topic, force=True) is True

    assert topic_keys(redis_sync, topic) == set()
    assert redis_sync.hexists(TOPICS_KEY, topic) == 0


async def test_drop_topic_of_an_unknown_topic_is_false_and_creates_nothing(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    assert await admin.drop_topic(topic) is False
    assert await admin.drop_topic(topic, force=True) is False
    assert redis_sync.hexists(TOPICS_KEY, topic) == 0
    assert topic_keys(redis_sync, topic) == set()


async def test_drop_topic_without_a_registry_entry_is_false_and_leaves_the_keys(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    await client.enqueue(topic, "x", delay=60)
    redis_sync.hdel(TOPICS_KEY, topic)  # unregistered by hand: the shard count is unknown
    before = dump(redis_sync, topic)

    assert await admin.drop_topic(topic, force=True) is False

    assert dump(redis_sync, topic) == before


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "parameter"),
    [
        (("a:b",), {}, InvalidTopicError, "topic"),
        ((None,), {}, InvalidTopicError, "topic"),
        (("{topic}",), {"force": "yes"}, InvalidArgumentError, "force"),
        (("{topic}",), {"force": 1}, InvalidArgumentError, "force"),
    ],
)
async def test_drop_topic_bad_arguments_raise_and_change_nothing(
    client: Any,
    admin: Any,
    redis_sync: redis.Redis,
    topic: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[Exception],
    parameter: str,
) -> None:
    await client.enqueue(topic, "x", delay=60)
    before = dump(redis_sync, topic)
    args = tuple(topic if a == "{topic}" else a for a in args)

    with pytest.raises(error) as caught:
        await admin.drop_topic(*args, **kwargs)

    assert getattr(caught.value, "parameter", None) == parameter
    assert dump(redis_sync, topic) == before


async def test_a_dropped_topic_is_created_afresh_on_next_use(
    make_client: MakeClient, redis_sync: redis.Redis, topic: str
) -> None:
    client = make_client(default_shards=3)
    admin = admin_of(client)
    await admin.create_topic(topic, 5)
    await client.enqueue(topic, "old", delay=60)
    assert await admin.drop_topic(topic, force=True)

    job = await client.enqueue(topic, "new", delay=60)  # the client forgot the old count

    assert redis_sync.hget(TOPICS_KEY, topic) == b"3"
    assert redis_sync.zscore(ShardKeys(topic, shard_of(job, 3)).delayed, job) is not None
    assert (await admin.stats(topic)).pending == 1


async def test_a_scheduler_serving_a_dropped_topic_lets_it_go_and_serves_the_others(
    producer: AsyncClient, redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    other = f"{topic}.other"
    await AsyncAdmin.of(producer).create_topic(topic, SHARDS)
    await AsyncAdmin.of(producer).create_topic(other, 2)
    node = Scheduler.from_url(redis_url, [topic, other], **FAST)
    await node.start()
    try:
        await eventually(
            lambda: _value(len(node.leads) == SHARDS + 2), timeout_s=10, what="every shard led"
        )
        await producer.enqueue_many(
            topic, [EnqueueItem(payload=i, delay=0.2 + i / 100) for i in range(50)]
        )

        assert await AsyncAdmin.of(producer).drop_topic(topic, force=True)

        def gone() -> bool:
            led = {lead.keys.topic for lead in node.leads.all()}
            return topic not in led and topic_keys(redis_sync, topic) == set()

        await eventually(
            lambda: _value(gone()), timeout_s=10, what="the node to let the topic go, keyless"
        )
        job = await producer.enqueue(other, "still served", delay=0.3)
        keys = ShardKeys(other, shard_of(job, 2))
        await eventually(
            lambda: _value(redis_sync.xlen(keys.ready) == 1), timeout_s=10, what="a job to fire"
        )
        assert topic_keys(redis_sync, topic) == set(), "the node recreated keys of the topic"
        assert redis_sync.hexists(TOPICS_KEY, topic) == 0
        assert {lead.keys.topic for lead in node.leads.all()} == {other}
    finally:
        await node.stop()


# --- registry entries that are not shard counts ----------------------------------------------

BAD_COUNTS = [b"0", b"-3", b"abc", b"", b"99999999999999999999", b"4.0"]


@pytest.fixture
def corrupt(redis_sync: redis.Redis, topic: str) -> Iterator[Any]:
    """``corrupt(value)`` writes `value` as `topic`'s registry entry; removed afterwards (the
    registry is shared by every test of the session)."""

    def write(value: bytes, name: str = topic) -> None:
        redis_sync.hset(TOPICS_KEY, name, value)
        written.append(name)

    written: list[str] = []
    yield write
    for name in written:
        redis_sync.hdel(TOPICS_KEY, name)


CLIENT_CALLS = [
    ("enqueue", lambda c, t: c.enqueue(t, "x", delay=60)),
    ("enqueue-now", lambda c, t: c.enqueue(t, "x")),
    ("enqueue_many", lambda c, t: c.enqueue_many(t, [EnqueueItem(payload=1)])),
    ("get", lambda c, t: c.get(t, "j")),
    ("cancel", lambda c, t: c.cancel(t, "j")),
    ("reschedule", lambda c, t: c.reschedule(t, "j", delay=1)),
    ("stats", lambda c, t: admin_of(c).stats(t)),
    ("topics", lambda c, t: admin_of(c).topics()),
    ("create_topic", lambda c, t: admin_of(c).create_topic(t)),
    ("create_topic-4", lambda c, t: admin_of(c).create_topic(t, 4)),
    ("dead_letters", lambda c, t: admin_of(c).dead_letters(t)),
    ("replay", lambda c, t: admin_of(c).replay(t)),
    ("drop_topic", lambda c, t: admin_of(c).drop_topic(t, force=True)),
]


@pytest.mark.parametrize("value", BAD_COUNTS)
@pytest.mark.parametrize(("name", "call"), CLIENT_CALLS, ids=[n for n, _ in CLIENT_CALLS])
async def test_a_registry_entry_that_is_not_a_shard_count_raises_topic_config_error(
    make_client: MakeClient,
    redis_sync: redis.Redis,
    topic: str,
    corrupt: Any,
    value: bytes,
    name: str,
    call: Any,
) -> None:
    corrupt(value)

    with pytest.raises(TopicConfigError) as caught:
        await call(make_client(), topic)

    message = str(caught.value)
    for fragment in (repr(topic), repr(value), "[1, 1024]", TOPICS_KEY):
        assert fragment in message, f"{fragment!r} missing from {message!r}"
    assert redis_sync.hget(TOPICS_KEY, topic) == value
    assert topic_keys(redis_sync, topic) == set()
    assert list(redis_sync.scan_iter(match=f"*{{{topic}:-*", count=1000)) == []


async def test_a_worker_of_a_topic_with_a_bad_registry_entry_fails_to_start(
    redis_url: str, redis_sync: redis.Redis, topic: str, corrupt: Any
) -> None:
    corrupt(b"0")

    async def handler(job: Job) -> None:
        pass

    worker = Worker.from_url(redis_url, topic, handler)
    try:
        with pytest.raises(TopicConfigError, match="must be an int in"):
            await worker.start()
    finally:
        await worker.stop()  # nothing to stop: the failed start closed its clients
    assert topic_keys(redis_sync, topic) == set()


async def test_a_scheduler_logs_a_bad_registry_entry_once_and_serves_the_other_topics(
    producer: AsyncClient,
    redis_url: str,
    redis_sync: redis.Redis,
    topic: str,
    corrupt: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad, good = f"{topic}.bad", f"{topic}.good"
    corrupt(b"-3", bad)
    await AsyncAdmin.of(producer).create_topic(good, 2)
    caplog.set_level(logging.WARNING, logger="wheelq")
    node = Scheduler.from_url(redis_url, [bad, good], **FAST)
    await node.start()
    try:
        await eventually(
            lambda: _value(len(node.leads) == 2), timeout_s=10, what="the good topic led"
        )
        job = await producer.enqueue(good, "x", delay=0.5)  # ten check intervals and more
        keys = ShardKeys(good, shard_of(job, 2))
        await eventually(
            lambda: _value(redis_sync.xlen(keys.ready) == 1), timeout_s=10, what="the job fired"
        )
        assert {lead.keys.topic for lead in node.leads.all()} == {good}
    finally:
        await node.stop()
    about_bad = [r for r in caplog.records if repr(bad) in r.getMessage()]
    assert len(about_bad) == 1, [r.getMessage() for r in about_bad]
    assert "not serving topic" in about_bad[0].getMessage()
    assert "[1, 1024]" in about_bad[0].getMessage()
    assert topic_keys(redis_sync, bad) == set()
    assert list(redis_sync.scan_iter(match=f"*{{{bad}:*", count=1000)) == []


# --- one topic name where several are taken -------------------------------------------------


async def test_a_scheduler_given_one_topic_name_as_a_str_serves_that_topic(
    producer: AsyncClient, redis_url: str, topic: str
) -> None:
    await AsyncAdmin.of(producer).create_topic(topic, 2)
    connection = redis.asyncio.Redis.from_url(redis_url)
    assert Scheduler(connection, topic).topics == frozenset({topic})
    await connection.aclose()
    node = Scheduler.from_url(redis_url, topic, **FAST)
    assert node.topics == frozenset({topic})
    await node.start()
    try:
        await eventually(
            lambda: _value(sorted(lead.keys.shard for lead in node.leads.all()) == [0, 1]),
            timeout_s=10,
            what="the node to lead the topic's shards",
        )
    finally:
        await node.stop()


@pytest.mark.parametrize("topics", [b"emails", 7, {"a": 1}, []])
async def test_a_scheduler_refuses_topics_that_are_not_names(
    redis_url: str, topics: object
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        Scheduler.from_url(redis_url, topics)  # type: ignore[arg-type]
    assert caught.value.parameter == "topics"
    assert "topics must" in str(caught.value)


async def test_a_registry_entry_that_is_valid_again_is_served_again(
    redis_url: str, redis_sync: redis.Redis, topic: str, corrupt: Any
) -> None:
    corrupt(b"abc")
    node = Scheduler.from_url(redis_url, [topic], **FAST)
    await node.start()
    try:
        redis_sync.hset(TOPICS_KEY, topic, 2)  # fixed by hand
        await eventually(
            lambda: _value(len(node.leads) == 2), timeout_s=10, what="the fixed topic led"
        )
    finally:
        await node.stop()
