"""The worker's slots, shared by its topics, and which topic's waiting entry takes the next
free one: by weight, or strictly by priority (docs/architecture.md, "Several topics in one
worker").

Weighted: smooth weighted round robin (the one nginx uses) over the topics that have an
entry waiting, so while every topic has entries to start, topic t starts w_t of every
sum(w) entries, evenly spread (weights 6/3/1: a, b, a, a, b, a, c, a, b, a), and a topic
with none waiting leaves its share to the others. Strict: the first topic (highest
priority) with an entry waiting; a lower one starts only once every topic above it has
nothing waiting and its last reads came back short (it is drained), so no critical entry
waits behind a low one.

Sync handlers take their next entry on their thread, from a `TurnQueue` (the read-ahead is
queued to the threads, saving a hop through the event loop per job): there too, the lane
whose turn it is, by the same `Turns` (or, strict, the first lane with one), so the order
in which entries start follows the weights whatever the handler kind.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from wheelq.worker.read_ahead import ReadAhead
from wheelq.worker.runners import Runners

T = TypeVar("T")


class Turns:
    """Smooth weighted round robin over lanes 0..n-1: `pick` the one whose turn it is among
    those that have an entry ready. Not thread-safe (`TurnQueue` holds a lock around it)."""

    __slots__ = ("_current", "_weights")

    def __init__(self, weights: Sequence[int] = ()) -> None:
        self._weights = list(weights)
        self._current = [0] * len(self._weights)

    def add(self, weight: int) -> None:
        self._weights.append(weight)
        self._current.append(0)

    def pick(self, ready: Sequence[bool], coming: Sequence[bool] = ()) -> int:
        """The lane whose turn it is among the `ready` ones and the `coming` ones (entries
        on their way); -1 when none is ready, or when the turn is a coming lane's: it keeps
        its turn (nothing changes) until its entries are ready or it is no longer coming."""
        current, weights = self._current, self._weights
        chosen, best, total = -1, 0, 0
        for i, weight in enumerate(weights):
            if ready[i] or (coming and coming[i]):
                total += weight
                if chosen < 0 or current[i] + weight > best:
                    chosen, best = i, current[i] + weight
        if chosen < 0 or not ready[chosen]:
            return -1
        for i, weight in enumerate(weights):
            if ready[i] or (coming and coming[i]):
                current[i] += weight
        current[chosen] -= total
        return chosen


class TurnQueue(Generic[T]):
    """A thread-safe queue of one FIFO per lane, whose `get` takes from the lane whose turn
    it is: by weight (`Turns`) or, `strict`, the first lane that has one. One lane: a plain
    FIFO, no lock taken. Threads wait in `get` on a `queue.SimpleQueue` of tokens."""

    def __init__(self, weights: Sequence[int] = (1,), *, strict: bool = False) -> None:
        self._tokens: queue.SimpleQueue[bool | None] = queue.SimpleQueue()
        """One token per item put (None: a `get` that answers None), so a `get` that has
        a token always finds an item."""
        self._fifos: list[deque[T]] = [deque() for _ in weights]
        self._turns = None if len(weights) < 2 else Turns(weights)
        self._strict = strict
        self._lock = threading.Lock()

    def put(self, item: T, lane: int = 0) -> None:
        if self._turns is None:
            self._fifos[0].append(item)  # atomic: one lane needs no lock
        else:
            with self._lock:
                self._fifos[lane].append(item)
        self._tokens.put(True)

    def wake(self) -> None:
        """Make one `get` answer None (a thread told to end)."""
        self._tokens.put(None)

    def get(self) -> T | None:
        """The next item (blocking), or None after `wake`."""
        if self._tokens.get() is None:
            return None
        fifos = self._fifos
        if self._turns is None:
            return fifos[0].popleft()
        with self._lock:
            if self._strict:
                lane = next(i for i, fifo in enumerate(fifos) if fifo)
            else:
                lane = self._turns.pick([bool(fifo) for fifo in fifos])
            return fifos[lane].popleft()

    def empty(self) -> bool:
        return self._tokens.empty()


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

    __slots__ = ("_lanes", "_turns", "concurrency", "read_ahead", "runners", "strict", "tasks")

    def __init__(
        self, concurrency: int, *, strict: bool = False, read_ahead: ReadAhead | None = None
    ) -> None:
        self.concurrency = concurrency
        self.strict = strict
        self.read_ahead = ReadAhead(concurrency, 0) if read_ahead is None else read_ahead
        """How far the worker reads ahead of these slots, learnt from every lane's runs: each
        lane holds up to `concurrency` plus it, and sync handlers queue it to their threads."""
        self.tasks = 0
        """Entries started over every lane (running, queued to a thread or a runner, or
        waiting for the flow gate)."""
        self.runners = Runners()
        """What runs the lanes' async handlers (`wheelq.worker.runners`)."""
        self._lanes: list[Lane] = []
        self._turns = Turns()

    def add(self, lane: Lane, weight: int = 1) -> None:
        """Add a lane (in priority order, highest first, for `strict`)."""
        self._lanes.append(lane)
        self._turns.add(weight)

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
        lanes = self._lanes
        ready = [lane.ready() for lane in lanes]
        if True not in ready:
            return None
        # a lane not drained has entries on their way: it keeps its turn
        coming = [not r and not lane.drained() for r, lane in zip(ready, lanes, strict=True)]
        chosen = self._turns.pick(ready, coming)
        return None if chosen < 0 else lanes[chosen]
