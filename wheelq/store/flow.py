"""Calls of flow control (`wheelq.core.flow`): rate buckets and concurrency slots."""

from __future__ import annotations

from typing import Any

from wheelq.store.call import Call
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


def order_register(keys: tuple[str, str], jobs: list[tuple[str, int]]) -> Call[Any]:
    """Register (job id, due ms) pairs in their key's order, before they are written."""
    args: list[str | int] = ["register", "", 0]
    for job_id, due in jobs:
        args += [job_id, due]
    return Call("flow_order", keys, args, parse=lambda r: check("flow_order", r))


def order_enter(
    keys: tuple[str, str], group: str, job_id: str, due_ms: int
) -> Call[tuple[str, int] | None]:
    """Parses to None when the job may start, else (job id, due ms) of the one first."""

    def parse(reply: Any) -> tuple[str, int] | None:
        r = check("flow_order", reply)
        return None if r[1] else (r[2].decode(), int(r[3]))

    return Call("flow_order", keys, ("enter", group, 0, job_id, due_ms), parse=parse)


def order_done(
    keys: tuple[str, str], group: str, job_id: str, due_ms: int, retention_ms: int
) -> Call[Any]:
    """The group finished (or skips) the job: the key's next job may start."""
    return Call(
        "flow_order",
        keys,
        ("done", group, retention_ms, job_id, due_ms),
        parse=lambda r: check("flow_order", r),
    )
