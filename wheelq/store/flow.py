"""Calls of flow control (`wheelq.core.flow`): rate buckets and concurrency slots, each on a
Redis key of its own."""

from __future__ import annotations

from typing import Any

from wheelq.store.calls import Call
from wheelq.store.scripts import check


def take_rate(key: str, interval_us: int, burst: int, max_wait_us: int) -> Call[tuple[int, bool]]:
    """Parses to (µs to wait, reserved)."""

    def parse(reply: Any) -> tuple[int, bool]:
        r = check("flow_rate", reply)
        return int(r[1]), bool(r[2])

    return Call("flow_rate", (key,), (interval_us, burst, max_wait_us), parse=parse)


def enter(key: str, holder: str, slots: int, ttl_ms: int) -> Call[bool]:
    """Parses to True when `holder` has a slot."""
    return Call(
        "flow_enter",
        (key,),
        (holder, slots, ttl_ms),
        parse=lambda r: bool(check("flow_enter", r)[1]),
    )


def leave(key: str, holder: str) -> Call[int]:
    return Call(command=("ZREM", key, holder), parse=int)
