"""What the dashboard's pages show, read with the same bounded observation as ``wheelq
top`` (`wheelq.store.observe`) and meaning what it means (`wheelq.core.observe`).

"ready" means what it means everywhere (fired, not yet delivered to the group furthest
behind), and "in stream" the stream's length (fired and not yet trimmed, handled entries
included), as in ``GET /v1/topics/{topic}`` and `TopicStats`.

A rate needs two observations, and a page is one request: `Frames` keeps what recent
page views read (at most one frame a second per topic, for a minute), and a page's rates
are taken over the span back to the oldest of them; the first view has none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from wheelq.core.due import utc_text
from wheelq.core.jsonable import jsonable
from wheelq.core.keys import ShardKeys, all_shards
from wheelq.core.observe import ShardObservation, by_shard, percentile, rate, topic_rows
from wheelq.core.retry import error_line
from wheelq.producer.operations import drive_async
from wheelq.store import nodes
from wheelq.store.executor import AsyncExecutor
from wheelq.store.observe import observe_shards

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


async def observe(
    executor: AsyncExecutor, shards: Sequence[ShardKeys], now_ms: int, sample: int
) -> list[ShardObservation]:
    return await drive_async(
        observe_shards(shards, now_ms, sample),
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
    out = []
    for name, mine in by_topic.items():
        if isinstance(mine, BaseException):
            if not isinstance(mine, ResponseError):
                raise mine
            out.append(TopicSummary.unreadable(name, topics[name], mine))
            continue
        earlier = frames.before(name, now_ms)
        frames.add(name, now_ms, mine)
        out.append(TopicSummary.of(name, mine, earlier))
    return out


async def topic_view(
    executor: AsyncExecutor, frames: Frames, topic: str, shards: int, now_ms: int
) -> TopicView:
    """Every shard of `topic` with its leader, and its consumer groups, read now."""
    keys = all_shards(topic, shards)
    found, leaders = await asyncio.gather(
        observe(executor, keys, now_ms, sample=100),
        executor.run([nodes.lease_holder(k) for k in keys]),
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
        groups=_groups(found),
        due_soon=sum(o.due_soon for o in found),
        window_s=None if earlier is None else (now_ms - earlier[0]) / 1000,
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


def _groups(found: Sequence[ShardObservation]) -> list[GroupRow]:
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
            )
        )
    return rows


# --- how values read -----------------------------------------------------------------------

EXCERPT_CHARS = 120
"""A dead letter's payload shows this much of its JSON in the list."""
NOTHING = "\N{EN DASH}"
"""What a value that is not there (or not known yet) reads as."""


def number(value: int | None) -> str:
    return NOTHING if value is None else f"{value:,}"


def per_second(value: float | None) -> str:
    if value is None:
        return NOTHING
    return f"{value:,.1f}" if value < 10 else f"{value:,.0f}"


def millis(value: float | None) -> str:
    if value is None or math.isnan(value):
        return NOTHING
    return f"{value:,.0f} ms"


def age(ms: int | None) -> str:
    if ms is None:
        return NOTHING
    if ms < 1000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{ms / 1000:,.0f} s"


def utc(ms: int | None) -> str:
    """Redis-clock ms as UTC ISO 8601 to the millisecond (any int: `utc_text`)."""
    return utc_text(ms, NOTHING)


def first_line(text: str | None) -> str:
    """A recorded error's one-line summary (`wheelq.core.retry.error_line`)."""
    return error_line(text)


def as_json(payload: Any, limit: int, *, indent: bool = False) -> str:
    """A payload as JSON text, cut to `limit` characters (an excerpt, or a huge payload)."""
    text = json.dumps(jsonable(payload), ensure_ascii=False, indent=2 if indent else None)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_DONE = re.compile(r"(replayed|purged) (\d{1,9})")


def flash(done: str | None) -> str | None:
    """The message for a form's ``done`` (from a fixed set: the query is never echoed)."""
    found = _DONE.fullmatch(done or "")
    if found is None:
        return None
    n = int(found[2])
    return f"{found[1].capitalize()} {n:,} dead letter{'' if n == 1 else 's'}."
