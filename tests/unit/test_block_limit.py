"""wheelq's connections give up on a silent server after `SOCKET_TIMEOUT_S` unless
``redis_options`` says otherwise, whatever redis-py's own default (None before redis-py 8),
and a blocking call asks at most `BLOCK_SHARE` of the timeout its connection has
(tests/integration/test_socket_timeout.py drives every face that blocks)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from wheelq.store import connect
from wheelq.store.executor import BLOCK_SHARE, MIN_BLOCK_MS, SOCKET_TIMEOUT_S, SyncExecutor

URL = "redis://127.0.0.1:1/0"  # never connected to: the options are what is read
DEFAULT_LIMIT_MS = int(SOCKET_TIMEOUT_S * 1000 * BLOCK_SHARE)


@pytest.mark.parametrize(
    ("options", "timeouts", "asked", "cut"),
    [
        ({}, (SOCKET_TIMEOUT_S, SOCKET_TIMEOUT_S), 60_000, DEFAULT_LIMIT_MS),
        ({}, (SOCKET_TIMEOUT_S, SOCKET_TIMEOUT_S), 2000, 2000),
        ({"socket_timeout": 2}, (2, SOCKET_TIMEOUT_S), 2000, int(2000 * BLOCK_SHARE)),
        ({"socket_timeout": 0.001}, (0.001, SOCKET_TIMEOUT_S), 2000, MIN_BLOCK_MS),
        ({"socket_timeout": None, "socket_connect_timeout": 1}, (None, 1), 60_000, 60_000),
    ],
    ids=["default-long", "default-short", "two-seconds", "tiny", "none"],
)
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_block_is_cut_to_the_share_of_the_socket_timeout(
    face: str, options: dict[str, Any], timeouts: tuple[object, object], asked: int, cut: int
) -> None:
    make = connect.sync_executor if face == "sync" else connect.async_executor
    executor = make(URL, options, False)
    kwargs = executor.client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == timeouts
    assert executor.block_ms(asked) == cut


def test_a_client_made_without_options_is_taken_at_the_default() -> None:
    """A redis-py client the caller made (redis-py's class default applies: 5 s in 8.x)."""
    assert SyncExecutor(redis.Redis.from_url(URL)).block_ms(60_000) == DEFAULT_LIMIT_MS
