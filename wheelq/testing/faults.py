"""Faults a test or the chaos soak injects. Server faults send one command on a plain
connection to ONE server (loop over a cluster's primaries); `slow_renewals` and
`SkewedClock` act on a scheduler node of this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import redis

from wheelq.runtime.clock import RedisClock
from wheelq.scheduler.scheduler import Scheduler


def flush_scripts(conn: redis.Redis) -> None:
    conn.script_flush()


def pause_writes(conn: redis.Redis, ms: int) -> None:
    conn.client_pause(ms, all=False)  # all=False: CLIENT PAUSE ms WRITE


def kill_clients(conn: redis.Redis) -> int:
    """Close every normal and pub/sub client connection but this one; returns how many."""
    killed = 0
    for kind in ("normal", "pubsub"):
        killed += int(conn.client_kill_filter(_type=kind, skipme=True))
    return killed


@dataclass(frozen=True, slots=True)
class MemoryState:
    """What `squeeze_memory` changed, for `restore_memory`."""

    maxmemory: str
    policy: str


def squeeze_memory(conn: redis.Redis) -> MemoryState:
    """Set ``maxmemory`` to half of ``used_memory`` with ``noeviction``: writes get OOM."""
    config = conn.config_get("maxmemory*")
    state = MemoryState(str(config["maxmemory"]), str(config["maxmemory-policy"]))
    used = int(conn.info("memory")["used_memory"])
    conn.config_set("maxmemory-policy", "noeviction")
    conn.config_set("maxmemory", max(1, used // 2))
    return state


def restore_memory(conn: redis.Redis, state: MemoryState) -> None:
    conn.config_set("maxmemory", state.maxmemory)
    conn.config_set("maxmemory-policy", state.policy)


def slow_renewals(node: Scheduler, hold_ms: int | None = None) -> Callable[[], None]:
    """Hold each lease renewal of `node` `hold_ms` (default TTL + 500 ms); returns the undo."""
    keeper = node.leases
    renew = keeper.renew
    hold_s = (node.settings.lease_ttl_ms + 500 if hold_ms is None else hold_ms) / 1000

    async def slowed() -> None:
        await asyncio.sleep(hold_s)
        await renew()

    keeper.renew = slowed  # type: ignore[method-assign]

    def undo() -> None:
        if keeper.renew is slowed:
            del keeper.renew  # the class's method again

    return undo


class SkewedClock(RedisClock):
    """`RedisClock` plus `jump_ms` (0 until set; set it from any thread or a signal)."""

    def __init__(self, jump_ms: int = 0) -> None:
        super().__init__()
        self.jump_ms = jump_ms

    def now_ms_float(self) -> float:
        return super().now_ms_float() + self.jump_ms
