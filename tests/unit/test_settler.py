"""The settler without Redis: its step against a scripted executor, a manual clock.

Acks go out as one XACK per shard for everything queued; a connection error puts what it
kept back in the queue and raises (the base pauses); a settlement Redis refuses is reported
with failed() and counted as dropped while the others go on; stop() writes what is queued
within its budget.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from tests.support.fakes import ScriptedExecutor
from tests.support.worker_parts import GROUP, TOPIC
from wheelq.core.clock import ManualClock
from wheelq.core.job import Envelope, Job
from wheelq.core.keys import ShardKeys
from wheelq.core.retry import Reason
from wheelq.errors import ScriptError
from wheelq.runtime.outage import StopBudget
from wheelq.store.call import Call
from wheelq.store.settle import Retried
from wheelq.worker.settler import ACKS_PER_CALL, Settler


def acked(call: Call[Any]) -> int:
    """XACK's reply: every id was pending."""
    return len(call.command) - 3


def settled(executor: ScriptedExecutor) -> Settler:
    executor.answer("XACK", acked)
    executor.answer("retry", lambda call: Retried(True, 1, "m"))
    executor.answer("dead_letter", lambda call: (len(call.args) - 1) // 3)
    return Settler(executor, TOPIC, GROUP, ManualClock())


def job(n: int, shard: int = 0) -> Job:
    return Job(f"j{n}", TOPIC, n, 0, 1, 3, entry_id=f"{n}-0", shard=shard)


async def test_acks_go_out_as_one_xack_per_shard_in_one_round_trip() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    for shard, entry_id in [(0, "1-0"), (1, "2-0"), (0, "3-0"), (1, "4-0"), (0, "5-0")]:
        settler.ack(shard, entry_id)

    assert await settler.step() is None  # nothing left: wait for the next outcome
    assert len(executor.rounds) == 1
    assert [c.command for c in executor.sent("XACK")] == [
        ("XACK", ShardKeys(TOPIC, 0).ready, GROUP, "1-0", "3-0", "5-0"),
        ("XACK", ShardKeys(TOPIC, 1).ready, GROUP, "2-0", "4-0"),
    ]
    assert (settler.counts.acked, settler.queued) == (5, 0)


async def test_a_long_run_of_acks_on_one_shard_is_split_into_bounded_calls() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    for n in range(ACKS_PER_CALL + 1):
        settler.ack(0, f"{n}-0")

    await settler.step()
    assert [len(c.command) - 3 for c in executor.sent("XACK")] == [ACKS_PER_CALL, 1]
    assert len(executor.rounds) == 1
    assert settler.counts.acked == ACKS_PER_CALL + 1


async def test_retries_and_dead_letters_are_sent_with_what_the_handler_asked_for() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    settler.retry(job(7, shard=1), b"\xa1x", 1500, 1_700_000_000_123)
    settler.dead(1, "8-0", Reason.FAILED, "boom")
    settler.dead(1, "9-0", Reason.MALFORMED, "bad")

    await settler.step()
    (retry,) = executor.sent("retry")
    assert list(retry.args[:4]) == [GROUP, "7-0", "j7", 1500]
    packed = retry.args[4]
    assert isinstance(packed, bytes)
    envelope = Envelope.unpack(packed)
    assert (envelope.attempt, envelope.max_attempts, envelope.enqueued_ms) == (
        2,
        3,
        1_700_000_000_123,
    )
    assert (envelope.group, envelope.job_id, envelope.payload) == (GROUP, "j7", b"\xa1x")
    (dead,) = executor.sent("dead_letter")  # one call for the shard's dead letters
    assert list(dead.args) == [GROUP, "", 0, "8-0", "failed", "boom", "9-0", "malformed", "bad"]
    assert (settler.counts.retried, settler.counts.dead_lettered) == (1, 2)


async def test_a_retry_keeps_the_jobs_traceparent_in_its_envelope() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    settler.retry(dataclasses.replace(job(1), traceparent=traced), b"\xa1x", 10, 1)
    settler.retry(job(2), b"\xa1x", 10, 1)

    await settler.step()
    envelopes = [Envelope.unpack(call.args[4]) for call in executor.sent("retry")]
    assert [e.traceparent for e in envelopes] == [traced, ""]


async def test_a_connection_error_keeps_every_settlement_queued_and_raises() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    settler.ack(0, "1-0")
    settler.retry(job(2), b"p", 100, 0)
    settler.dead(1, "3-0", Reason.FAILED, "boom")
    executor.fail_next(RedisConnectionError("connection reset"))

    with pytest.raises(RedisConnectionError):
        await settler.step()
    assert settler.queued == 3
    assert settler.counts.acked == 0

    assert await settler.step() is None  # Redis is back: the same three go out again
    assert len(executor.sent("XACK")) == len(executor.sent("retry")) == 2
    assert (settler.counts.acked, settler.counts.retried, settler.counts.dead_lettered) == (1, 1, 1)
    assert settler.queued == 0


async def test_a_connection_error_in_place_requeues_only_its_call() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    executor.answer("XACK", lambda call: RedisConnectionError("reset"))
    settler.ack(0, "1-0")
    settler.dead(0, "2-0", Reason.FAILED, "boom")

    with pytest.raises(RedisConnectionError):
        await settler.step()
    assert (settler.queued, settler.counts.dead_lettered) == (1, 1)


async def test_a_refused_settlement_is_reported_counted_as_dropped_and_the_rest_go_on() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    refusal = ScriptError(f"dead_letter.lua: key '{ShardKeys(TOPIC, 1).dead}' holds a value")
    executor.answer("dead_letter", lambda call: refusal)
    settler.ack(0, "1-0")
    settler.dead(1, "2-0", Reason.FAILED, "boom")

    assert await settler.step() is None  # refused: no raise, no pause, nothing kept
    assert (settler.counts.dropped, settler.counts.acked, settler.queued) == (1, 1, 0)
    assert settler.failures == 1
    assert settler.last_error is not None
    assert settler.last_error.startswith("ScriptError: dead_letter.lua")

    executor.answer("XACK", lambda call: ResponseError("WRONGTYPE Operation against a key"))
    settler.ack(0, "3-0")
    await settler.step()
    assert (settler.counts.dropped, settler.failures) == (2, 2)  # the count goes on
    assert settler.last_error == "ResponseError: WRONGTYPE Operation against a key"


async def test_a_settle_failing_in_this_process_fails_alone_and_holds_back_no_other() -> None:
    """A retry whose script file was removed under the running worker (an upgrade in place)
    made the whole round raise FileNotFoundError, taken for "Redis unreachable": every ack
    was held back for good. Only that settlement may fail, as that error."""
    executor = ScriptedExecutor()
    settler = settled(executor)
    missing = FileNotFoundError(2, "No such file or directory", "/venv/wheelq/store/lua/retry.lua")

    def gone(call: Call[Any]) -> Any:
        raise missing  # raised while the round is built, as Call.wire() raised it

    executor.answer("retry", gone)
    executor.answer("ack", lambda call: len(msgpack.unpackb(call.args[1])))
    settler.ack(0, "1-0")
    settler.done(job(2), 1000, 5)
    settler.retry(job(3), b"p", 100, 0)
    settler.dead(1, "4-0", Reason.FAILED, "boom")

    assert await settler.step() is None  # no outage: no raise, no pause, nothing kept
    assert (settler.counts.acked, settler.counts.dead_lettered) == (2, 1)
    assert (settler.counts.dropped, settler.queued) == (1, 0)
    assert settler.failures == 1
    assert settler.last_error == f"FileNotFoundError: {missing}"

    settler.ack(0, "5-0")  # the next settlements go out as ever
    assert await settler.step() is None
    assert (settler.counts.acked, settler.queued) == (3, 0)


async def test_stop_writes_what_is_queued_within_its_budget() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    settler.ack(0, "1-0")
    settler.dead(0, "2-0", Reason.FAILED, "boom")
    budget = StopBudget(5.0)

    stopped = await settler.stop(budget)
    assert (stopped.name, stopped.in_time, stopped.failures) == ("settler", True, 0)
    assert (settler.counts.acked, settler.counts.dead_lettered, settler.queued) == (1, 1, 0)
    assert budget.undone == []


async def test_stop_with_redis_unreachable_leaves_the_settlements_queued_and_says_so() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    settler.ack(0, "1-0")
    settler.ack(1, "2-0")
    executor.fail_next(RedisConnectionError("refused"))
    budget = StopBudget(5.0)

    await settler.stop(budget)
    assert settler.queued == 2
    assert budget.undone == ["write 2 settlements"]
    assert budget.problem is not None and "unreachable" in budget.problem


async def test_stop_with_its_budget_spent_sends_nothing() -> None:
    executor = ScriptedExecutor()
    settler = settled(executor)
    settler.ack(0, "1-0")
    budget = StopBudget(0.0)

    await settler.stop(budget)
    assert executor.rounds == []
    assert settler.queued == 1
    assert budget.undone == ["write 1 settlements"]
