"""What a shard holds at one moment, and the rates between two moments: one definition for
`wheelq stats`, `wheelq top` and the metrics gauges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from wheelq.core.keys import CALLBACKS, READY


@dataclass(frozen=True, slots=True)
class GroupView:
    """One consumer group of a ready stream (XINFO GROUPS, XPENDING; None: not told)."""

    name: str
    pending: int
    """Entries delivered and not settled (in flight)."""
    lag: int | None
    entries_read: int | None
    oldest_pending_ms: int | None = None
    """Entry-id ms (Redis clock) of its oldest pending entry."""
    lane: str = READY
    """The stream it reads: ``ready`` (consumer groups) or ``callbacks`` (the deliverer)."""

    @property
    def handled(self) -> int | None:
        """Entries delivered and settled (acked, retried or dead-lettered)."""
        return None if self.entries_read is None else self.entries_read - self.pending


@dataclass(frozen=True, slots=True)
class ShardObservation:
    """One shard at one moment (Redis clock ms `at_ms`)."""

    topic: str
    shard: int
    at_ms: int
    pending: int
    """Jobs waiting for their due time, in the sorted set and the far tier."""
    due_soon: int
    """Jobs due within the second after `at_ms`."""
    length: int
    """Entries in the ready and callbacks streams (fired and not yet trimmed)."""
    entries_added: int
    """Entries ever added to the ready and callbacks streams: jobs fired."""
    dead: int
    groups: tuple[GroupView, ...] = ()
    lateness_ms: tuple[int, ...] = ()
    """entry ms - due of the newest ready entries (Redis clock)."""
    callbacks_length: int = 0
    """Of `length`, the entries of the callbacks stream (jobs that carry a callback)."""
    due_within: tuple[tuple[int, int], ...] = ()
    """(window ms, pending jobs due at or before `at_ms` + window) per window asked for:
    overdue jobs and pending retries included (`wheelq.core.forecast`)."""
    far: int = 0
    """Of `pending`, the jobs kept in the far tier (docs/architecture.md, "The far tier")."""
    expired: int = 0
    """Jobs dropped at their expiry, never run (``expires=``), since the shard was made."""
    waiting: int = 0
    """Jobs due and waiting on the shard's due line for their turn to enter a stream
    (docs/architecture.md, "The due line"); counted in `ready`."""

    @property
    def ready(self) -> int:
        """Fired and not yet read by the group furthest behind: the consumer groups of the
        ready stream, or the deliverer of the callbacks stream (a stream no group reads
        yet: all of it); plus the jobs `waiting` on the due line, due and not fired yet."""
        return self.waiting + max(
            self._behind(READY, self.length - self.callbacks_length),
            self._behind(CALLBACKS, self.callbacks_length),
        )

    def _behind(self, lane: str, length: int) -> int:
        lags = [self.lag_of(g) for g in self.groups if g.lane == lane]
        return max(lags) if lags else length

    def lag_of(self, group: GroupView) -> int:
        """The group's lag; not told (an entry deleted mid-stream): its stream's length."""
        if group.lag is not None:
            return group.lag
        return (
            self.callbacks_length
            if group.lane == CALLBACKS
            else self.length - self.callbacks_length
        )

    @property
    def in_flight(self) -> int:
        return sum(g.pending for g in self.groups)

    @property
    def oldest_in_flight_ms(self) -> int | None:
        found = [g.oldest_pending_ms for g in self.groups if g.oldest_pending_ms is not None]
        return min(found) if found else None

    def oldest_age_ms(self) -> int | None:
        """How long ago the oldest in-flight entry entered the stream (None: none in flight)."""
        oldest = self.oldest_in_flight_ms
        return None if oldest is None else max(0, self.at_ms - oldest)


@dataclass(frozen=True, slots=True)
class TopicRow:
    """One topic: its shards summed, and rates since the previous observation (None: none)."""

    topic: str
    shards: int
    due_per_s: float
    fired_per_s: float | None
    handled_per_s_by_group: tuple[tuple[str, float | None], ...] | None
    """(group, entries settled per second) by name; never summed (every group sees every job)."""
    pending: int
    ready: int
    in_flight: int
    oldest_in_flight_ms: int | None
    dead: int
    lateness_p50_ms: float
    lateness_p99_ms: float
    expired: int = 0
    """Jobs dropped at their expiry, never run, since the topic was made."""


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of already sorted values; nan when empty."""
    if not sorted_values:
        return math.nan
    # Exact arithmetic: in floats 99.9 / 100 * 1000 is 999.0000000000001, one rank too high.
    rank = max(1, math.ceil(Fraction(str(q)) * len(sorted_values) / 100))
    return float(sorted_values[rank - 1])


def rate(before: int, after: int, elapsed_ms: int) -> float | None:
    """Per second between two counter readings (a reset counts from 0); None if no time passed."""
    if elapsed_ms <= 0:
        return None
    return (after - before if after >= before else after) * 1000 / elapsed_ms


def topic_rows(
    now: Iterable[ShardObservation],
    before: Mapping[tuple[str, int], ShardObservation] | None = None,
) -> list[TopicRow]:
    """One row per topic of `now`, by name, with rates against `before` (from `by_shard`)."""
    by_topic: dict[str, list[ShardObservation]] = {}
    for obs in now:
        by_topic.setdefault(obs.topic, []).append(obs)
    return [_row(topic, shards, before or {}) for topic, shards in sorted(by_topic.items())]


def by_shard(observations: Iterable[ShardObservation]) -> dict[tuple[str, int], ShardObservation]:
    """`observations` keyed by (topic, shard): the `before` of the next `topic_rows`."""
    return {(o.topic, o.shard): o for o in observations}


def _row(
    topic: str, shards: list[ShardObservation], before: Mapping[tuple[str, int], ShardObservation]
) -> TopicRow:
    fired: float | None = None
    handled: tuple[tuple[str, float | None], ...] | None = None
    earlier = [before.get((o.topic, o.shard)) for o in shards]
    if all(e is not None for e in earlier):
        pairs = [(e, o) for e, o in zip(earlier, shards, strict=True) if e is not None]
        fired = _sum_rates(
            rate(e.entries_added, o.entries_added, o.at_ms - e.at_ms) for e, o in pairs
        )
        handled = _group_rates(pairs)
    ages = [a for o in shards if (a := o.oldest_age_ms()) is not None]
    lateness = sorted(v for o in shards for v in o.lateness_ms)
    return TopicRow(
        topic=topic,
        shards=len(shards),
        due_per_s=sum(o.due_soon for o in shards) * 1.0,
        fired_per_s=fired,
        handled_per_s_by_group=handled,
        pending=sum(o.pending for o in shards),
        ready=sum(o.ready for o in shards),
        in_flight=sum(o.in_flight for o in shards),
        oldest_in_flight_ms=max(ages) if ages else None,
        dead=sum(o.dead for o in shards),
        lateness_p50_ms=percentile(lateness, 50),
        lateness_p99_ms=percentile(lateness, 99),
        expired=sum(o.expired for o in shards),
    )


def _group_rates(
    pairs: Sequence[tuple[ShardObservation, ShardObservation]],
) -> tuple[tuple[str, float | None], ...]:
    """Each group's handled/s over the shards of `pairs` (earlier, now), by name."""
    out = []
    for name in sorted({g.name for _, o in pairs for g in o.groups}):
        rates = []
        for e, o in pairs:
            then, now = _handled(e, name), _handled(o, name)
            if then is not None and now is not None:
                rates.append(rate(then, now, o.at_ms - e.at_ms))
        out.append((name, _sum_rates(rates) if rates else None))
    return tuple(out)


def _handled(o: ShardObservation, group: str) -> int | None:
    return next((g.handled for g in o.groups if g.name == group), None)


def _sum_rates(rates: Iterable[float | None]) -> float | None:
    total = 0.0
    for r in rates:
        if r is None:
            return None
        total += r
    return total
