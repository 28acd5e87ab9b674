"""The worker's slots, shared by its topics, and which topic's waiting entry takes the next
free one: by weight, or strictly by priority (docs/architecture.md, "Several topics in one
worker").

Weighted: smooth weighted round robin (the one nginx uses) over the topics that have an
entry waiting, so while every topic has entries to start, topic t starts w_t of every
sum(w) entries, evenly spread (weights 6/3/1: a, b, a, c, a, b, a, a, b, a), and a topic
with none waiting leaves its share to the others. Strict: the first topic (highest
priority) with an entry waiting; a lower one starts only once every topic above it has
nothing waiting and its last reads came back short (it is drained), so no critical entry
waits behind a low one.
"""

from __future__ import annotations

from typing import Protocol


class Lane(Protocol):
    """One topic's entries as the slots see them (`wheelq.worker.in_flight.InFlightSet`)."""

    def ready(self) -> bool:
        """Whether it has an entry to start now, with room for it."""
        ...

    def drained(self) -> bool:
        """Whether it has nothing to start soon: nothing waiting, its reads came back short
        (or it is paused or stopping)."""
        ...

    def start_next(self) -> None:
        """Start its oldest waiting entry (it counts in `Slots.tasks` until it ends)."""
        ...


class Slots:
    """The slots of one worker (`concurrency` handlers at once) over its topics' lanes."""

    __slots__ = ("_current", "_lanes", "_weights", "concurrency", "strict", "tasks")

    def __init__(self, concurrency: int, *, strict: bool = False) -> None:
        self.concurrency = concurrency
        self.strict = strict
        self.tasks = 0
        """Entry tasks alive over every lane (running, or waiting for the flow gate)."""
        self._lanes: list[Lane] = []
        self._weights: list[int] = []
        self._current: list[int] = []

    def add(self, lane: Lane, weight: int = 1) -> None:
        """Add a lane (in priority order, highest first, for `strict`)."""
        self._lanes.append(lane)
        self._weights.append(weight)
        self._current.append(0)

    def fill(self) -> None:
        """Start waiting entries while there is room, each from the lane whose turn it is."""
        if len(self._lanes) == 1:  # one topic: no choice to make
            only = self._lanes[0]
            while only.ready():
                only.start_next()
            return
        while (lane := self._pick()) is not None:
            lane.start_next()

    def _pick(self) -> Lane | None:
        if self.strict:
            for lane in self._lanes:
                if lane.ready():
                    return lane
                if not lane.drained():
                    return None  # its next entries are on their way: wait for them
            return None
        chosen, total = -1, 0
        for i, lane in enumerate(self._lanes):
            if lane.ready():
                self._current[i] += self._weights[i]
                total += self._weights[i]
                if chosen < 0 or self._current[i] > self._current[chosen]:
                    chosen = i
        if chosen < 0:
            return None
        self._current[chosen] -= total
        return self._lanes[chosen]
