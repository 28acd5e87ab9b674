"""The console's topic views: the topic list's rows and a topic page's tiles, shards and
groups, each read in one round from every shard (`wheelq.store.observe`), with rates taken
against earlier views kept in `Frames` (docs/guides/dashboard.md)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from markupsafe import Markup
from redis.exceptions import ResponseError

from wheelq.core.flow import TopicLimits
from wheelq.core.forecast import WITHIN_S, Forecast, forecast_of
from wheelq.core.keys import ShardKeys, all_shards
from wheelq.core.line import LineView, line_of
from wheelq.core.observe import ShardObservation, by_shard, percentile, rate, topic_rows
from wheelq.core.pause import PauseState
from wheelq.runtime.unled_watch import remedy
from wheelq.store import events, leases, pauses, unled
from wheelq.store.executor import AsyncExecutor, drive_async
from wheelq.store.limits import read_limits, read_weights
from wheelq.store.line import read_lines
from wheelq.store.observe import observe_shards
from wheelq.web.charts import bars

MIN_SPAN_MS = 1000
"""Frames closer together than this share one (and a rate needs at least this span)."""
WINDOW_MS = 60_000
"""Rates span at most this far back."""
MAX_TOPICS = 256
"""Topics whose frames are kept (the least recently viewed go first)."""

Frame = tuple[int, dict[tuple[str, int], ShardObservation]]


class Frames:
    """Recent observations per topic, for the rates of the next page view."""

    def __init__(self) -> None:
        self._topics: OrderedDict[str, deque[Frame]] = OrderedDict()

    def before(self, topic: str, now_ms: int) -> Frame | None:
        """The oldest frame of `topic` within `WINDOW_MS` and at least `MIN_SPAN_MS` old."""
        frames = self._topics.get(topic)
        while frames and frames[0][0] < now_ms - WINDOW_MS:
            frames.popleft()
        if frames and frames[0][0] <= now_ms - MIN_SPAN_MS:
            return frames[0]
        return None

    def add(self, topic: str, at_ms: int, observations: Sequence[ShardObservation]) -> None:
        frames = self._topics.setdefault(topic, deque())
        self._topics.move_to_end(topic)
        if not frames or frames[-1][0] <= at_ms - MIN_SPAN_MS:
            # Rates need counters only: the lateness sample is left out.
            frames.append(
                (at_ms, by_shard(dataclasses.replace(o, lateness_ms=()) for o in observations))
            )
        while len(self._topics) > MAX_TOPICS:
            self._topics.popitem(last=False)


@dataclass(frozen=True, slots=True)
class ShardRow:
    """One shard (or, with `shard` None, the topic) as the topic page shows it."""

    shard: int | None
    leader: str | None
    pending: int
    ready: int
    in_stream: int
    in_flight: int
    oldest_in_flight_ms: int | None
    dead: int
    fired_per_s: float | None
    late_p50_ms: float
    late_p99_ms: float


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One consumer group over every shard."""

    name: str
    in_flight: int
    ready: int | None
    """Fired, not yet delivered to this group (None: a server cannot tell)."""
    handled: int
    oldest_in_flight_ms: int | None
    paused_since_ms: int | None = None
    """Since when it takes no new jobs (paused on its own or with its topic); None: it runs."""


SHOWN_WEIGHTS = 100
"""The most fair weights the topic page lists (the heaviest)."""


@dataclass(frozen=True, slots=True)
class TopicView:
    topic: str
    at_ms: int
    total: ShardRow
    shards: list[ShardRow]
    groups: list[GroupRow]
    due_soon: int
    window_s: float | None
    """The span the rates are taken over (None: no earlier view to compare with)."""
    paused: PauseState | None = None
    events_on: bool = False
    """Whether the topic keeps job events (`wheelq events`, the SSE endpoint)."""
    forecast: Forecast | None = None
    """Its jobs due in the next `WITHIN_S` windows, read with the rest."""
    far: int = 0
    """Of its pending jobs, those kept in the far tier (due beyond its far horizon)."""
    unled: tuple[int, ...] = ()
    """Its shards with jobs due within a minute and no scheduler node leading them."""
    limits: TopicLimits = dataclasses.field(default_factory=TopicLimits)
    """Its backpressure limits and due-line settings (`Admin.limits`)."""

    @property
    def heaviest_weights(self) -> list[tuple[str, int]]:
        """Its fair weights, heaviest first (ties by key), the first `SHOWN_WEIGHTS`."""
        ranked = sorted(self.limits.fair_weights.items(), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:SHOWN_WEIGHTS]

    @property
    def remedy(self) -> str:
        """What to run so that its shards have a leader."""
        return remedy(self.topic)

    expired: int = 0
    """Jobs dropped at their expiry (``expires=``), never run, since the topic was made."""
    line: LineView | None = None
    """Its due line: jobs due and waiting for room in the streams, by priority, and the keys
    furthest behind (`wheelq.core.line`)."""
    waiting: int = 0
    """Of its ready jobs, those due and waiting their turn on the due line (not fired yet)."""

    def forecast_bars(self) -> Markup:
        """The forecast as bars, a window each."""
        rows = [] if self.forecast is None else self.forecast.due_within.items()
        drawn = bars(
            "forecast",
            "Jobs due in the next " + " / ".join(f"{s} s" for s in WITHIN_S),
            [(f"next {within} s", n) for within, n in rows],
        )
        return Markup(drawn)  # noqa: S704 (bars escapes what it draws)


async def observe(
    executor: AsyncExecutor,
    shards: Sequence[ShardKeys],
    now_ms: int,
    sample: int,
    within_ms: Sequence[int] = (),
) -> list[ShardObservation]:
    return await drive_async(
        observe_shards(shards, now_ms, sample, within_ms=within_ms),
        lambda calls: executor.run(calls, return_exceptions=True),
    )


@dataclass(frozen=True, slots=True)
class TopicSummary:
    """One topic as the topic list shows it."""

    topic: str
    shards: int
    pending: int
    ready: int
    in_stream: int
    in_flight: int
    dead: int
    fired_per_s: float | None
    error: str | None = None
    """Why the topic could not be read (its numbers are then zeros and not shown)."""
    paused: str = ""
    """"all" (the topic), its groups paused on their own, or "" (none)."""

    @classmethod
    def unreadable(cls, topic: str, shards: int, exc: BaseException) -> TopicSummary:
        return cls(topic, shards, 0, 0, 0, 0, 0, None, f"{type(exc).__name__}: {exc}")

    @classmethod
    def of(
        cls, topic: str, observations: list[ShardObservation], earlier: Frame | None
    ) -> TopicSummary:
        (row,) = topic_rows(observations, None if earlier is None else earlier[1])
        in_stream = sum(o.length for o in observations)
        return cls(
            topic,
            row.shards,
            row.pending,
            row.ready,
            in_stream,
            row.in_flight,
            row.dead,
            row.fired_per_s,
        )


async def summaries(
    executor: AsyncExecutor, frames: Frames, topics: Mapping[str, int], now_ms: int
) -> list[TopicSummary]:
    """One `TopicSummary` per topic of `topics` (name -> shards), all read in one round;
    when that fails, each topic on its own, so that one topic Redis cannot read (a key of
    the wrong type) is one row saying why and the others show as usual."""
    shards = [keys for name, n in topics.items() for keys in all_shards(name, n)]
    try:
        found = await observe(executor, shards, now_ms, sample=1)
        by_topic: dict[str, list[ShardObservation] | BaseException] = {
            name: [o for o in found if o.topic == name] for name in topics
        }
    except ResponseError:
        each = await asyncio.gather(
            *(observe(executor, all_shards(name, n), now_ms, 1) for name, n in topics.items()),
            return_exceptions=True,
        )
        by_topic = dict(zip(topics, each, strict=True))
    readable = {n: o for n, o in by_topic.items() if not isinstance(o, BaseException)}
    states = await executor.run(
        [
            pauses.read_pause_state(n, {g.name for o in found for g in o.groups})
            for n, found in readable.items()
        ]
    )
    paused_of = dict(zip(readable, states, strict=True))
    out = []
    for name, mine in by_topic.items():
        if isinstance(mine, BaseException):
            if not isinstance(mine, ResponseError):
                raise mine
            out.append(TopicSummary.unreadable(name, topics[name], mine))
            continue
        earlier = frames.before(name, now_ms)
        frames.add(name, now_ms, mine)
        paused = paused_of[name]
        shown = "all" if paused.paused else ", ".join(paused.groups)
        out.append(replace(TopicSummary.of(name, mine, earlier), paused=shown))
    return out


async def topic_view(
    executor: AsyncExecutor, frames: Frames, topic: str, shards: int, now_ms: int
) -> TopicView:
    """Every shard of `topic` with its leader, and its consumer groups, read now."""
    keys = all_shards(topic, shards)
    found, leaders, leadership, lines = await asyncio.gather(
        observe(executor, keys, now_ms, 100, [w * 1000 for w in WITHIN_S]),
        executor.run([leases.lease_holder(k) for k in keys]),
        executor.run([c for k in keys for c in unled.shard_calls(k, now_ms)]),
        drive_async(read_lines(keys, now_ms), executor.run),
    )
    names = {g.name for o in found for g in o.groups}
    paused, events_on, settings, weights = await executor.run(
        [
            pauses.read_pause_state(topic, names),
            events.enabled(keys[0]),
            read_limits(keys[0]),
            read_weights(keys[0]),
        ]
    )
    earlier = frames.before(topic, now_ms)
    frames.add(topic, now_ms, found)
    before = {} if earlier is None else earlier[1]
    (row,) = topic_rows(found, before)
    total = ShardRow(
        None,
        None,
        row.pending,
        row.ready,
        sum(o.length for o in found),
        row.in_flight,
        row.oldest_in_flight_ms,
        row.dead,
        row.fired_per_s,
        row.lateness_p50_ms,
        row.lateness_p99_ms,
    )
    return TopicView(
        topic=topic,
        at_ms=now_ms,
        total=total,
        shards=[_shard_row(o, leader, before) for o, leader in zip(found, leaders, strict=True)],
        groups=_groups(found, paused),
        due_soon=sum(o.due_soon for o in found),
        window_s=None if earlier is None else (now_ms - earlier[0]) / 1000,
        paused=paused,
        events_on=events_on,
        forecast=forecast_of(topic, now_ms, found),
        far=sum(o.far for o in found),
        unled=tuple(
            k.shard for i, k in enumerate(keys) if unled.shard_unled(leadership[2 * i : 2 * i + 2])
        ),
        expired=sum(o.expired for o in found),
        limits=TopicLimits.from_fields(settings, weights),
        line=line_of(topic, now_ms, lines),
        waiting=sum(o.waiting for o in found),
    )


def _shard_row(
    o: ShardObservation, leader: str | None, before: Mapping[tuple[str, int], ShardObservation]
) -> ShardRow:
    e = before.get((o.topic, o.shard))
    lateness = sorted(o.lateness_ms)
    return ShardRow(
        o.shard,
        leader,
        o.pending,
        o.ready,
        o.length,
        o.in_flight,
        o.oldest_age_ms(),
        o.dead,
        None if e is None else rate(e.entries_added, o.entries_added, o.at_ms - e.at_ms),
        percentile(lateness, 50),
        percentile(lateness, 99),
    )


def _groups(found: Sequence[ShardObservation], paused: PauseState) -> list[GroupRow]:
    rows = []
    for name in sorted({g.name for o in found for g in o.groups}):
        pairs = [(o, g) for o in found for g in o.groups if g.name == name]
        lags = [g.lag for _, g in pairs if g.lag is not None]
        oldest = [
            o.at_ms - g.oldest_pending_ms for o, g in pairs if g.oldest_pending_ms is not None
        ]
        rows.append(
            GroupRow(
                name,
                sum(g.pending for _, g in pairs),
                sum(lags) if len(lags) == len(pairs) else None,  # None: a server cannot tell
                sum(g.handled or 0 for _, g in pairs),
                max(0, *oldest) if oldest else None,
                paused.group_since_ms(name),
            )
        )
    return rows
