"""Following whether a worker's group is paused (docs/architecture.md, "Pause and resume")."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from wheelq.core.clock import Clock
from wheelq.core.keys import ShardKeys
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, PartStopped, Service
from wheelq.store import events, line, pauses
from wheelq.store.call import Call
from wheelq.store.executor import AsyncExecutor

log = logging.getLogger(__name__)


class PauseWatch(Service):
    """Tells the worker when its group is paused or resumed, and whether its topic has job
    events on and a due line: at once through the `PAUSED_CHANNEL` subscription (a pause,
    `set_events`, fair shares turned on, a shard's first job of a priority other than 5), and
    by reading the state on every (re)subscription and every `poll_ms` (`paused_poll_ms` while
    paused), so no lost message is lost for long."""

    name = "pause"

    def __init__(
        self,
        executor: AsyncExecutor,
        topic: str,
        group: str,
        clock: Clock,
        on_change: Callable[[bool], Awaitable[None]],
        on_events: Callable[[bool], None] = lambda on: None,
        on_line: Callable[[bool], None] = lambda on: None,
        *,
        paused: bool = False,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
        poll_ms: int = 10_000,
        paused_poll_ms: int = 1000,
    ) -> None:
        super().__init__(clock, log, max_pause_ms=max_pause_ms, title=f"pause watch of {topic}")
        self._executor = executor
        self.topic = topic
        self.group = group
        self._on_change = on_change
        self._on_events = on_events
        self._on_line = on_line
        self.paused = paused
        """As last read and acted on (the worker started in this state)."""
        self._poll_ms = poll_ms  # WorkerSettings.pause_poll_ms
        self._paused_poll_ms = paused_poll_ms  # WorkerSettings.paused_poll_ms
        self.reads = 0  # State reads (each three commands, one when paused and not told).
        self.events_on = False
        """Whether the topic has job events on, as last read (the worker notes starts)."""
        self.lined = False
        """Whether the topic orders its due jobs, as last read (the worker reads ahead less)."""

    async def read(self, events_too: bool = True) -> bool:
        """Read the state now (`events_too`: and whether the topic has events on and a due
        line, both read off shard 0 as the worker's start does) and tell the worker what
        changed; returns whether paused."""
        calls: list[Call[bool]] = [pauses.read_pause_of(self.topic, self.group)]
        if events_too:
            first = ShardKeys(self.topic, 0)
            calls += [events.enabled(first), line.orders(first)]
        now_paused, *topic = await self._executor.run(calls)
        self.reads += 1
        if topic:
            events_on, self.lined = topic
            self._on_line(self.lined)
            if events_on != self.events_on:
                self.events_on = events_on
                self._on_events(self.events_on)
        if now_paused != self.paused:
            await self._on_change(now_paused)
            self.paused = now_paused  # once done: a failure part-way is done again next read
            log.info(
                "group %s of %s %s",
                self.group,
                self.topic,
                "paused: taking no new jobs" if now_paused else "resumed",
            )
        return bool(now_paused)

    def status(self) -> dict[str, object]:
        """The part's health, and `reads` of the state so far (the first: once subscribed)."""
        return super().status() | {"reads": self.reads}

    async def step(self) -> float:
        """One subscription: follow it until stopped or the connection fails (it raises)."""
        subscription = pauses.PauseSubscription.of(self._executor)
        topics = frozenset((self.topic,))
        try:
            await subscription.subscribe()
            due_ms = self.clock.now_ms()  # the confirmation reads it; so does this
            while not self.stopping:
                left_s = max(0.0, (due_ms - self.clock.now_ms()) / 1000)
                told = await subscription.changed(topics, left_s)
                if told or self.clock.now_ms() >= due_ms:
                    await self.read(events_too=told or not self.paused)
                    due_ms = self.clock.now_ms() + (
                        self._paused_poll_ms if self.paused else self._poll_ms
                    )
                if self.failures:
                    self.succeeded()  # the subscription is back: this step does not return
        finally:
            await subscription.aclose()
        return 0.0

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        """Stop now: a wait for a message is cancelled, not waited out."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
        return await super().stop(budget)
