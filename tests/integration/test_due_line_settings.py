"""The due line's topic settings (`Admin.set_limits(priority_credit_ms=, fair=,
fair_weights=)`) on a real server and the cluster: written to every shard, read back by the
sync and async admins, a setting left out kept, bad input refused with nothing written, and
the weights dropped with the topic (docs/architecture.md, "The due line"). Every face:
tests/integration/matrix/test_limits_faces.py."""

from __future__ import annotations

import pytest
import redis

from wheelq import Admin, AsyncAdmin, InvalidArgumentError, TopicLimits
from wheelq.core.keys import all_shards

pytestmark = pytest.mark.cluster_too

SHARDS = 3


def test_settings_reach_every_shard_and_read_back(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
        assert admin.limits(topic) == TopicLimits()  # 1,000 ms credit, fair off, no weights
        got = admin.set_limits(
            topic, priority_credit_ms=250, fair=True, fair_weights={"big": 5, "tenant é": 2}
        )
        want = TopicLimits(None, None, 250, True, {"big": 5, "tenant é": 2})
        assert got == want and admin.limits(topic) == want
    for keys in all_shards(topic, SHARDS):
        fields = redis_sync.hgetall(keys.limits)
        assert (fields[b"credit"], fields[b"fair"], fields[b"ordered"]) == (b"250", b"1", b"1")
        assert redis_sync.hgetall(keys.weights) == {b"big": b"5", "tenant é".encode(): b"2"}


async def test_a_setting_left_out_stays_as_it_is(redis_url: str, topic: str) -> None:
    async with AsyncAdmin.from_url(redis_url) as admin:
        await admin.create_topic(topic, SHARDS)
        await admin.set_limits(topic, max_pending=30, max_ready=9)
        await admin.set_limits(topic, priority_credit_ms=0, fair=True, fair_weights={"a": 3})
        assert await admin.limits(topic) == TopicLimits(30, 9, 0, True, {"a": 3})
        # Weights replaced, not merged; fair off, and a limit removed, the rest kept.
        await admin.set_limits(topic, fair_weights={"b": 1000})
        assert (await admin.limits(topic)).fair_weights == {"b": 1000}
        got = await admin.set_limits(topic, fair=False, max_ready=None)
        assert got == TopicLimits(30, None, 0, False, {"b": 1000})
        assert await admin.set_limits(topic) == got  # nothing named: nothing changes
        assert (await admin.set_limits(topic, fair_weights={})).fair_weights == {}
        assert await admin.limits(topic) == TopicLimits(30, None, 0, False, {})


def test_fair_off_leaves_the_shards_ordered(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """``ordered`` only says held jobs may exist: the leader keeps draining them in order."""
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
        admin.set_limits(topic, fair=True)
        admin.set_limits(topic, fair=False)
        assert not admin.limits(topic).fair
    for keys in all_shards(topic, SHARDS):
        fields = redis_sync.hgetall(keys.limits)
        assert b"fair" not in fields and fields[b"ordered"] == b"1"


@pytest.mark.parametrize(
    "bad",
    [
        {"priority_credit_ms": 86_400_001},
        {"priority_credit_ms": -1},
        {"fair": "on"},
        {"fair_weights": {"a": 0}},
        {"fair_weights": {"": 1}},
        {"max_pending": 0},
    ],
)
def test_bad_input_is_refused_naming_it_and_nothing_is_written(
    redis_url: str, redis_sync: redis.Redis, topic: str, bad: dict[str, object]
) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
        before = admin.set_limits(topic, max_pending=6, fair=True, fair_weights={"kept": 4})
        good: dict[str, object] = {
            "max_ready": 7,
            "priority_credit_ms": 5,
            "fair": False,
            "fair_weights": {"x": 9},
        }
        with pytest.raises(InvalidArgumentError) as info:
            admin.set_limits(topic, **(good | bad))  # type: ignore[arg-type]
        assert info.value.parameter == next(iter(bad))
        assert admin.limits(topic) == before
    for keys in all_shards(topic, SHARDS):
        assert redis_sync.hgetall(keys.weights) == {b"kept": b"4"}
        assert b"credit" not in redis_sync.hgetall(keys.limits)


def test_bad_input_creates_no_topic(redis_url: str, topic: str) -> None:
    with Admin.from_url(redis_url) as admin:
        with pytest.raises(InvalidArgumentError):
            admin.set_limits(topic, fair_weights={"a": 1001})
        assert topic not in admin.topics()


def test_the_weights_go_with_a_dropped_topic(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
        admin.set_limits(topic, fair=True, fair_weights={"a": 2})
        assert admin.drop_topic(topic)
        assert all(not redis_sync.exists(k.weights) for k in all_shards(topic, SHARDS))
        admin.create_topic(topic, SHARDS + 1)  # made again: the settings start over
        assert admin.limits(topic) == TopicLimits()


def test_the_most_weights_are_written_whole(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """10,000 weights: 20,000 arguments, past one HSET slice of `wq_multi` (4,000)."""
    weights = {f"tenant-{i}": i % 1000 + 1 for i in range(10_000)}
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 2)
        assert admin.set_limits(topic, fair_weights=weights).fair_weights == weights
        assert admin.set_limits(topic, fair_weights={"one": 2}).fair_weights == {"one": 2}
    assert all(redis_sync.hlen(k.weights) == 1 for k in all_shards(topic, 2))
