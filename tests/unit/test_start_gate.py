"""The start gate against a scripted executor: once Redis answers, a role starts only on a
server with sharded pub/sub (Redis >= 7.0, Valkey >= 7.2), and says why it does not."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
import redis.asyncio

from tests.support.fakes import ScriptedExecutor
from wheelq import UnsupportedServerError
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
