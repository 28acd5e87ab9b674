"""A worker's membership without Redis: join creates the group on every shard at 0 or $,
taking BUSYGROUP as "it exists"; hand_on makes entries idle and counts the ones still held;
leave deletes the consumer on every shard."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from tests.support.fakes import ScriptedExecutor
from tests.support.worker_parts import GROUP, TOPIC, consumer
from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call
from wheelq.worker.stream_reader import Membership

BUSY = ResponseError("BUSYGROUP Consumer Group name already exists")


def ready(shard: int) -> str:
    return ShardKeys(TOPIC, shard).ready


@pytest.mark.parametrize("start_id", ["0", "$"])
async def test_join_creates_the_group_on_every_shard_where_it_starts(start_id: str) -> None:
    executor = ScriptedExecutor()
    executor.answer("XGROUP", lambda call: True)
    await Membership(consumer(executor, shards=3)).join(start_id)
    assert [c.command for c in executor.sent("XGROUP")] == [
        ("XGROUP", "CREATE", ready(shard), GROUP, start_id, "MKSTREAM") for shard in range(3)
    ]
    assert len(executor.rounds) == 1


async def test_join_takes_busygroup_as_an_existing_group_and_raises_anything_else() -> None:
    executor = ScriptedExecutor()
    executor.answer("XGROUP", lambda call: BUSY if call.command[2] == ready(0) else True)
    await Membership(consumer(executor, shards=2)).join()

    wrong = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    executor.answer("XGROUP", lambda call: wrong if call.command[2] == ready(1) else BUSY)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await Membership(consumer(executor, shards=2)).join()


async def test_hand_on_sets_the_idle_time_and_counts_the_entries_still_held() -> None:
    executor = ScriptedExecutor()

    def touch(call: Call[Any]) -> list[str] | Exception:
        if call.keys[0] == ready(2):
            return RedisConnectionError("reset")  # this shard's entries were not handed on
        return ["2-0"] if call.keys[0] == ready(0) else []

    executor.answer("touch", touch)
    members = Membership(consumer(executor, shards=3))
    handed = await members.hand_on({0: ["1-0", "2-0"], 1: ["3-0"], 2: ["4-0"]}, 30_000)
    assert handed == 2  # 1-0 and 3-0: 2-0 was no longer ours, shard 2 failed
    assert [list(c.args) for c in executor.sent("touch")] == [
        [GROUP, "me", 30_000, "1-0", "2-0"],
        [GROUP, "me", 30_000, "3-0"],
        [GROUP, "me", 30_000, "4-0"],
    ]
    assert await members.hand_on({}, 30_000) == 0
    assert len(executor.rounds) == 1


async def test_still_pending_lists_this_consumers_entries_by_shard() -> None:
    executor = ScriptedExecutor()
    pages = {ready(0): ["1-0"], ready(1): [], ready(2): RedisConnectionError("reset")}
    executor.answer("XPENDING", lambda call: pages[str(call.command[1])])
    members = Membership(consumer(executor, shards=3))
    assert await members.still_pending() == {0: ["1-0"]}
    assert executor.sent("XPENDING")[0].command[-1] == "me"


async def test_leave_deletes_the_consumer_on_every_shard_whatever_some_answer() -> None:
    executor = ScriptedExecutor()
    executor.answer("XGROUP", lambda call: RedisConnectionError("reset"))
    await Membership(consumer(executor, shards=2)).leave()
    assert [c.command for c in executor.sent("XGROUP")] == [
        ("XGROUP", "DELCONSUMER", ready(shard), GROUP, "me") for shard in range(2)
    ]
