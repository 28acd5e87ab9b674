"""Consumer groups as an operator sees them (XINFO GROUPS, XINFO CONSUMERS), and creating
(under a cap) and deleting one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from wheelq.core.keys import CALLBACKS, READY, ShardKeys
from wheelq.errors import ScriptError
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import GroupOutcome, check, text
from wheelq.store.topics import exists

GROUP_LANES = (READY, CALLBACKS)
"""The streams of a shard that consumer groups read: the one place that says which."""

T = TypeVar("T")

MODES = ("check", "delete", "force")

_text = functools.partial(text, errors="replace")


def group_streams(topic: str, shard: int) -> list[ShardKeys]:
    """Views of one shard, one per stream its groups may read, in `GROUP_LANES` order."""
    return [ShardKeys(topic, shard, lane) for lane in GROUP_LANES]


def has_group(topic: str, shard: int, group: str) -> Generator[list[Call[Any]], list[Any], bool]:
    """Whether `group` reads a stream of the topic's `shard` (any stream counts; a group is
    on every shard or on none, so one shard answers for the topic): rounds of calls to send."""
    views = group_streams(topic, shard)
    there = yield [exists(view.stream) for view in views]
    views = [view for view, found in zip(views, there, strict=True) if found]
    listed = (yield [stream_groups(view) for view in views]) if views else []
    return any(found.name == group for groups_of in listed for found in groups_of)


def _named(info: Any) -> dict[str, Any]:
    """An XINFO record with str field names (redis-py gives bytes or str, by protocol)."""
    return {_text(name): value for name, value in dict(info).items()}


@dataclass(frozen=True, slots=True)
class StreamGroup:
    """One group of one shard's stream, as XINFO GROUPS has it."""

    name: str
    consumers: int
    pending: int
    """Entries delivered to a consumer and not acked (in flight)."""
    lag: int | None
    """Entries not yet delivered to it; None when the server cannot tell (after deletions)."""
    last_delivered: str = "0-0"
    """The last entry delivered to it: every later entry is ready for it."""


def stream_groups(keys: ShardKeys) -> Call[list[StreamGroup]]:
    """XINFO GROUPS of `keys.stream` (an error reply when the stream does not exist)."""

    def parse(reply: Any) -> list[StreamGroup]:
        out = []
        for info in reply or ():
            g = _named(info)
            lag = g.get("lag")
            out.append(
                StreamGroup(
                    _text(g["name"]),
                    int(g["consumers"]),
                    int(g["pending"]),
                    None if lag is None else int(lag),
                    _text(g.get("last-delivered-id") or "0-0"),
                )
            )
        return out

    return Call(command=("XINFO", "GROUPS", keys.stream), parse=parse)


def stream_length(keys: ShardKeys) -> Call[int]:
    return Call(command=("XLEN", keys.stream), parse=int)


def consumers(keys: ShardKeys, group: str) -> Call[dict[str, int]]:
    """XINFO CONSUMERS of a group: consumer name -> ms since it last read (``idle``)."""

    def parse(reply: Any) -> dict[str, int]:
        return {_text(c["name"]): int(c["idle"]) for c in map(_named, reply or ())}

    return Call(command=("XINFO", "CONSUMERS", keys.stream, group), parse=parse)


@dataclass(frozen=True, slots=True)
class GroupDrop:
    """What `delete_group.lua` found or did on one shard's stream."""

    outcome: GroupOutcome
    in_flight: int
    """The group's entries in flight when the script ran."""


def delete_group(keys: ShardKeys, group: str, mode: str) -> Call[GroupDrop]:
    """Delete `group`; `mode`: ``check``, ``delete`` (nothing in flight) or ``force``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")

    return script_call(
        "delete_group", keys, [group, mode], lambda r: _outcome("delete_group", r, GroupDrop)
    )


START_IDS = ("0", "$")


@dataclass(frozen=True, slots=True)
class GroupMade:
    """What `create_group.lua` found or did on one shard's stream."""

    outcome: GroupOutcome
    """GROUP_FOUND, GROUP_CREATED or GROUP_LIMIT."""
    groups: int
    """The stream's groups after the call (the cap's count with GROUP_LIMIT; 0 when found)."""


def create_group(keys: ShardKeys, group: str, start_id: str, max_groups: int) -> Call[GroupMade]:
    """Create `group` at `start_id` unless it exists or the stream has `max_groups` groups."""
    if start_id not in START_IDS:
        raise ValueError(f"start_id must be one of {', '.join(START_IDS)}, got {start_id!r}")

    args: list[str | int] = [group, start_id, max_groups]
    return script_call("create_group", keys, args, lambda r: _outcome("create_group", r, GroupMade))


def _outcome(name: str, reply: Any, made: Callable[[GroupOutcome, int], T]) -> T:
    r = check(name, reply)
    try:
        return made(GroupOutcome(r[1]), int(r[2]))
    except (ValueError, IndexError) as exc:
        raise ScriptError(f"{name}.lua returned an unknown outcome ({r!r:.200})") from exc
