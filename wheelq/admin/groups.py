"""A topic's consumer groups (sans-I/O operations): create under a cap, list, delete."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from wheelq.core.keys import ShardKeys, validate_group
from wheelq.core.pause import pause_field
from wheelq.errors import (
    GroupBusyError,
    GroupLimitError,
    GroupNotFoundError,
    InvalidArgumentError,
    int_in,
)
from wheelq.producer.operations import Op, Producer, ShardTotal
from wheelq.store import groups as g
from wheelq.store import pauses, topics
from wheelq.store.scripts import GroupOutcome


@dataclass(frozen=True, slots=True)
class GroupShardStats:
    """One shard of a `GroupStats`."""

    shard: int
    consumers: int
    in_flight: int
    """Entries delivered to a consumer and not acked."""
    ready: int
    """Entries not yet delivered to this group (the stream's length when Redis cannot tell)."""


@dataclass(frozen=True, slots=True)
class GroupStats:
    """A consumer group of a topic, over the shards that have it: what `groups()` returns."""

    name: str = field(metadata={"wire": "group"})
    stream: str
    """The stream it reads: ``"ready"`` (the topic's jobs) or ``"callbacks"`` (jobs with a
    callback, read by the service's deliverer)."""
    consumers: int
    """Distinct consumer names over its shards."""
    idle_ms: int | None
    """Since its most recently active consumer last read (None: no consumers)."""
    shards: list[GroupShardStats]
    paused_since_ms: int | None = None
    """Since when the group has taken no new jobs, paused on its own or with its topic
    (Redis clock ms); None: it is not paused."""

    in_flight = ShardTotal()
    """Delivered to a consumer of the group, not acked."""
    ready = ShardTotal()
    """Fired, not yet delivered to the group."""


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    """What `delete_group()` deleted."""

    name: str
    stream: str
    shards: int
    in_flight: int
    """Entries in flight dropped with it (0 unless forced)."""


MAX_GROUPS = 64
STARTS = {"earliest": "0", "now": "$"}


@dataclass(frozen=True, slots=True)
class CreatedGroup:
    """What `create_group()` did."""

    name: str
    created: bool
    """False: the group existed on every shard already."""
    shards: int


def create_group(
    producer: Producer, topic: str, group: str, start: str, max_groups: int
) -> Op[CreatedGroup]:
    """Create `group` on every shard that lacks it; a group is on every shard or on none."""
    validate_group(group)
    if start not in STARTS:
        raise InvalidArgumentError("start", f"start must be 'earliest' or 'now', got {start!r:.60}")
    int_in("max_groups", max_groups, 1, 10_000)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise GroupNotFoundError(topic, group, "ready")
    views = [ShardKeys(topic, shard) for shard in range(shards)]
    made = yield [g.create_group(v, group, STARTS[start], max_groups) for v in views]
    created = [
        v for v, m in zip(views, made, strict=True) if m.outcome == GroupOutcome.GROUP_CREATED
    ]
    full = [m for m in made if m.outcome == GroupOutcome.GROUP_LIMIT]
    if full:
        if created:  # nothing was delivered from a group this new: "delete" drops it
            yield [g.delete_group(v, group, "delete") for v in created]
        raise GroupLimitError(topic, group, max_groups)
    return CreatedGroup(group, bool(created), len(created))


def has_group(topic: str, shard: int, group: str) -> Op[bool]:
    """Whether `group` reads a stream of the topic's `shard` (any stream counts; a group is
    on every shard or on none, so one shard answers for the topic)."""
    views = g.group_streams(topic, shard)
    exist = yield [topics.exists(view.stream) for view in views]
    views = [view for view, there in zip(views, exist, strict=True) if there]
    listed = (yield [g.stream_groups(view) for view in views]) if views else []
    return any(found.name == group for groups_of in listed for found in groups_of)


def groups(producer: Producer, topic: str) -> Op[list[GroupStats] | None]:
    """Every consumer group of the topic's streams, by stream then name."""
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        return None
    views = [view for shard in range(shards) for view in g.group_streams(topic, shard)]
    exist = yield [topics.exists(view.stream) for view in views]
    views = [view for view, there in zip(views, exist, strict=True) if there]
    if not views:
        return []
    replies = yield [call for v in views for call in (g.stream_groups(v), g.stream_length(v))]
    found = [
        (view, group, length)
        for view, groups_of, length in zip(views, replies[::2], replies[1::2], strict=True)
        for group in groups_of
    ]
    asked = [(view, group.name) for view, group, _ in found if group.consumers]
    *idle, paused = yield [
        *(g.consumers(view, name) for view, name in asked),
        pauses.read_pause_state(topic, {group.name for _, group, _ in found}),
    ]
    idle_of = dict(zip(asked, idle, strict=True))
    shards_of: dict[tuple[int, str], list[GroupShardStats]] = defaultdict(list)
    seen_of: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
    for view, group, length in found:
        key = (g.GROUP_LANES.index(view.lane), group.name)
        ready = length if group.lag is None else group.lag
        shards_of[key].append(GroupShardStats(view.shard, group.consumers, group.pending, ready))
        seen = seen_of[key]
        for consumer, ms in idle_of.get((view, group.name), {}).items():
            seen[consumer] = min(ms, seen.get(consumer, ms))
    return [
        GroupStats(
            name,
            g.GROUP_LANES[lane],
            len(seen_of[(lane, name)]),
            min(seen_of[(lane, name)].values(), default=None),
            shards_of[(lane, name)],
            paused.group_since_ms(name),
        )
        for lane, name in sorted(shards_of)
    ]


def delete_group(
    producer: Producer, topic: str, group: str, stream: str, force: bool
) -> Op[DeletedGroup]:
    """Delete `group` on every shard; without `force`, none when any has entries in flight."""
    validate_group(group)
    if stream not in g.GROUP_LANES:
        raise InvalidArgumentError(
            "stream", f"stream must be one of {', '.join(g.GROUP_LANES)}, got {stream!r:.60}"
        )
    if not isinstance(force, bool):
        raise InvalidArgumentError("force", f"force must be a bool, got {force!r:.60}")
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise GroupNotFoundError(topic, group, stream)
    views = [ShardKeys(topic, shard, stream) for shard in range(shards)]
    if not force:
        checked = yield [g.delete_group(view, group, "check") for view in views]
        views = [
            v for v, c in zip(views, checked, strict=True) if c.outcome != GroupOutcome.NO_GROUP
        ]
        in_flight = sum(c.in_flight for c in checked)
        if in_flight:
            raise GroupBusyError(topic, group, stream, in_flight)
    mode = "force" if force else "delete"
    done = (yield [g.delete_group(view, group, mode) for view in views]) if views else []
    deleted = [d for d in done if d.outcome == GroupOutcome.GROUP_DESTROYED]
    busy = [d for d in done if d.outcome == GroupOutcome.GROUP_BUSY]
    if busy:  # delivered between the check and the delete: kept where it was
        raise GroupBusyError(topic, group, stream, sum(d.in_flight for d in busy), len(deleted))
    listed = (yield from groups(producer, topic)) or []
    if not deleted:
        known = [s.name for s in listed if s.stream == stream]
        elsewhere = [s.stream for s in listed if s.name == group and s.stream != stream]
        raise GroupNotFoundError(topic, group, stream, known, elsewhere)
    if group not in {s.name for s in listed}:  # gone from every stream: so is its pause
        yield [pauses.clear_pauses([pause_field(topic, group)])]
    return DeletedGroup(group, stream, len(deleted), sum(d.in_flight for d in deleted))
