"""`enqueue_bulk` on a real server: the jobs are pending with the shared options and fire
when due, once each; bad input (a payload, the timing, the attempts) writes nothing; a full
topic names what went in; the spool takes the same jobs while Redis is away."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.servers import dedicated_server
from tests.support.waiting import eventually, eventually_sync
from wheelq import Admin, AsyncClient, Client, JobState, Scheduler
from wheelq.core.keys import all_shards
from wheelq.errors import (
    InvalidArgumentError,
    InvalidDelayError,
    PayloadTooLargeError,
    PayloadTypeError,
    TopicFullError,
)
from wheelq.testing import ServerBinary, summarize
from wheelq.testing.fired import Fired

SHARDS = 4


def pending(r: redis.Redis, topic: str) -> int:
    return sum(int(r.zcard(k.delayed)) for k in all_shards(topic, SHARDS))


def fired(r: redis.Redis, topic: str) -> list[Fired]:
    return [
        Fired.from_entry(entry_id, fields)
        for keys in all_shards(topic, SHARDS)
        for entry_id, fields in r.xrange(keys.ready)
    ]


@pytest.mark.cluster_too
async def test_bulk_jobs_are_pending_with_their_options_and_fire_once_when_due(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    payloads = [{"n": i, "body": "x" * (i % 300)} for i in range(3000)]
    async with AsyncClient.from_url(redis_url, default_shards=SHARDS) as client:
        ids = await client.enqueue_bulk(topic, payloads, delay=1.0, max_attempts=3)
        assert len(ids) == len(set(ids)) == 3000
        info = await client.get(topic, ids[7])
        assert info.state is JobState.PENDING and info.max_attempts == 3
        assert info.payload == payloads[7]
        assert pending(redis_sync, topic) == 3000
        assert await client.enqueue_bulk(topic, []) == []
        node = Scheduler.from_url(redis_url, [topic])
        await node.start()
        try:
            await eventually(
                lambda: _ready(len(fired(redis_sync, topic)) >= 3000),
                timeout_s=30,
                what="every job to fire",
            )
        finally:
            await node.stop()
    records = fired(redis_sync, topic)
    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)
    dues = [f.due_ms for f in records]
    assert max(dues) - min(dues) < 100, "one delay: due a second after each call was sent"


async def _ready(done: bool) -> bool:
    return done


@pytest.mark.parametrize(
    ("kwargs", "error", "parameter"),
    [
        ({"payloads": ["a", object(), "c"]}, PayloadTypeError, None),
        ({"payloads": ["a", "b" * 2000]}, PayloadTooLargeError, "payloads"),
        ({"payloads": "abc"}, InvalidArgumentError, "payloads"),
        ({"payloads": ["a"], "delay": -1}, InvalidDelayError, "delay"),
        ({"payloads": ["a"], "delay": 1, "at": 5}, InvalidDelayError, "delay"),
        ({"payloads": ["a"], "max_attempts": 0}, InvalidArgumentError, "max_attempts"),
        ({"payloads": ["a"], "max_attempts": True}, InvalidArgumentError, "max_attempts"),
    ],
)
@pytest.mark.cluster_too
def test_bad_input_is_refused_naming_it_and_writes_nothing(
    redis_url: str,
    redis_sync: redis.Redis,
    topic: str,
    kwargs: dict[str, Any],
    error: type[Exception],
    parameter: str | None,
) -> None:
    with Client.from_url(redis_url, default_shards=SHARDS, max_payload_bytes=1000) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, SHARDS)
        kwargs = dict(kwargs)  # the table is shared by every deployment
        payloads = kwargs.pop("payloads")
        with pytest.raises(error) as raised:
            client.enqueue_bulk(topic, payloads, **kwargs)
        if parameter is not None:
            assert getattr(raised.value, "parameter", None) == parameter
        if isinstance(payloads, list) and len(payloads) > 1 and not kwargs:
            assert str(raised.value).startswith("payloads[1]: ")
    assert pending(redis_sync, topic) == 0


@pytest.mark.cluster_too
def test_a_full_topic_names_what_it_took_and_what_it_refused(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url, default_shards=SHARDS) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, SHARDS)
        admin.set_limits(topic, max_pending=400)  # 100 a shard: a call over it is refused
        first = client.enqueue_bulk(topic, list(range(200)), delay=60)
        with pytest.raises(TopicFullError) as raised:
            client.enqueue_bulk(topic, list(range(400)), delay=60)
        full = raised.value
    assert full.job_ids and set(full.job_ids).isdisjoint(full.enqueued)
    assert len(full.ids) == 400 and set(full.ids) == set(full.job_ids) | set(full.enqueued)
    assert pending(redis_sync, topic) == len(first) + len(full.enqueued)


@pytest.mark.cluster_too
async def test_the_async_client_enqueues_the_same(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url, default_shards=SHARDS) as client:
        ids = await client.enqueue_bulk(topic, ["a", "b", "c"], at=2_000_000_000)
        infos = [await client.get(topic, i) for i in ids]
    assert [i.payload for i in infos] == ["a", "b", "c"]
    assert {i.due_ms for i in infos} == {2_000_000_000_000}


def test_with_a_spool_the_jobs_wait_for_redis_and_go_in_once(
    server_binary: ServerBinary, tmp_path: Path, topic: str
) -> None:
    with dedicated_server(server_binary) as server:
        client = Client.from_url(
            server.url, spool=tmp_path / "spool.db", default_shards=SHARDS, ack_replicas=0
        )
        admin = Admin.of(client)
        try:
            admin.create_topic(topic, SHARDS)
            server.kill()
            ids = client.enqueue_bulk(topic, list(range(50)), delay=3600)
            assert client.spool_stats().depth == 50  # type: ignore[union-attr]
            server.restart()
            eventually_sync(
                lambda: client.spool_stats().depth == 0,  # type: ignore[union-attr]
                timeout_s=30,
                what="the spool to drain",
            )
            with redis.Redis.from_url(server.url) as r:
                assert pending(r, topic) == 50
                stored = {r.hget(keys.jobs, i) for keys in all_shards(topic, SHARDS) for i in ids}
            assert len(stored - {None}) == 50, "every job once, under its own id"
        finally:
            client.close()
