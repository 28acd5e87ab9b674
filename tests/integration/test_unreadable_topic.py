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
from wheelq import Admin, AsyncAdmin, Client, ScriptError, WrongTypeError
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
        with Admin.from_url(redis_url) as admin:
            for name in (f"{topic}-a", f"{topic}-b"):
                admin.drop_topic(name, force=True)


@pytest.fixture
async def served(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as app:
        yield app


async def test_the_library_lists_an_unreadable_topic_and_reads_the_others(
    redis_url: str, corrupt: str
) -> None:
    a, b = f"{corrupt}-a", f"{corrupt}-b"
    with Admin.from_url(redis_url) as admin:
        assert {a: 4, b: 4}.items() <= admin.topics().items()
        stats = admin.stats(a)
        assert stats is not None and stats.pending == 2
        with pytest.raises(ResponseError, match="WRONGTYPE"):  # asked for it by name
            admin.stats(b)
    async with AsyncAdmin.from_url(redis_url) as aclient:
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


WRECKED = ("delayed", "jobs", "ready", "dead", "history")
"""The keys of every shard `wrecked` overwrites with a string."""

WRONG_TYPE_ROUTES = [
    ("GET", "/v1/topics/{t}", None),
    ("GET", "/v1/topics/{t}/jobs/j", None),
    ("POST", "/v1/topics/{t}/jobs", {"payload": 1, "delay_ms": 600_000}),
    ("PATCH", "/v1/topics/{t}/jobs/j", {"delay_ms": 1000}),
    ("DELETE", "/v1/topics/{t}/jobs/j", None),
    ("GET", "/v1/topics/{t}/groups", None),
    ("GET", "/v1/topics/{t}/dead", None),
    ("POST", "/v1/topics/{t}/dead/replay", {"all": True}),
    ("GET", "/ui/topics/{t}", None),
    ("GET", "/ui/topics/{t}/jobs/j", None),
    ("GET", "/ui/topics/{t}/dead", None),
]
"""Routes that read or write a topic's keys, asked of a topic whose keys hold strings."""


@pytest.fixture
async def wrecked(redis_url: str, redis_sync: redis.Redis, topic: str) -> AsyncIterator[str]:
    """`topic` with job ``j`` pending, then the `WRECKED` keys of every shard a string (as
    another program sharing the server might write them); removed at teardown."""
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        client.enqueue(topic, 1, delay=600, job_id="j")
        shards = admin.shards(topic)
    assert shards is not None
    keys = [getattr(ShardKeys(topic, s), name) for s in range(shards) for name in WRECKED]
    redis_sync.delete(*keys)
    for key in keys:
        redis_sync.set(key, "not wheelq's")
    try:
        yield topic
    finally:
        redis_sync.delete(*keys)
        with Admin.from_url(redis_url) as admin:
            admin.drop_topic(topic, force=True)


@pytest.mark.parametrize(("method", "path", "body"), WRONG_TYPE_ROUTES)
async def test_a_route_on_a_topic_whose_keys_hold_other_types_answers_409_not_500(
    served: Served, wrecked: str, method: str, path: str, body: object
) -> None:
    """Bug: each of these answered 500 "Internal error" (a WRONGTYPE reply, or the script's
    ScriptError, taken for a bug); the key is not wheelq's, as with a malformed job (409)."""
    status, answer, _ = await served.call(method, path.format(t=wrecked), body)
    assert status == 409, answer
    if path.startswith("/v1/"):
        assert answer["type"] == "urn:wheelq:problem:wrong-type", answer
        assert "wrong" in answer["detail"].lower(), answer
    else:
        assert "Key of another type" in answer, answer


async def test_the_library_names_the_key_of_another_type(redis_url: str, wrecked: str) -> None:
    """A script that meets a key of another type raises WrongTypeError naming it (a
    ScriptError, as before), and writes nothing."""
    with Client.from_url(redis_url) as client, pytest.raises(WrongTypeError) as raised:
        client.get(wrecked, "j")
    assert isinstance(raised.value, ScriptError)
    assert raised.value.key.startswith("{" + wrecked + ":"), raised.value.key
