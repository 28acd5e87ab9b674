"""A topic's settings hash ``{T:s}:limits``: its backpressure limits (`wheelq.core.flow`,
``max_pending`` / ``max_ready``), its due line's (``credit``, ``fair``, and the fair weights
in ``{T:s}:weights``) and its job events setting (`wheelq.core.events`).
"""

from __future__ import annotations

from typing import Any

from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check


def write_limits(keys: ShardKeys, fields: dict[str, int | None]) -> list[Call[Any]]:
    """Set the shard's limit fields (None: remove the field); `wheelq.core.flow`."""
    gone = [name for name, value in fields.items() if value is None]
    kept: list[str | int] = []
    for name, value in fields.items():
        if value is not None:
            kept += [name, value]
    calls: list[Call[Any]] = []
    if gone:
        calls.append(Call(command=("HDEL", keys.limits, *gone)))
    if kept:
        calls.append(Call(command=("HSET", keys.limits, *kept)))
    return calls


def read_limits(keys: ShardKeys) -> Call[dict[bytes, bytes]]:
    return Call(command=("HGETALL", keys.limits), parse=dict)


def write_weights(keys: ShardKeys, weights: dict[str, int]) -> Call[int]:
    """Replace the shard's fair weights with `weights` (empty: clear them), in one step;
    parses to how many it holds."""
    args: list[str | int] = [part for pair in weights.items() for part in pair]
    return script_call("weights_put", keys, args, lambda r: int(check("weights_put", r)[1]))


def read_weights(keys: ShardKeys) -> Call[dict[bytes, bytes]]:
    return Call(command=("HGETALL", keys.weights), parse=dict)
