"""Shared pieces of the script tests (test_scripts.py, test_consume_scripts.py): a runner
for one call, and the fixtures every script test uses. The fixtures are imported into
tests/integration/conftest.py, which registers them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest
import redis
from redis.client import PubSub

from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call
from wheelq.store.executor import SyncExecutor

T = TypeVar("T")

# Not valid UTF-8, with a NUL and a byte that looks like a msgpack header: must arrive unchanged.
RAW_PAYLOAD = b"\xff\x00\xfe\x80\xc4\x01binary\xed\xa0\x80"


class Runner:
    """Runs one call through a `SyncExecutor` and returns its parsed reply."""

    def __init__(self, client: redis.Redis) -> None:
        self.executor = SyncExecutor(client)

    def __call__(self, call: Call[T]) -> T:
        result: T = self.executor.run([call])[0]
        return result


@pytest.fixture
def keys(topic: str) -> ShardKeys:
    """Shard 3 of the test's topic (not 0, so shard arithmetic is exercised)."""
    return ShardKeys(topic, 3)


@pytest.fixture
def run(redis_sync: redis.Redis) -> Runner:
    return Runner(redis_sync)


@pytest.fixture
def wake(redis_sync: redis.Redis, keys: ShardKeys) -> Iterator[PubSub]:
    """A subscription to the shard's wake channel, confirmed before the test runs."""
    pubsub = redis_sync.pubsub()
    pubsub.ssubscribe(keys.wake_channel)  # the scripts SPUBLISH: sharded pub/sub
    confirmation = pubsub.get_message(timeout=5)
    assert confirmation is not None and confirmation["type"] == "ssubscribe"
    yield pubsub
    pubsub.close()
