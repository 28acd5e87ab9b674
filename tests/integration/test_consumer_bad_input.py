"""Bad input on the consuming side (docs/architecture.md, invariant 7): a typed error naming
the parameter and its range, raised before anything is written. "Nothing changed" is checked
on the registry and the topic's streams."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from wheelq import Admin, InvalidArgumentError, InvalidDelayError, Job, Retry, Worker
from wheelq.core.keys import TOPICS_KEY, ShardKeys

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster


def _noop(job: Job) -> None:
    pass


def _state(r: redis.Redis, topic: str) -> tuple[Any, ...]:
    keys = ShardKeys(topic, 0)
    return (r.hget(TOPICS_KEY, topic), r.exists(keys.ready, keys.dead), r.xlen(keys.dead))


@pytest.mark.parametrize(
    ("kwargs", "parameter", "message"),
    [
        ({"topic": "bad topic"}, "topic", "topic must be 1-100 characters"),
        ({"group": ""}, "group", "group must be a printable str of 1-200 characters"),
        ({"group": "a\nb"}, "group", "group must be a printable str"),
        ({"concurrency": 0}, "concurrency", "concurrency must be an int in [1, 10000], got 0"),
        (
            {"visibility_timeout_ms": 50},
            "visibility_timeout_ms",
            "visibility_timeout_ms must be an int in [100, 86400000], got 50",
        ),
        (
            {"max_deliveries": 0},
            "max_deliveries",
            "max_deliveries must be an int in [1, 1000], got 0",
        ),
        (
            {"handler_timeout_ms": -1},
            "handler_timeout_ms",
            "handler_timeout_ms must be an int in [0, 86400000], got -1",
        ),
        ({"retry_jitter_pct": 101}, "retry_jitter_pct", "retry_jitter_pct must be an int"),
        ({"poll_ms": 5}, "poll_ms", "unknown setting 'poll_ms' for WorkerSettings"),
    ],
)
def test_worker_rejects_bad_arguments_before_touching_redis(
    redis_url: str,
    redis_sync: redis.Redis,
    topic: str,
    kwargs: dict[str, Any],
    parameter: str,
    message: str,
) -> None:
    args = {"topic": topic} | kwargs
    before = _state(redis_sync, args["topic"])
    with pytest.raises(InvalidArgumentError) as info:
        Worker.from_url(redis_url, handler=_noop, **args)
    assert info.value.parameter == parameter
    assert str(info.value).startswith(message)
    assert _state(redis_sync, args["topic"]) == before


def test_worker_rejects_a_handler_that_is_not_callable(redis_url: str, topic: str) -> None:
    with pytest.raises(TypeError, match="got 'not a function', which is not callable") as info:
        Worker.from_url(redis_url, topic, "not a function")  # type: ignore[arg-type]
    assert isinstance(info.value, InvalidArgumentError) and info.value.parameter == "handler"
    assert str(info.value).startswith("handler must be a function taking one wheelq.Job")


@pytest.mark.parametrize("delay", [-1, float("nan"), float("inf"), "soon"])
def test_retry_rejects_a_bad_delay(delay: Any) -> None:
    with pytest.raises(InvalidDelayError) as info:
        Retry(delay=delay)
    assert info.value.parameter == "delay"


@pytest.mark.parametrize(
    ("refs", "message"),
    [
        (["0/not-an-id"], "a dead-letter ref must be 'shard/ms-seq'"),
        (["x/1-0"], "a dead-letter ref must be 'shard/ms-seq'"),
        (["-1/1-0"], "a dead-letter ref must be 'shard/ms-seq'"),
        (["5/1-0"], "ref shard 5 is out of range: the topic has 1 shards"),
        ("0/1-0", "refs must be a list of refs or DeadLetters (or None)"),
    ],
)
def test_replay_and_purge_reject_bad_refs_and_change_nothing(
    redis_url: str, redis_sync: redis.Redis, topic: str, refs: Any, message: str
) -> None:
    keys = ShardKeys(topic, 0)
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 1)
        redis_sync.xadd(keys.dead, {"id": "j", "payload": b"\x01", "reason": "failed"})
        before = (redis_sync.xrange(keys.dead), redis_sync.exists(keys.ready))
        for call in (admin.replay, admin.purge_dead):
            with pytest.raises(InvalidArgumentError) as info:
                call(topic, refs)
            assert info.value.parameter == "refs"
            assert message in str(info.value)
        assert (redis_sync.xrange(keys.dead), redis_sync.exists(keys.ready)) == before


@pytest.mark.parametrize("limit", [0, -1, 100_001, 1.5, True])
def test_dead_letters_rejects_a_bad_limit(redis_url: str, topic: str, limit: Any) -> None:
    with Admin.from_url(redis_url) as admin, pytest.raises(InvalidArgumentError) as info:
        admin.dead_letters(topic, limit)
    assert info.value.parameter == "limit"
    assert str(info.value) == f"limit must be an int in [1, 100000], got {limit!r}"
