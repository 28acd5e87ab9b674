"""Dead letters by reason and consumer group, the same in the library, the HTTP API, the
CLI (and the dashboard, tested with it): a filtered list pages in order and says where a
bounded scan stopped; replay and purge of "all matching" take exactly the matching ones;
a filter with refs, or a bad filter, is refused and changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from tests.support.cli import assert_one_line_error, run_wheelq
from tests.support.entries import add_ready, dead_fields
from tests.support.web import Served, assert_problem, serving
from wheelq import Admin, AsyncAdmin
from wheelq.core.keys import ShardKeys
from wheelq.core.payload import encode_payload
from wheelq.errors import InvalidArgumentError

SHARDS = 2
DEAD_MS = 1_790_000_000_000
# (reason, group) of each dead letter, oldest first: shards alternate
LETTERS = [
    ("failed", "g1"),
    ("deliveries", "g1"),
    ("failed", "g2"),
    ("malformed", "g1"),
    ("failed", "g1"),
    ("failed", "g2"),
    ("deliveries", "g2"),
    ("failed", "g1"),
]


def make_dead(redis_url: str, redis_sync: redis.Redis, topic: str) -> list[str]:
    """The topic (two shards) with `LETTERS` as its dead letters; their refs, oldest first."""
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
    refs = []
    for n, (reason, group) in enumerate(LETTERS):
        shard = n % SHARDS
        fields = dead_fields(
            f"job-{n}",
            topic=topic,
            due_ms=1,
            attempt=3,
            max_attempts=3,
            payload=encode_payload(n, 100),
            reason=reason,
            error=f"E: {n}",
            group=group,
        )
        # a ms each: the order across shards is theirs
        entry_id = add_ready(redis_sync, ShardKeys(topic, shard).dead, fields, f"{DEAD_MS + n}-0")
        refs.append(f"{shard}/{entry_id}")
    return refs


def matching(refs: list[str], reason: str | None = None, group: str | None = None) -> list[str]:
    return [
        ref
        for ref, (r, g) in zip(refs, LETTERS, strict=True)
        if reason in (None, r) and group in (None, g)
    ]


def dead_left(redis_sync: redis.Redis, topic: str) -> set[str]:
    return {
        f"{shard}/{entry_id.decode()}"
        for shard in range(SHARDS)
        for entry_id, _ in redis_sync.xrange(ShardKeys(topic, shard).dead)
    }


def ready_ids(redis_sync: redis.Redis, topic: str) -> set[str]:
    return {
        fields[b"id"].decode()
        for shard in range(SHARDS)
        for _, fields in redis_sync.xrange(ShardKeys(topic, shard).ready)
    }


# --- the library ------------------------------------------------------------------------------


def test_a_filtered_list_pages_in_order_and_a_bounded_scan_says_where_it_stopped(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = make_dead(redis_url, redis_sync, topic)
    with Admin.from_url(redis_url) as admin:
        everything = admin.dead_letters(topic)
        assert [d.ref for d in everything] == refs and everything.next is None
        for reason, group in [
            ("failed", None),
            (None, "g2"),
            ("failed", "g1"),
            ("malformed", "g2"),
        ]:
            got = admin.dead_letters(topic, reason=reason, group=group)
            assert [d.ref for d in got] == matching(refs, reason, group), (reason, group)
            assert all(reason in (None, d.reason) and group in (None, d.group) for d in got)
        # Pages of two, each going on from the one before's next.
        pages, after = [], None
        while True:
            page = admin.dead_letters(topic, 2, after=after, reason="failed")
            pages += [d.ref for d in page]
            if page.next is None:
                break
            after = page.next
        assert pages == matching(refs, "failed")
        # A scan bounded at 3 letters reads refs[0:3]: two of them g1; it goes on from refs[2].
        bounded = admin.dead_letters(topic, 10, group="g1", scan_limit=3)
        assert [d.ref for d in bounded] == [r for r in matching(refs, group="g1") if r in refs[:3]]
        assert bounded.next == refs[2]
        rest = admin.dead_letters(topic, 10, group="g1", after=bounded.next)
        assert [d.ref for d in bounded + rest] == matching(refs, group="g1")
        assert rest.next is None


def test_replay_and_purge_of_all_matching_take_exactly_those(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = make_dead(redis_url, redis_sync, topic)
    with Admin.from_url(redis_url) as admin:
        replayed = matching(refs, "deliveries")
        assert admin.replay(topic, reason="deliveries") == len(replayed) == 2
        assert ready_ids(redis_sync, topic) == {"job-1", "job-6"}
        assert dead_left(redis_sync, topic) == set(refs) - set(replayed)
        purged = matching(refs, "failed", "g1")
        assert admin.purge_dead(topic, reason="failed", group="g1") == len(purged) == 3
        assert dead_left(redis_sync, topic) == set(refs) - set(replayed) - set(purged)
        assert admin.purge_dead(topic, group="nobody") == 0  # matching none: nothing goes
        assert dead_left(redis_sync, topic) == set(refs) - set(replayed) - set(purged)


BAD_FILTERS: list[tuple[dict[str, Any], str]] = [
    ({"reason": "crashed"}, "reason"),
    ({"reason": ""}, "reason"),
    ({"reason": 3}, "reason"),
    ({"group": ""}, "group"),
    ({"group": "x" * 201}, "group"),
    ({"group": "bad\nname"}, "group"),
    ({"group": 7}, "group"),
]


@pytest.mark.parametrize(("kwargs", "field"), BAD_FILTERS)
def test_a_bad_filter_is_refused_naming_it_and_changes_nothing(
    redis_url: str, redis_sync: redis.Redis, topic: str, kwargs: dict[str, Any], field: str
) -> None:
    refs = make_dead(redis_url, redis_sync, topic)
    with Admin.from_url(redis_url) as admin:
        for call in (admin.dead_letters, admin.replay, admin.purge_dead):
            with pytest.raises(InvalidArgumentError) as raised:
                call(topic, **kwargs)
            assert raised.value.parameter == field
        with pytest.raises(InvalidArgumentError) as raised:
            admin.replay(topic, refs[:1], reason="failed")  # refs already chose: no filter
        assert raised.value.parameter == "reason"
        with pytest.raises(InvalidArgumentError) as raised:
            admin.purge_dead(topic, refs[:1], group="g1")
        assert raised.value.parameter == "group"
        for bad in (0, -1, 10**10, "3"):
            with pytest.raises(InvalidArgumentError) as raised:
                admin.dead_letters(topic, reason="failed", scan_limit=bad)  # type: ignore[arg-type]
            assert raised.value.parameter == "scan_limit"
    assert dead_left(redis_sync, topic) == set(refs)
    assert ready_ids(redis_sync, topic) == set()


# --- HTTP -------------------------------------------------------------------------------------


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def test_http_filters_lists_replays_and_purges_like_the_library(
    api: Served, redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = make_dead(redis_url, redis_sync, topic)
    dead = f"/v1/topics/{topic}/dead"
    status, page, _ = await api.call("GET", dead, params={"reason": "failed", "group": "g2"})
    assert status == 200
    assert [d["ref"] for d in page["dead"]] == matching(refs, "failed", "g2")
    assert page["next"] is None
    status, page, _ = await api.call("GET", dead, params={"group": "g1", "limit": "2"})
    assert [d["ref"] for d in page["dead"]] == matching(refs, group="g1")[:2]
    assert page["next"] == matching(refs, group="g1")[1]
    body = {"all": True, "reason": "deliveries", "group": "g2"}
    answer = (200, {"count": 1, "skipped": 0})
    assert (await api.call("POST", f"{dead}/replay", body))[:2] == answer
    assert ready_ids(redis_sync, topic) == {"job-6"}
    got = await api.call("DELETE", dead, params={"all": "true", "reason": "malformed"})
    assert got[:2] == (200, {"count": 1})
    gone = set(matching(refs, "deliveries", "g2")) | set(matching(refs, "malformed"))
    assert dead_left(redis_sync, topic) == set(refs) - gone


async def test_http_refuses_bad_filters_and_filters_with_refs_changing_nothing(
    api: Served, redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = make_dead(redis_url, redis_sync, topic)
    dead = f"/v1/topics/{topic}/dead"
    attacks: list[tuple[str, dict[str, Any] | None, Any, str]] = [
        ("GET", {"reason": "crashed"}, None, "reason"),
        ("GET", {"reason": ""}, None, "reason"),
        ("GET", {"group": ""}, None, "group"),
        ("GET", {"group": "g" * 201}, None, "group"),
        ("GET", {"group": "a\x00b"}, None, "group"),
        ("POST", None, {"refs": refs[:1], "reason": "failed"}, "reason"),
        ("POST", None, {"refs": refs[:1], "group": "g1"}, "group"),
        ("POST", None, {"all": True, "reason": "FAILED"}, "reason"),
        ("POST", None, {"all": True, "reason": ["failed"]}, "reason"),
        ("POST", None, {"all": True, "group": ""}, "group"),
        ("POST", None, {"all": True, "group": 5}, "group"),
        ("POST", None, {"reason": "failed"}, "refs"),  # a filter alone is not "all"
        ("DELETE", {"ref": refs[0], "reason": "failed"}, None, "reason"),
        ("DELETE", {"ref": refs[0], "group": "g1"}, None, "group"),
        ("DELETE", {"all": "true", "reason": "nope"}, None, "reason"),
        ("DELETE", {"group": "g1"}, None, "refs"),
    ]
    for method, params, body, field in attacks:
        path = f"{dead}/replay" if method == "POST" else dead
        got = await api.call(method, path, body, params=params)
        assert_problem(got, 422, field)
    assert dead_left(redis_sync, topic) == set(refs)
    assert ready_ids(redis_sync, topic) == set()


# --- the CLI ----------------------------------------------------------------------------------


def test_the_cli_filters_lists_replays_and_purges(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = make_dead(redis_url, redis_sync, topic)
    url = ["--redis-url", redis_url]
    listed = run_wheelq("dlq", "list", topic, "--reason", "failed", "--group", "g1", *url)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == matching(
        refs, "failed", "g1"
    )
    total = len(LETTERS)
    assert listed.stderr.strip() == f"showing 1-3 matching --reason failed --group g1 of {total}"
    paged = run_wheelq("dlq", "list", topic, "--group", "g2", "--limit", "2", *url)
    assert paged.stderr.strip() == (
        f"showing 1-2 matching --group g2 of {total}; next page: --offset 2"
    )
    none = run_wheelq("dlq", "list", topic, "--reason", "malformed", "--group", "g2", *url)
    assert (none.returncode, none.stdout) == (0, "")
    assert "none matching --reason malformed --group g2" in none.stderr
    mixed = run_wheelq("dlq", "replay", topic, refs[0], "--reason", "failed", *url)
    assert_one_line_error(mixed, 2, "--reason failed goes with --all")
    bad = run_wheelq("dlq", "purge", topic, "--all", "--reason", "crashed", *url)
    assert bad.returncode == 2 and "--reason" in bad.stderr
    assert dead_left(redis_sync, topic) == set(refs)
    replayed = run_wheelq("dlq", "replay", topic, "--all", "--group", "g2", *url)
    assert (replayed.returncode, replayed.stdout.strip()) == (0, "replayed 3")
    assert ready_ids(redis_sync, topic) == {"job-2", "job-5", "job-6"}
    purged = run_wheelq("dlq", "purge", topic, "--all", "--reason", "deliveries", *url)
    assert (purged.returncode, purged.stdout.strip()) == (0, "purged 1")
    gone = set(matching(refs, group="g2")) | set(matching(refs, "deliveries"))
    assert dead_left(redis_sync, topic) == set(refs) - gone


async def test_async_client_takes_the_same_filter(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = make_dead(redis_url, redis_sync, topic)
    async with AsyncAdmin.from_url(redis_url) as admin:
        got = await admin.dead_letters(topic, reason="failed", group="g2")
        assert [d.ref for d in got] == matching(refs, "failed", "g2")
        assert await admin.replay(topic, group="g2", reason="deliveries") == 1
        assert await admin.purge_dead(topic, reason="malformed") == 1
        with pytest.raises(InvalidArgumentError):
            await admin.purge_dead(topic, reason="nope")
    gone = set(matching(refs, "deliveries", "g2")) | set(matching(refs, "malformed"))
    assert dead_left(redis_sync, topic) == set(refs) - gone
