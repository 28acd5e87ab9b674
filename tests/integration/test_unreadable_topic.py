"""A topic with a key of the wrong type, through every face that lists topics: it is listed,
marked where the face reads its numbers, and the other topics list as usual (library
``topics()``, ``wheelq topics``, ``GET /v1/topics``, the console's topic list). Single
server only: corrupting a key is the same on a cluster, and the listing is per topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis
from redis.exceptions import ResponseError

from tests.integration.test_web_dashboard import get, num
from tests.support.cli import run_wheelq
from tests.support.web import Served, serving
from wheelq import AsyncClient, Client
from wheelq.core.keys import ShardKeys


@pytest.fixture
async def corrupt(redis_url: str, redis_sync: redis.Redis, topic: str) -> AsyncIterator[str]:
    """Topics ``<topic>-a`` (2 jobs pending) and ``<topic>-b`` (1), the latter's shard 0
    ready stream a string; the key is removed at teardown, so that no other test on the
    shared server lists a broken topic."""
    key = ShardKeys(f"{topic}-b", 0).ready
    with Client.from_url(redis_url) as client:
        client.enqueue(f"{topic}-a", 1, delay=600)
        client.enqueue(f"{topic}-a", 2, delay=600)
        client.enqueue(f"{topic}-b", 3, delay=600)
    redis_sync.set(key, "not a stream")
    try:
        yield topic
    finally:
        redis_sync.delete(key)
        with Client.from_url(redis_url) as client:
            for name in (f"{topic}-a", f"{topic}-b"):
                client.drop_topic(name, force=True)


@pytest.fixture
async def served(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as app:
        yield app


async def test_the_library_lists_an_unreadable_topic_and_reads_the_others(
    redis_url: str, corrupt: str
) -> None:
    a, b = f"{corrupt}-a", f"{corrupt}-b"
    with Client.from_url(redis_url) as client:
        assert {a: 4, b: 4}.items() <= client.topics().items()
        stats = client.stats(a)
        assert stats is not None and stats.pending == 2
        with pytest.raises(ResponseError, match="WRONGTYPE"):  # asked for it by name
            client.stats(b)
    async with AsyncClient.from_url(redis_url) as aclient:
        assert {a: 4, b: 4}.items() <= (await aclient.topics()).items()
        astats = await aclient.stats(a)
        assert astats is not None and astats.pending == 2


async def test_wheelq_topics_marks_an_unreadable_topic_and_lists_the_others(
    redis_url: str, corrupt: str
) -> None:
    """Bug: one wrong-typed key failed the whole listing (WRONGTYPE, exit 1), which is how
    test_cli_commands failed after test_web_dashboard left such a key on the server."""
    a, b = f"{corrupt}-a", f"{corrupt}-b"
    done = await asyncio.to_thread(run_wheelq, "topics", "--redis-url", redis_url)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[1:]}
    assert rows[a] == ["4", "2", "0", "0", "0", "0", "-"]
    assert rows[b] == ["4", "?", "?", "?", "?", "?", "unreadable"]
    assert f"topic {b} cannot be read: ResponseError: WRONGTYPE" in done.stderr, done.stderr


async def test_wheelq_stats_and_top_say_an_unreadable_topic_and_show_the_others(
    redis_url: str, corrupt: str
) -> None:
    """Bug: as ``wheelq topics``: one wrong-typed key failed every topic's stats and top."""
    a, b = f"{corrupt}-a", f"{corrupt}-b"
    said = f"topic {b} cannot be read: ResponseError: WRONGTYPE"
    for argv in (("stats",), ("stats", "--json")):
        done = await asyncio.to_thread(run_wheelq, *argv, "--redis-url", redis_url)
        assert done.returncode == 0 and said in done.stderr, done
        assert a in done.stdout and b not in done.stdout, done.stdout
    top = ("top", "--once", "--interval", "0.1", "--topics", f"{a},{b}")
    done = await asyncio.to_thread(run_wheelq, *top, "--redis-url", redis_url)
    assert done.returncode == 0, done.stderr
    assert a in done.stdout and said in " ".join(done.stdout.split()), done.stdout
    named = await asyncio.to_thread(run_wheelq, "stats", b, "--redis-url", redis_url)
    assert named.returncode == 1 and said in named.stderr, named


async def test_the_http_api_and_the_console_list_an_unreadable_topic_and_the_others(
    served: Served, corrupt: str
) -> None:
    a, b = f"{corrupt}-a", f"{corrupt}-b"
    status, listed, _ = await served.call("GET", f"/v1/topics?after={corrupt}&limit=2")
    assert status == 200, listed
    assert listed["topics"] == [{"topic": a, "shards": 4}, {"topic": b, "shards": 4}]
    _, page = await get(served, f"/ui?after={corrupt}&limit=2")
    assert num(page.ids[f"{a}-pending"]) == 2
    assert "WRONGTYPE" in page.ids[f"{b}-error"]
