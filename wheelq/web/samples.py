"""The service's own samples of its topics, for the dashboard's charts when no Prometheus
is configured: what `wheelq top` reads of each topic (`observe`), taken every so often
while the service runs, kept for a day.

Each topic is sampled at most once every `FINE_MIN_S`, and no more often than keeps its
cost under `COMMANDS_PER_S` Redis commands a second (an observation costs some six
commands a shard, one more per group with entries in flight): every 15 s at up to 8
shards, every 30 s at 16. The last hour is kept at that resolution; the day before it, one
sample every `COARSE_MS`. Rates (fired, handled, dead-lettered per second) are taken
between consecutive samples; a counter that went back (a stream trimmed away, dead letters
purged) gives no rate for that step. Topics are sampled in turns, so the charts of every
topic count each with its latest sample until its next one, and show a rate once every
topic has one (a topic's first sample has none).
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from wheelq.core.clock import Clock
from wheelq.core.keys import all_shards
from wheelq.core.observe import ShardObservation, percentile
from wheelq.runtime.service import Service
from wheelq.store.executor import AsyncExecutor, drive_async
from wheelq.store.observe import observe_shards
from wheelq.web.charts import Chart, Series

log = logging.getLogger(__name__)

FINE_MIN_S = 15.0
COMMANDS_PER_S = 4.0
"""Each topic's sampling stays under this many Redis commands a second."""
FINE_KEEP_MS = 3_600_000
COARSE_MS = 300_000
COARSE_KEEP_MS = 86_400_000
TOPICS_PER_STEP = 4
"""Topics sampled in one round (the others wait their turn a second later): one round's
calls stay a few hundred, never a pipeline over every topic."""
FIRST_WAIT_S = 5.0
MAX_TOPICS = 256
"""Topics sampled at most (by name); more are left out of the charts."""
LATENESS_SAMPLE = 100
"""Newest fired entries a shard's lateness is read from."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One topic at one moment: its backlog, its counters, its lateness."""

    at_ms: int
    pending: int
    ready: int
    in_flight: int
    dead: int
    fired: int
    """Entries ever added to the topic's streams (a counter)."""
    handled: int | None
    """Entries every group has settled, summed (a counter; None: the server cannot say)."""
    late_p50_ms: float | None
    late_p99_ms: float | None


def sample_of(at_ms: int, observations: Sequence[ShardObservation]) -> Sample:
    """A topic's shards, read at `at_ms`, as one sample."""
    lateness = sorted(ms for o in observations for ms in o.lateness_ms)
    handled = [g.handled for o in observations for g in o.groups]
    return Sample(
        at_ms,
        pending=sum(o.pending for o in observations),
        ready=sum(o.ready for o in observations),
        in_flight=sum(o.in_flight for o in observations),
        dead=sum(o.dead for o in observations),
        fired=sum(o.entries_added for o in observations),
        handled=None if None in handled else sum(h for h in handled if h is not None),
        late_p50_ms=percentile(lateness, 50) if lateness else None,
        late_p99_ms=percentile(lateness, 99) if lateness else None,
    )


class TopicHistory:
    """A topic's samples: the last hour as taken, the day before one every `COARSE_MS`."""

    def __init__(self) -> None:
        self.fine: deque[Sample] = deque()
        self.coarse: deque[Sample] = deque()

    def add(self, sample: Sample) -> None:
        self.fine.append(sample)
        if not self.coarse or sample.at_ms - self.coarse[-1].at_ms >= COARSE_MS:
            self.coarse.append(sample)
        while self.fine and self.fine[0].at_ms < sample.at_ms - FINE_KEEP_MS:
            self.fine.popleft()
        while self.coarse and self.coarse[0].at_ms < sample.at_ms - COARSE_KEEP_MS:
            self.coarse.popleft()

    def between(self, start_ms: int, end_ms: int) -> list[Sample]:
        """The samples from `start_ms` to `end_ms`, oldest first: coarse ones before the
        first fine one, then the fine ones (and one before `start_ms`, for the first rate)."""
        first_fine = self.fine[0].at_ms if self.fine else end_ms + 1
        picked = [s for s in self.coarse if s.at_ms < first_fine] + list(self.fine)
        before = [s for s in picked if s.at_ms < start_ms][-1:]
        return before + [s for s in picked if start_ms <= s.at_ms <= end_ms]


def interval_s(shards: int, groups: int) -> float:
    """How often a topic of `shards` shards and `groups` groups is sampled."""
    commands = shards * (6 + groups)
    return max(FINE_MIN_S, commands / COMMANDS_PER_S)


class Sampler(Service):
    """Samples every topic (up to `MAX_TOPICS`, by name) on its own interval while the
    service runs; `charts` draws a topic's (or, with None, every topic's) from them."""

    name = "sampler"
    title = "chart sampler"

    def __init__(self, executor: AsyncExecutor, topics: TopicList, clock: Clock) -> None:
        super().__init__(clock, log)
        self._executor = executor
        self._topics = topics
        self.histories: OrderedDict[str, TopicHistory] = OrderedDict()
        self._next_ms: dict[str, int] = {}
        self.since_ms: int | None = None
        """When the first sample was taken (the charts say so)."""

    async def step(self) -> float:
        """Sample the topics whose turn it is; returns seconds until the next turn."""
        now_ms = self.clock.now_ms()
        topics = dict(sorted((await self._topics()).items())[:MAX_TOPICS])
        for gone in [t for t in self.histories if t not in topics]:
            del self.histories[gone]
            self._next_ms.pop(gone, None)
        due = sorted((self._next_ms.get(t, 0), t) for t in topics)
        due = [(at, t) for at, t in due if at <= now_ms][:TOPICS_PER_STEP]
        if due:
            await self.take({t: topics[t] for _, t in due}, now_ms)
        nexts = [self._next_ms.get(t, now_ms) for t in topics]
        return max(1.0, (min(nexts, default=now_ms + 15_000) - self.clock.now_ms()) / 1000)

    async def first_wait(self) -> float:
        """The first samples wait a moment: a service starting has other work first."""
        return FIRST_WAIT_S

    async def take(self, topics: dict[str, int], now_ms: int) -> None:
        """Sample `topics` (name -> shards) now, in one round of calls."""
        shards = [keys for topic, n in topics.items() for keys in all_shards(topic, n)]
        found: list[ShardObservation] = await drive_async(
            observe_shards(shards, now_ms, LATENESS_SAMPLE),
            lambda calls: self._executor.run(calls, return_exceptions=True),
        )
        by_topic: dict[str, list[ShardObservation]] = {}
        for o in found:
            by_topic.setdefault(o.topic, []).append(o)
        for topic, observations in by_topic.items():
            self.histories.setdefault(topic, TopicHistory()).add(sample_of(now_ms, observations))
            groups = max((len(o.groups) for o in observations), default=0)
            wait_s = interval_s(topics[topic], groups)
            self._next_ms[topic] = now_ms + int(wait_s * 1000)
        if self.since_ms is None:
            self.since_ms = now_ms

    async def charts(self, topic: str | None, start_ms: int, end_ms: int) -> list[Chart]:
        """The charts of `topic` (None: every topic's summed) from `start_ms` to `end_ms`."""
        if topic is None:
            histories = list(self.histories.values())
        else:
            histories = [self.histories[topic]] if topic in self.histories else []
        return sample_charts([h.between(start_ms, end_ms) for h in histories], start_ms, end_ms)


TopicList = Callable[[], Awaitable[dict[str, int]]]
"""What lists the topics to sample: name -> shards (`AsyncAdmin.topics`)."""


MAX_POINTS = 300
"""Points a chart has at most (two pixels each across a 640-px chart): over a long range each
point stands for a few seconds, the latest sample of each topic in them."""


def sample_charts(topics: Sequence[Sequence[Sample]], start_ms: int, end_ms: int) -> list[Chart]:
    """The dashboard's charts from each topic's samples, summed over the topics (rates and
    backlogs add up; of lateness, the worst topic's)."""
    resolution_ms = 1000 * max(1, math.ceil((end_ms - start_ms) / MAX_POINTS / 1000))
    charts = [
        Chart("throughput", "Fired, handled, dead-lettered", "jobs/s", start_ms, end_ms),
        Chart("lateness", "Fire lateness (p50, p99)", "ms", start_ms, end_ms),
        Chart("backlog", "Backlog", "jobs", start_ms, end_ms),
    ]
    rows = _rows(topics, resolution_ms)
    visible = [(at, got) for at, got in rows if at >= start_ms]
    charts[0].series.extend(
        Series(label, [(at, _rate_sum(i, got)) for at, got in visible])
        for i, label in enumerate(("fired/s", "handled/s", "dead-lettered/s"))
    )
    charts[1].series.extend(
        Series(label, [(at, _max(g[i] for g in got)) for at, got in visible])
        for i, label in ((3, "p50"), (4, "p99"))
    )
    charts[2].series.extend(
        Series(label, [(at, _sum(g[i] for g in got)) for at, got in visible])
        for i, label in ((5, "pending"), (6, "ready"), (7, "in flight"))
    )
    return charts


Pair = tuple["Sample | None", Sample]
Step = tuple[float | None, ...]
RATED = 8
"""A step's last value: 1.0 when it has rates (a sample before it), else 0.0."""


def _rows(topics: Sequence[Sequence[Sample]], resolution_ms: int) -> list[tuple[int, list[Step]]]:
    """At each time some topic was sampled (rounded down to `resolution_ms`, so topics
    sampled in one round line up), each topic's latest step so far. Topics are sampled in
    turns, a few a round: between two of its samples a topic's last one stands, so a
    steady topic adds the same to every point, not to every other one."""
    by_topic: list[dict[int, Step]] = []
    for samples in topics:
        steps: dict[int, Step] = {}
        previous: Sample | None = None
        for sample in samples:
            steps[sample.at_ms // resolution_ms * resolution_ms] = _step((previous, sample))
            previous = sample
        by_topic.append(steps)
    latest: dict[int, Step] = {}
    rows: list[tuple[int, list[Step]]] = []
    for at in sorted({at for steps in by_topic for at in steps}):
        latest.update((i, steps[at]) for i, steps in enumerate(by_topic) if at in steps)
        rows.append((at, list(latest.values())))
    return rows


def _step(pair: Pair) -> Step:
    """(fired/s, handled/s, dead/s, p50, p99, pending, ready, in flight, rated) of one
    step; a topic's first has no rates (`RATED` 0.0): a rate needs two samples."""
    before, now = pair
    fired = handled = dead = None
    if before is not None and now.at_ms > before.at_ms:
        seconds = (now.at_ms - before.at_ms) / 1000
        fired = _per_s(before.fired, now.fired, seconds)
        dead = _per_s(before.dead, now.dead, seconds)
        if before.handled is not None and now.handled is not None:
            handled = _per_s(before.handled, now.handled, seconds)
    return (
        fired,
        handled,
        dead,
        now.late_p50_ms,
        now.late_p99_ms,
        float(now.pending),
        float(now.ready),
        float(now.in_flight),
        0.0 if before is None else 1.0,
    )


def _rate_sum(i: int, steps: Sequence[Step]) -> float | None:
    """The topics' rate `i` summed, once every topic has rates: until a topic has a second
    sample, a sum of the others' would count it as 0 (the list's chart started at 0)."""
    if not all(step[RATED] for step in steps):
        return None
    return _sum(step[i] for step in steps)


def _per_s(before: int, after: int, seconds: float) -> float | None:
    """A counter's rate; None when it went back (trimmed away, purged)."""
    return None if after < before else (after - before) / seconds


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return sum(known) if known else None


def _max(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return max(known) if known else None
