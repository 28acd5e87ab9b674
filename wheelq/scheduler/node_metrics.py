"""What a scheduler node counts for its metrics: plain ints and fixed-bucket histograms.

Counting happens on the node's event loop, once per emit call (the counters) and once
per fired job (the lateness histogram: a bisect and two additions); nothing here
locks or calls a metrics library. `wheelq.metrics` reads it all at scrape time.

Fire lateness is measured on the node's corrected clock: the emit call is sent at the
node's now (Redis clock, corrected by the measured offset) and the script fires each job
at ``min(that now, TIME)``; its reply names no entry ids, so lateness is that now minus
the job's due time. A job the sweep fired (overdue: a new leader's backlog, or one the
wheel missed) is counted at the least lateness it can have, now minus the sweep's bound,
since the sweep's reply names neither its jobs nor their due times.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from wheelq.core.histogram import Histogram
from wheelq.store.ops import EmitResult


@dataclass(slots=True)
class NodeMetrics:
    """Counters by (event kind, topic, shard), and fire lateness histograms by topic."""

    counts: dict[tuple[str, str, int], int] = field(default_factory=lambda: defaultdict(int))
    fire_lateness: dict[str, Histogram] = field(default_factory=dict)

    def record(self, kind: str, topic: str, shard: int, count: int) -> None:
        """Count one node event: its `count` of jobs or entries, or 1 (a lease change)."""
        self.counts[(kind, topic, shard)] += count or 1

    def lateness(self, topic: str) -> Histogram:
        found = self.fire_lateness.get(topic)
        if found is None:
            found = self.fire_lateness[topic] = Histogram()
        return found

    def fired_by_wheel(
        self,
        topic: str,
        sent_ms: int,
        ids: Sequence[str],
        dues_ms: Sequence[int],
        result: EmitResult,
    ) -> None:
        """Observe the lateness of the jobs one wheel emit call fired.

        The reply counts what it fired and names the ids it did not (not yet due, held,
        malformed) but not those it skipped (cancelled meanwhile, orphans): when some were
        skipped, the first ``emitted`` of the others are taken, so the count is exact and a
        lateness may belong to a neighbour due in the same round.
        """
        hist = self.lateness(topic)
        if result.emitted == len(ids):
            hist.observe_since(sent_ms, dues_ms)
            return
        if result.emitted <= 0:
            return
        skipped = {i for i, _ in result.not_yet_due} | set(result.held) | set(result.malformed)
        late = [sent_ms - due for i, due in zip(ids, dues_ms, strict=True) if i not in skipped]
        late = late[: result.emitted]
        late += [late[-1] if late else 0] * (result.emitted - len(late))
        hist.observe_all(late)

    def fired_by_sweep(self, topic: str, sent_ms: int, bound_ms: int, emitted: int) -> None:
        """Observe `emitted` overdue jobs a sweep fired, at their least lateness."""
        if emitted > 0:
            least = max(0, sent_ms - bound_ms)
            self.lateness(topic).observe_all([least] * emitted)
