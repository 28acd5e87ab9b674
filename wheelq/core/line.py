"""The due line as seen: the jobs waiting on it, the backlog by priority and the keys furthest
behind (docs/architecture.md, "The due line", "Seeing the line").

One definition for `Admin.line`, ``GET /v1/topics/{t}/line``, the console's topic page,
``wheelq top`` and the ``wheelq_line_*`` metrics; `wheelq.store.line` reads each shard into a
`ShardLine` with bounded calls, `line_of` makes a topic's `LineView` of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PRIORITIES = tuple(range(9, -1, -1))
"""Every priority, highest (first on the line) first."""
MAX_LANES = 1000
"""Lanes read per shard: those whose turns come first (a topic with more keys on the line is
seen through these)."""
LANE_SAMPLE = 500
"""Most jobs read from the head of one lane for the backlog by priority."""
SHARD_SAMPLE = 2000
"""Most jobs read per shard for it, shared among the lanes read (at least one each)."""
TOP_KEYS = 10
"""Keys a view lists by how far behind they are, and the metrics label by their backlog."""
OTHER = "(other)"
"""The metrics' ``key`` label of the keys past the top ones, summed."""
SHARED = "(shared)"
"""The metrics' ``key`` label of the shared lane: every job while fair shares are off, the
jobs without a key while they are on."""


@dataclass(frozen=True, slots=True)
class LaneLine:
    """One lane of the due line: a key's jobs (fair shares on), or the shared lane."""

    key: str | None
    """The key whose jobs wait in it; null: the shared lane (every job while fair shares are
    off, the jobs without a key while they are on)."""
    waiting: int
    """Jobs waiting in it (ZCARD), summed over the shards it is read in."""
    oldest_due_ms: int | None
    """The earliest due time (Redis clock ms) of its jobs read from its head; null: none read
    (taken off the line meanwhile)."""

    @property
    def label(self) -> str:
        """Its ``key`` label in the metrics (`SHARED` for the shared lane)."""
        return SHARED if self.key is None else self.key


@dataclass(frozen=True, slots=True)
class ShardLine:
    """One shard's due line at one moment, read with bounded calls (`wheelq.store.line`)."""

    topic: str
    shard: int
    at_ms: int
    waiting: int
    """Jobs on its line (HLEN of ``{T:s}:held``): due, not yet in its stream."""
    lanes: int
    """Lanes with jobs (ZCARD of ``{T:s}:turns``)."""
    read: tuple[LaneLine, ...] = ()
    """The lanes read: at most `MAX_LANES`, those whose turns come first."""
    by_priority: tuple[tuple[int, int], ...] = ()
    """(priority, jobs) of the jobs sampled from the lanes' heads, highest priority first."""
    sampled: int = 0
    """Jobs whose priority was read (at most `SHARD_SAMPLE`)."""


@dataclass(frozen=True, slots=True)
class LineView:
    """What `Admin.line()` returns: a topic's due line, summed over its shards."""

    topic: str
    at_ms: int
    """When it was read (Redis clock ms)."""
    waiting: int
    """Jobs waiting on the due line: due, not yet in a stream, every shard (exact)."""
    lanes: int
    """Lanes with jobs, every shard: a key's lane per key with jobs waiting while fair shares
    are on, and the shared lane."""
    by_priority: dict[int, int]
    """Priority -> jobs of those sampled from the head of each lane (the next to go; at most
    500 a lane and 2,000 a shard), highest priority first: exact while `sampled` equals
    `waiting`."""
    sampled: int
    """Jobs the backlog by priority was read from."""
    behind: tuple[LaneLine, ...]
    """The lanes furthest behind, oldest waiting job first (at most 10, of the first 1,000
    lanes of each shard by turn)."""

    def behind_ms(self, lane: LaneLine) -> int | None:
        """How long `lane`'s oldest job read has been due at `at_ms` (null: none read)."""
        return None if lane.oldest_due_ms is None else max(0, self.at_ms - lane.oldest_due_ms)


def merged_lanes(shards: Iterable[ShardLine]) -> list[LaneLine]:
    """The lanes read in `shards`, one per key (a key's lanes in several shards summed, its
    oldest job the oldest of theirs), in no particular order."""
    waiting: dict[str | None, int] = {}
    oldest: dict[str | None, int | None] = {}
    for s in shards:
        for lane in s.read:
            waiting[lane.key] = waiting.get(lane.key, 0) + lane.waiting
            dues = [d for d in (oldest.get(lane.key), lane.oldest_due_ms) if d is not None]
            oldest[lane.key] = min(dues) if dues else None
    return [LaneLine(key, n, oldest[key]) for key, n in waiting.items()]


def furthest_behind(lanes: Iterable[LaneLine], n: int = TOP_KEYS) -> tuple[LaneLine, ...]:
    """The `n` lanes whose oldest job came due first (ties: the longer lane first)."""
    known = [lane for lane in lanes if lane.oldest_due_ms is not None]
    known.sort(key=lambda lane: (lane.oldest_due_ms, -lane.waiting, lane.label))
    return tuple(known[:n])


def line_of(topic: str, at_ms: int, shards: Sequence[ShardLine]) -> LineView:
    """The `LineView` of `topic` from its shards' lines, read at `at_ms`."""
    counts: dict[int, int] = {}
    for s in shards:
        for priority, n in s.by_priority:
            counts[priority] = counts.get(priority, 0) + n
    return LineView(
        topic=topic,
        at_ms=at_ms,
        waiting=sum(s.waiting for s in shards),
        lanes=sum(s.lanes for s in shards),
        by_priority={p: counts[p] for p in PRIORITIES if p in counts},
        sampled=sum(s.sampled for s in shards),
        behind=furthest_behind(merged_lanes(shards)),
    )


def busiest(
    lanes: Iterable[LaneLine], at_ms: int, waiting: int, n: int = TOP_KEYS
) -> list[tuple[str, int, float]]:
    """(``key`` label, jobs waiting, seconds its oldest job read has been due) of the `n`
    lanes with the most jobs waiting, then `OTHER`: the rest of `waiting` (the line's jobs,
    lanes not read included) and the most behind of the other lanes read (no `OTHER` row when
    nothing is left): the metrics' bounded label set."""
    ranked = sorted(lanes, key=lambda lane: (-lane.waiting, lane.label))

    def behind_s(group: Sequence[LaneLine]) -> float:
        dues = [lane.oldest_due_ms for lane in group if lane.oldest_due_ms is not None]
        return max(0, at_ms - min(dues)) / 1000 if dues else 0.0

    top, rest = ranked[:n], ranked[n:]
    rows = [(lane.label, lane.waiting, behind_s([lane])) for lane in top]
    others = max(0, waiting - sum(lane.waiting for lane in top))
    if rest or others:
        rows.append((OTHER, others, behind_s(rest)))
    return rows
