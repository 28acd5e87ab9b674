"""Each fault the chaos soak mixes, alone and deterministic: the server pausing writes,
killing every client, flushing its scripts, running out of memory; the network stalling
or slowing every connection. A node and a worker (tests/support/fault_run.py) fire and run
jobs through it; the account afterwards must show nothing lost, nothing fired twice or
early, every job handled.

(Kill -9 of nodes, workers and the server, SIGSTOP and cut connections have their own
tests: test_failover.py, test_worker_processes.py, test_worker_faults.py,
test_crash_points.py.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from tests.support.fault_run import FaultRun
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually
from wheelq import AsyncClient
from wheelq.testing import ServerBinary, faults
from wheelq.testing.proxy import CuttingProxy

pytestmark = pytest.mark.both_servers  # the server's faults: CLIENT PAUSE/KILL, SCRIPT FLUSH, OOM

JOBS, SPAN_S = 400, 3.0


async def test_writes_paused_mid_stream_delay_jobs_but_lose_none(
    server_binary: ServerBinary,
) -> None:
    with dedicated_server(server_binary) as srv, redis.Redis.from_url(srv.url) as admin:
        async with FaultRun(srv.url) as run:
            await run.enqueue(JOBS, span_s=SPAN_S)
            await run.when_fired(50)
            fired_before = await run.fired()
            faults.pause_writes(admin, 1500)
            account = await run.account()
        assert fired_before < JOBS, "the pause must begin while jobs are still due"
        assert account.ok, account.examples
        assert account.fired == JOBS


async def test_every_client_killed_repeatedly_while_jobs_fire(server_binary: ServerBinary) -> None:
    with dedicated_server(server_binary) as srv, redis.Redis.from_url(srv.url) as admin:
        async with FaultRun(srv.url) as run:
            await run.enqueue(JOBS, span_s=SPAN_S)
            killed = []
            for step in (50, 150, 250):
                await run.when_fired(step)
                killed.append(faults.kill_clients(admin))
            account = await run.account()
        assert all(n >= 2 for n in killed), f"the node's and worker's links were cut: {killed}"
        assert account.ok, account.examples
        assert account.fired == JOBS, "jobs due after the last kill fired: both reconnected"


async def test_scripts_flushed_while_jobs_fire_and_settle(server_binary: ServerBinary) -> None:
    with dedicated_server(server_binary) as srv, redis.Redis.from_url(srv.url) as admin:
        async with FaultRun(srv.url) as run:
            await run.enqueue(JOBS, span_s=SPAN_S)
            for step in (50, 200):
                await run.when_fired(step)
                faults.flush_scripts(admin)
            account = await run.account()
        assert account.ok, account.examples
        assert account.fired == JOBS


async def test_out_of_memory_while_a_spooling_producer_enqueues(
    server_binary: ServerBinary, tmp_path: Path
) -> None:
    with dedicated_server(server_binary) as srv, redis.Redis.from_url(srv.url) as admin:
        async with (
            FaultRun(srv.url) as run,
            AsyncClient.from_url(srv.url, spool=str(tmp_path / "spool.db")) as spooling,
        ):
            await run.enqueue(JOBS, span_s=SPAN_S)
            await run.when_fired(50)
            state = faults.squeeze_memory(admin)
            try:
                at = (await run.now_ms() + 1500) / 1000
                items = [{"payload": i, "job_id": f"s{i}", "at": at} for i in range(100)]
                spooled = await spooling.enqueue_many(run.topic, items)  # OOM: to the spool
                depth = spooling.spool_stats()
            finally:
                faults.restore_memory(admin, state)
            run.ids += spooled

            async def replayed() -> bool:
                stats = spooling.spool_stats()
                return stats is not None and stats.depth == 0

            await eventually(replayed, timeout_s=15, what="the spool to replay")
            account = await run.account()
        assert depth is not None and depth.depth == 100, "Redis refused them (OOM): spooled"
        assert account.ok, account.examples
        assert account.fired == JOBS + 100


async def test_every_connection_stalled_past_the_socket_timeout(
    server_binary: ServerBinary,
) -> None:
    with dedicated_server(server_binary) as srv:
        async with CuttingProxy(srv.port) as proxy:
            via = f"redis://127.0.0.1:{proxy.port}"
            async with FaultRun(srv.url, role_url=via) as run:
                await run.enqueue(JOBS, span_s=SPAN_S)
                await run.when_fired(50)
                proxy.stall()
                fired_in_stall = await run.fired()
                await asyncio.sleep(1.5)  # the fault's length: past the 1 s socket timeout
                stalled_more = await run.fired() - fired_in_stall
                proxy.unstall()
                account = await run.account()
        assert stalled_more <= 50, "a stalled node cannot emit (at most a round in flight)"
        assert account.ok, account.examples
        assert account.fired == JOBS


async def test_every_connection_slowed(server_binary: ServerBinary) -> None:
    with dedicated_server(server_binary) as srv:
        async with CuttingProxy(srv.port) as proxy:
            via = f"redis://127.0.0.1:{proxy.port}"
            async with FaultRun(srv.url, role_url=via) as run:
                proxy.slow(30)
                await run.enqueue(JOBS, span_s=SPAN_S)
                await run.when_fired(JOBS // 2)
                proxy.slow(0)
                account = await run.account()
        assert account.ok, account.examples
        assert account.fired == JOBS
