"""`wheelq dlq`: refs and --all never mixed, unknown refs and topics fail, list pages and
says how many there are, --json prints the payload as JSON."""

from __future__ import annotations

import base64
import json

import redis

from tests.support.cli import assert_one_line_error, run_wheelq
from wheelq import Admin
from wheelq.core.keys import ShardKeys
from wheelq.core.payload import encode_payload


def _dead(redis_sync: redis.Redis, topic: str, shard: int, n: int, payload: bytes) -> str:
    entry_id = redis_sync.xadd(
        ShardKeys(topic, shard).dead,
        {"id": f"job-{n}", "topic": topic, "due": "1", "attempt": "3", "max_attempts": "3",
         "payload": payload, "reason": "failed", "error": f"ValueError: {n}\nTraceback",
         "group": "g", "entry": "1-0"},
    )  # fmt: skip
    return f"{shard}/{entry_id.decode()}"


def _topic_with_dead(redis_url: str, redis_sync: redis.Redis, topic: str, n: int) -> list[str]:
    """A two-shard topic with `n` dead letters (alternating shards); their refs, oldest first."""
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 2)
    return [_dead(redis_sync, topic, i % 2, i, encode_payload({"n": i}, 100)) for i in range(n)]


def test_purge_refuses_refs_mixed_with_all(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = _topic_with_dead(redis_url, redis_sync, topic, 3)
    for action in ("purge", "replay"):
        done = run_wheelq("dlq", action, topic, refs[0], "--all", "--redis-url", redis_url)
        assert_one_line_error(done, 2, "refs (from 'wheelq dlq list') or --all, not both")
    assert sum(redis_sync.xlen(ShardKeys(topic, s).dead) for s in (0, 1)) == 3


def test_unknown_refs_and_topics_fail(redis_url: str, redis_sync: redis.Redis, topic: str) -> None:
    refs = _topic_with_dead(redis_url, redis_sync, topic, 2)
    url = ["--redis-url", redis_url]
    absent = "1/1-1"
    replayed = run_wheelq("dlq", "replay", topic, refs[0], absent, *url)
    assert replayed.stdout.strip() == "replayed 1"
    assert_one_line_error(replayed, 1, f"1 of 2 refs were not on '{topic}'")
    purged = run_wheelq("dlq", "purge", topic, absent, *url)
    assert purged.stdout.strip() == "purged 0"
    assert_one_line_error(purged, 1, f"1 of 1 refs were not on '{topic}'")
    for args in (["replay", "--all"], ["purge", "--all"], ["list"]):
        done = run_wheelq("dlq", args[0], "nope-" + topic, *args[1:], *url)
        assert_one_line_error(done, 1, f"no such topic 'nope-{topic}'")
    # A known topic with nothing to replay is no error.
    everything = run_wheelq("dlq", "replay", topic, "--all", *url)
    assert (everything.returncode, everything.stdout.strip()) == (0, "replayed 1")


def test_list_pages_and_says_how_many_there_are(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    refs = _topic_with_dead(redis_url, redis_sync, topic, 5)
    url = ["--redis-url", redis_url]
    pages = []
    for offset, note in [
        ("0", "showing 1-2 of 5; next page: --offset 2"),
        ("2", "showing 3-4 of 5; next page: --offset 4"),
        ("4", "showing 5-5 of 5"),
    ]:
        done = run_wheelq("dlq", "list", topic, "--limit", "2", "--offset", offset, *url)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == note
        pages += [line.split()[0] for line in done.stdout.splitlines()]
    with Admin.from_url(redis_url) as admin:  # oldest first; one ms's are in shard order
        assert pages == [dead.ref for dead in admin.dead_letters(topic)]
    assert sorted(pages) == sorted(refs)
    everything = run_wheelq("dlq", "list", topic, *url)
    assert (len(everything.stdout.splitlines()), everything.stderr) == (5, "")
    over = run_wheelq("dlq", "list", topic, "--limit", "0", *url)
    assert_one_line_error(over, 2, "--limit must be >= 1")


def test_list_json_prints_the_payload_as_json(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 1)
    payload = {"to": "ada", "n": [1, 2.5, None, True], "blob": b"\x00\xff", 7: "int key"}
    _dead(redis_sync, topic, 0, 0, encode_payload(payload, 1000))
    _dead(redis_sync, topic, 0, 1, b"\xc1 not msgpack")
    done = run_wheelq("dlq", "list", topic, "--json", "--redis-url", redis_url)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows[0]["payload"] == {
        "to": "ada",
        "n": [1, 2.5, None, True],
        "blob": {"$bytes": base64.b64encode(b"\x00\xff").decode()},
        "7": "int key",
    }
    assert rows[1]["payload"] == {"$bytes": base64.b64encode(b"\xc1 not msgpack").decode()}
    assert (rows[0]["job_id"], rows[0]["attempt"], rows[0]["group"]) == ("job-0", 3, "g")
