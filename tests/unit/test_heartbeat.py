"""The process heartbeat (`wheelq.runtime.heartbeat`): one call a beat for every role of
a process, and the last role to leave takes the process off the list."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.fakes import ScriptedExecutor
from wheelq.core.process import role_info, unpack_process
from wheelq.runtime import heartbeat
from wheelq.store.call import Call


async def until(condition: Any) -> None:
    for _ in range(1000):  # turns of the loop, not time
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never came")


def beats_to(executor: ScriptedExecutor) -> None:
    executor.answer("process_beat", lambda call: 1_000_000)


@pytest.fixture
def one_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat.connect, "server_of", lambda executor: "here:6379/0")


def record_of(call: Call[Any]) -> bytes:
    record = call.args[1]
    assert isinstance(record, bytes)
    return record


async def test_one_beat_is_one_call_carrying_every_role() -> None:
    executor = ScriptedExecutor()
    beats_to(executor)
    hb = heartbeat.Heartbeat(1000, 3000)
    hb.add(executor, lambda: role_info("scheduler", "node"))  # type: ignore[arg-type]
    hb.add(executor, lambda: role_info("worker", "consumer", concurrency=4))  # type: ignore[arg-type]

    wait_s = await hb.step()

    assert wait_s == 1.0
    assert len(executor.rounds) == 1 and len(executor.rounds[0]) == 1
    (call,) = executor.sent("process_beat")
    assert call.args[0] == hb.process_id and call.args[2] == 3000
    info = unpack_process(record_of(call), 1_003_000, 1_000_000)
    assert [r.role for r in info.roles] == ["scheduler", "worker"]
    assert (info.id, info.pid, info.beat_interval_ms, info.ttl_ms) == (
        hb.process_id,
        hb.pid,
        1000,
        3000,
    )


async def test_a_heartbeat_with_no_role_sends_nothing() -> None:
    executor = ScriptedExecutor()
    hb = heartbeat.Heartbeat(1000, 3000)
    token = hb.add(executor, lambda: role_info("worker", "c"))  # type: ignore[arg-type]
    hb.remove(token)

    assert await hb.step() is None
    assert executor.rounds == []


async def test_roles_of_one_loop_share_a_heartbeat_and_the_last_one_leaves_the_list(
    one_server: None,
) -> None:
    executor = ScriptedExecutor()
    beats_to(executor)
    first = await heartbeat.join(executor, lambda: role_info("scheduler", "n"), 1000, 3000)  # type: ignore[arg-type]
    second = await heartbeat.join(executor, lambda: role_info("worker", "c"), 5000, 60_000)  # type: ignore[arg-type]
    assert first.heartbeat is second.heartbeat
    assert heartbeat.heartbeats() == [first.heartbeat]
    assert first.heartbeat.ttl_ms == 3000  # the first role set it

    await until(lambda: executor.sent("process_beat"))  # the first join beats at once
    await first.leave()
    assert all(c.args[1] != b"" for c in executor.sent("process_beat"))
    assert first.heartbeat.running

    await second.leave()
    assert not first.heartbeat.running
    assert executor.sent("process_beat")[-1].args[:2] == (first.heartbeat.process_id, b"")
    assert heartbeat.heartbeats() == []
    third = await heartbeat.join(executor, lambda: role_info("worker", "c"), 1000, 3000)  # type: ignore[arg-type]
    assert third.heartbeat is not first.heartbeat  # a new process record
    await third.leave()


async def test_a_beat_corrects_the_heartbeats_clock_by_the_servers_time() -> None:
    executor = ScriptedExecutor()
    server_ms = 5_000_000_000_000  # far from the local clock
    executor.answer("process_beat", lambda call: server_ms)
    hb = heartbeat.Heartbeat(1000, 3000)
    hb.add(executor, lambda: role_info("worker", "c"))  # type: ignore[arg-type]

    first = hb.record().started_ms
    await hb.step()

    assert abs(first - server_ms) > 10**9  # before any beat: the local clock
    assert abs(hb.record().started_ms - server_ms) < 60_000
