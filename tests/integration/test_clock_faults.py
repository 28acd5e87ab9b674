"""Faults inside a scheduler node: its clock jumping (a host whose clock steps, or a bad
offset) and its lease renewals held past the TTL (a node starved of CPU). Neither may make
a job early, twice or lost: due times are decided by the scripts on the Redis clock, and
every emit is fenced by the lease (docs/architecture.md, invariants 2, 3 and 6)."""

from __future__ import annotations

import pytest
import redis

from tests.support.fault_run import TIMEOUTS, FaultRun
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually
from wheelq import Scheduler
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary, faults
from wheelq.testing.faults import SkewedClock

JOBS, SPAN_S = 400, 3.0

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("jump_ms", [3000, -2000])
async def test_a_node_whose_clock_jumps_fires_nothing_early_and_loses_nothing(
    redis_url: str, jump_ms: int
) -> None:
    clock = SkewedClock()
    async with FaultRun(redis_url, clock=clock) as run:
        await run.enqueue(JOBS, span_s=SPAN_S)
        await run.when_fired(50)
        clock.jump_ms = jump_ms  # the node now believes it is 3 s later (or 2 s earlier)
        account = await run.account()
    assert account.ok, account.examples  # early == 0: the scripts go by Redis's TIME
    assert account.fired == JOBS


async def test_a_node_too_slow_to_renew_is_fenced_out_and_nothing_fires_twice(
    server_binary: ServerBinary,
) -> None:
    settings = {"lease_ttl_ms": 1000, "check_interval_ms": 100}
    with dedicated_server(server_binary) as srv, redis.Redis.from_url(srv.url) as r:
        async with FaultRun(srv.url, node=settings) as run:
            slow = run.node
            assert slow is not None
            await run.enqueue(JOBS, span_s=SPAN_S, lead_s=1.0)
            undo = faults.slow_renewals(slow)
            other = Scheduler.from_url(srv.url, run.topic, redis_options=TIMEOUTS, **settings)
            await other.start()
            try:

                async def other_leads_all() -> bool:
                    leases = [r.get(k.lease) for k in all_shards(run.topic, 4)]
                    return len(other.leads.all()) == 4 and None not in leases

                await eventually(other_leads_all, timeout_s=15, what="the other node to lead all")

                # It learns of each loss at its next (slowed) renewal or check: a moment after
                # the other node took the shard, longer on a loaded machine.
                async def slow_dropped_all() -> bool:
                    return slow.leads.all() == []

                await eventually(
                    slow_dropped_all, timeout_s=15, what="the slow node to drop every shard it lost"
                )
                account = await run.account()
            finally:
                undo()
                await other.stop()
    assert account.ok, account.examples  # fired_twice == 0: its late emits were refused
    assert account.fired == JOBS
