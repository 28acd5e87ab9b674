"""Calls for recurring schedules (`wheelq.core.recurring`; docs/architecture.md,
"Schedules"). ``wheelq:scheduled`` lists the shards that hold schedules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from wheelq.core.keys import SCHEDULED_KEY, ShardKeys, parse_scheduled, scheduled_member
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text


@dataclass(frozen=True, slots=True)
class ShardSchedules:
    """A home shard's schedules as read at one instant: name -> (definition, state)."""

    epoch: int
    records: dict[str, tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class StateChange:
    """What `schedule_state.lua` did: existed, the epoch to fence with, the old definition."""

    found: bool
    epoch: int
    definition: bytes | None


def index(keys: ShardKeys) -> Call[int]:
    """Name the shard a home of schedules (idempotent)."""
    return Call(command=("SADD", SCHEDULED_KEY, scheduled_member(keys)), parse=int)


def homes() -> Call[list[ShardKeys]]:
    """Parses to every shard named a home of schedules (entries that name none are skipped)."""

    def parse(reply: Any) -> list[ShardKeys]:
        return sorted(
            (k for m in reply or () if (k := parse_scheduled(m)) is not None),
            key=lambda k: (k.topic, k.shard),
        )

    return Call(command=("SMEMBERS", SCHEDULED_KEY), parse=parse)


def unindex(shards: Iterable[ShardKeys]) -> Call[int]:
    return Call(command=("SREM", SCHEDULED_KEY, *map(scheduled_member, shards)), parse=int)


def put(
    keys: ShardKeys,
    name: str,
    definition: bytes,
    create_only: bool,
    expected: bytes | None = None,
) -> Call[tuple[bool, str, bool]]:
    """Parses to (created, state, written). With `expected`, an update written only if the
    stored definition is `expected` (a compare-and-set: of racing callers, one writes)."""

    def parse(reply: Any) -> tuple[bool, str, bool]:
        r = check("schedule_put", reply)
        return bool(r[1]), text(r[2]), bool(r[3])

    mode = "2" if expected is not None else "1" if create_only else "0"
    args: list[str | bytes | int] = [name, definition, mode, expected or b""]
    return script_call("schedule_put", keys, args, parse)


def change_state(keys: ShardKeys, op: str, name: str) -> Call[StateChange]:
    """`op`: "pause", "resume" or "remove"."""

    def parse(reply: Any) -> StateChange:
        r = check("schedule_state", reply)
        return StateChange(bool(r[1]), int(r[2]), r[3] or None)

    return script_call("schedule_state", keys, [op, name], parse)


def read(keys: ShardKeys, name: str = "") -> Call[ShardSchedules]:
    """One schedule (`name`) or all of a home shard, with the epoch, at one instant."""

    def parse(reply: Any) -> ShardSchedules:
        r = check("schedule_read", reply)
        flat = r[2]
        records = {text(flat[i]): (flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)}
        return ShardSchedules(int(r[1]), records)

    return script_call("schedule_read", keys, [name], parse)


def claim(keys: ShardKeys, token: str, read_epoch: int) -> Call[int]:
    """Parses to the new epoch, 0 when it moved; `LeaseLostError` when not leading the shard."""
    return script_call(
        "schedule_claim", keys, [token, read_epoch], lambda r: int(check("schedule_claim", r)[1])
    )


def advance(keys: ShardKeys, token: str, epoch: int, planned: dict[str, int]) -> Call[int]:
    """Parses to how many cursors moved (0 with a stale epoch)."""
    args: list[str | bytes | int] = [token, epoch]
    for name, ms in planned.items():
        args += [name, ms]
    return script_call(
        "schedule_advance", keys, args, lambda r: int(check("schedule_advance", r)[1])
    )


def fence(keys: ShardKeys, epoch: int, reset: bool, names: Sequence[str]) -> Call[list[int]]:
    """Parses to, per name, the latest run written to the shard before the call."""
    return script_call(
        "schedule_fence",
        keys,
        [epoch, "reset" if reset else "keep", *names],
        lambda r: [int(x) for x in check("schedule_fence", r)[1:]],
    )


def materialize(
    keys: ShardKeys, epoch: int, name: str, runs: Sequence[tuple[int, bytes]]
) -> Call[int]:
    """Write runs (occurrence ms, envelope); how many; `LeaseLostError` when fenced out."""
    args: list[str | bytes | int] = [keys.topic, keys.wake_channel, epoch, name]
    for at, envelope in runs:
        args += [at, envelope]
    return script_call("materialize", keys, args, lambda r: int(check("materialize", r)[1]))
