"""The start gate against a scripted executor: once Redis answers, a role starts only on a
server with sharded pub/sub (Redis >= 7.0, Valkey >= 7.2), and says why it does not."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
import redis.asyncio
from redis._parsers.base import BaseParser
from redis.exceptions import NoPermissionError

from tests.support.fakes import ScriptedExecutor
from wheelq import RedisUnavailableError, UnsupportedServerError
from wheelq.runtime.outage import StartGate
from wheelq.store.executor import AsyncExecutor


class GateExecutor(ScriptedExecutor):
    """A scripted executor with what the gate asks of a real one besides calls."""

    client = redis.asyncio.Redis(host="redis.example", port=6390)

    def __init__(self) -> None:
        super().__init__()
        self.resolved = 0

    async def resolve(self) -> bool:
        self.resolved += 1
        return False


def gate_on(version: str) -> tuple[StartGate, GateExecutor]:
    executor = GateExecutor()
    executor.answer("PING", lambda call: True)
    executor.answer("INFO", lambda call: call.parse({"redis_version": version}))
    gate = StartGate(cast(AsyncExecutor, executor), 1000, logging.getLogger(__name__))
    return gate, executor


@pytest.mark.parametrize("version", ["7.0.0", "7.0.15", "7.2.4", "8.2.1"])
async def test_a_role_starts_on_redis_7_or_later(version: str) -> None:
    gate, executor = gate_on(version)
    started: list[Any] = []

    async def start() -> None:
        started.append(version)

    await gate.run(start)

    assert started == [version] and gate.started
    assert executor.resolved == 1, "the gate found out whether the server is a cluster node"


@pytest.mark.parametrize("version", ["6.2.14", "5.0.7", "garbage"])
async def test_an_older_server_is_refused_naming_its_version_and_the_minimum(
    version: str,
) -> None:
    gate, _ = gate_on(version)
    started: list[Any] = []

    async def start() -> None:
        started.append(version)

    with pytest.raises(UnsupportedServerError) as info:
        await gate.run(start)

    assert started == [] and not gate.started and gate.stopped.is_set()
    assert "redis.example:6390" in str(info.value) and "Redis >= 7.0" in str(info.value)


REFUSALS = {
    "oom": "OOM command not allowed when used memory > 'maxmemory'.",
    "readonly": "READONLY You can't write against a read only replica.",
    "loading": "LOADING Redis is loading the dataset in memory",
    "busy": "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN "
    "NOSAVE.",
    "masterdown": "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to "
    "'no'.",
}


@pytest.mark.parametrize("reason", sorted(REFUSALS))
async def test_a_start_redis_refuses_for_now_is_waited_out_and_tried_again(
    reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, executor = gate_on("7.2.4")
    gate = StartGate(cast(AsyncExecutor, executor), 60_000, logging.getLogger(__name__))
    seen: list[str | None] = []

    async def start() -> None:
        seen.append(gate.waiting)
        if len(seen) < 3:
            raise BaseParser.parse_error(REFUSALS[reason])

    caplog.set_level(logging.INFO, __name__)
    await gate.run(start)

    assert seen == [None, reason, reason] and gate.started and gate.up
    assert gate.waiting is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"redis at redis.example:6390 unavailable ({reason}: "
        f"{BaseParser.parse_error(REFUSALS[reason])}), retrying for up to 60 s"
    ]
    assert any("took the start after" in r.getMessage() for r in caplog.records)


async def test_a_refusal_that_outlasts_start_timeout_ms_is_redis_unavailable_naming_it() -> None:
    _, executor = gate_on("7.2.4")
    gate = StartGate(cast(AsyncExecutor, executor), 0, logging.getLogger(__name__))

    async def start() -> None:
        raise BaseParser.parse_error(REFUSALS["oom"])

    with pytest.raises(RedisUnavailableError) as info:
        await gate.run(start)

    assert info.value.reason == "oom" and not gate.started and gate.stopped.is_set()
    assert str(info.value).startswith(
        "redis at redis.example:6390 unavailable for start_timeout_ms=0 (command not allowed"
    )


async def test_a_start_failing_for_good_is_not_tried_again() -> None:
    gate, _ = gate_on("7.2.4")
    tries: list[int] = []

    async def start() -> None:
        tries.append(1)
        raise BaseParser.parse_error("NOPERM this user has no permissions to run 'xadd'")

    with pytest.raises(NoPermissionError):
        await gate.run(start)

    assert tries == [1] and not gate.started


async def test_a_stop_ends_a_wait_out_of_a_refusal_at_once() -> None:
    gate, _ = gate_on("7.2.4")
    refused = asyncio.Event()

    async def start() -> None:
        refused.set()
        raise BaseParser.parse_error(REFUSALS["oom"])

    running = asyncio.ensure_future(gate.run(start))
    await refused.wait()

    assert await gate.abort() is False
    await running
    assert not gate.started and gate.stopped.is_set() and gate.waiting is None
