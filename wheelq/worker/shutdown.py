"""A worker's stop sequence: stop taking work, let running handlers finish, hand the rest on.

In order, each step that needs Redis within the stop's shared `StopBudget`:

1. the readers stop at once (a read blocked in Redis is cancelled) and the claim keeper
   stops taking over (its keep-alive goes on, so running handlers keep their entries);
2. entries still waiting for a slot are dropped and *handed on*: their idle time is set to
   the visibility timeout, so the next worker to scan takes them over at once;
3. the handlers running when the stop began get the grace (``shutdown_grace_ms``, cut
   short by `Worker.hurry`); those still running then are cancelled (*abandoned*);
4. the claim keeper stops, and the settler writes what is queued;
5. whatever is still pending for this consumer (abandoned entries, entries a cancelled read
   had delivered, settlements not written) is handed on too, and a consumer that holds
   nothing leaves the group.

Nothing a stop leaves undone is lost: an entry not handed on is taken over after the
visibility timeout, and one not settled runs again. `WorkerStopReport` counts each.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from wheelq.runtime.outage import StopBudget
from wheelq.worker.claim_keeper import ClaimKeeper
from wheelq.worker.in_flight import InFlightSet
from wheelq.worker.membership import Membership
from wheelq.worker.settler import Settler
from wheelq.worker.stream_reader import StreamReader


@dataclass(frozen=True, slots=True)
class WorkerStopReport:
    """What a stop left: entries handed on to other workers, handlers abandoned running,
    and what Redis could not be told (it was unreachable): nothing is lost, it only
    takes longer."""

    finished: int
    """Handlers that were running when the stop began and finished within the grace."""
    handed_on: int
    """Entries still pending for this worker, made idle so others take them over at once."""
    abandoned: int
    """Handlers still running at the end of the grace (their entries were handed on)."""
    not_handed_on: int = 0
    """Entries this worker knew it held but could not hand on: others take them over
    after the visibility timeout."""
    unsettled: int = 0
    """Acks, retries and dead letters not written: their entries stay pending and run
    again elsewhere after the visibility timeout."""


NOTHING_RAN = WorkerStopReport(0, 0, 0)
"""The report of a stop that found nothing running (never started, or already stopping)."""


@dataclass(frozen=True, slots=True)
class RunningParts:
    """What `Worker.start()` made, and `shut_down` stops in the order of the module docstring.

    Attributes:
        readers: The stream readers (one, or one per shard on a cluster).
        claims: The claim keeper.
        settler: The settler.
        in_flight: The entries the worker holds.
        members: The worker's membership of its group.
        visibility_timeout_ms: The idle time handed-on entries are given.
    """

    readers: tuple[StreamReader, ...]
    claims: ClaimKeeper
    settler: Settler
    in_flight: InFlightSet
    members: Membership
    visibility_timeout_ms: int

    async def shut_down(
        self,
        budget: StopBudget,
        running: list[asyncio.Future[None]],
        grace_s: float,
        hurry: asyncio.Event,
    ) -> WorkerStopReport:
        """Stop every part within `budget`, giving the handlers `running` when the stop
        began `grace_s` (or until `hurry` is set); returns what was left."""
        for reader in self.readers:
            await reader.stop()
        self.claims.claiming = False
        waiting = self.in_flight.drop_waiting()
        handed_on, not_handed_on = await self._hand_on(budget, waiting, "waiting")
        finished = await wait_for_handlers(running, grace_s, hurry)
        abandoned = len(running) - finished
        for task in running:
            task.cancel()
        await self.claims.stop(budget)
        await self.settler.stop(budget)
        pending: dict[int, list[str]] | None = await budget.attempt(
            "read the entries still pending here",  # incl. what a cancelled read delivered
            self.members.still_pending,
            default=None,
        )
        if pending is None:
            not_handed_on += abandoned  # known held, not handed on (the unsettled too)
        else:
            done = {(shard, entry_id) for shard, ids in waiting.items() for entry_id in ids}
            rest = {k: [i for i in ids if (k, i) not in done] for k, ids in pending.items()}
            more, not_more = await self._hand_on(budget, rest, "pending")
            handed_on += more
            not_handed_on += not_more
            if not pending:  # it holds nothing: leave no trace in the group
                await budget.attempt("leave the group", self.members.leave, default=None)
        return WorkerStopReport(
            finished, handed_on, abandoned, not_handed_on, unsettled=self.settler.queued
        )

    async def _hand_on(
        self, budget: StopBudget, by_shard: dict[int, list[str]], what: str
    ) -> tuple[int, int]:
        """Hand entries on within `budget`; returns (handed on, not handed on)."""
        count = sum(map(len, by_shard.values()))
        if not count:
            return 0, 0
        idle_ms = self.visibility_timeout_ms
        done = await budget.attempt(
            f"hand on {count} {what} entries",
            lambda: self.members.hand_on({k: v for k, v in by_shard.items() if v}, idle_ms),
            default=-1,
        )
        return (0, count) if done < 0 else (done, 0)


async def wait_for_handlers(
    running: list[asyncio.Future[None]], grace_s: float, hurry: asyncio.Event
) -> int:
    """Wait for `running` handlers until the grace ends or `hurry` is set; returns how
    many finished."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    hurried = asyncio.ensure_future(hurry.wait())
    pending: set[asyncio.Future[Any]] = set(running)
    try:
        while pending and not hurry.is_set() and loop.time() < deadline:
            _, pending = await asyncio.wait(
                pending | {hurried},
                timeout=deadline - loop.time(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            pending.discard(hurried)
    finally:
        hurried.cancel()
    return sum(1 for t in running if t.done() and not t.cancelled())
