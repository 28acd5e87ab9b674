"""The wheel driver: sleeps until the next due bucket, then emits it."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from wheelq.errors import LeaseLostError
from wheelq.runtime import crash
from wheelq.runtime.outage import is_transient
from wheelq.scheduler.led_shards import Lead, NodeContext, NodePart
from wheelq.scheduler.wheel import TimingWheel
from wheelq.store import fire
from wheelq.store.call import Call

log = logging.getLogger(__name__)

WheelKey = tuple[int, str]  # (lead slot, job id)

FIRST_ROUND = 100  # Jobs of a burst sent ahead of the rest (see `WheelDriver._emit`).
ROUND_MOST = 500  # Most jobs of a burst's rest one round sends (see `WheelDriver._emit`).


class WheelDriver(NodePart):
    """Fires preloaded jobs at their due millisecond."""

    name = "driver"
    title = "wheel driver"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx, log)
        self.on_line: Callable[[], None] | None = None
        """Called when an emit leaves jobs on a shard's due line that had none (the preloader's
        wake: it sweeps the line at its pace)."""
        s = ctx.settings
        self.wheel: TimingWheel[WheelKey] = TimingWheel(
            tick_ms=s.tick_ms, wheel_size=s.wheel_size, start_ms=ctx.clock.now_ms()
        )

    def schedule(self, lead: Lead, jobs: list[tuple[str, int]]) -> None:
        """Put (job id, due ms) pairs of `lead` in the wheel; wakes the driver if earlier."""
        if not jobs or not lead.active:
            return
        if not self.wheel:  # bring an idle wheel's levels to now: jobs land in level 0,
            self.wheel.advance_to(self.clock.now_ms())  # where a crowded ms can be sliced
        before = self.wheel.next_expiry_ms()
        add = self.wheel.add
        slot = lead.slot
        for job_id, due_ms in jobs:
            add((slot, job_id), due_ms)
        after = self.wheel.next_expiry_ms()
        if before is None or (after is not None and after < before):
            self.wake()

    async def step(self) -> float | None:
        """Emit what is due; returns the wait until the next bucket (None: the wheel is empty)."""
        now_ms = self.clock.now_ms()
        next_ms = self.wheel.next_expiry_ms()
        if next_ms is None or next_ms > now_ms:
            if self._refused:
                self._keep_count()
            return None if next_ms is None else (next_ms - now_ms) / 1000
        # A crowded millisecond comes out in a slice first (O(1) for the rest, which stays
        # due for the next step): its earliest jobs go out without waiting for the wheel to
        # hand over the whole burst (~7 ms for 20,000).
        expired = self.wheel.advance_to(now_ms, FIRST_ROUND)
        if expired:
            await self._emit(expired, now_ms)
        if self._refused:
            self._keep_count()
        return 0.0

    async def _emit(self, expired: list[tuple[WheelKey, int]], now_ms: int) -> None:
        """Emit `expired`: the first `FIRST_ROUND` before the rest is grouped, then the rest.
        Where the rest reaches a shard whose due line holds jobs, in rounds of at most
        `ROUND_MOST`, and before each what came due meanwhile: a burst of 100,000 takes the
        node and Redis about a second to line (about 10 us a job), and a job due during it
        goes to the line within a round (about 5 ms) and passes the burst as its rank says.
        Elsewhere in one round: a stream keeps due order, and one round sends a burst
        soonest."""
        rounds = [expired[:FIRST_ROUND]]
        sent, lined = 0, False
        try:
            while sent < len(rounds):
                if lined:
                    now_ms = self.clock.now_ms()
                    came = self.wheel.advance_to(now_ms, FIRST_ROUND)
                    if came:
                        rounds.insert(sent, came)
                await self._emit_round(rounds[sent], now_ms)
                sent += 1
                if sent == 1 and len(expired) > FIRST_ROUND:
                    lined = self._reaches_a_line(expired[FIRST_ROUND:])
                    rest = expired[FIRST_ROUND:]
                    step = ROUND_MOST if lined else len(rest)
                    rounds += [rest[i : i + step] for i in range(0, len(rest), step)]
        except BaseException:
            unsent = rounds[sent + 1 :] if len(rounds) > 1 else [expired[FIRST_ROUND:]]
            for later in unsent:  # not sent: back at their due times, after the pause
                for key, due_ms in later:
                    self.wheel.add(key, due_ms)
            raise

    def _reaches_a_line(self, rest: list[tuple[WheelKey, int]]) -> bool:
        """Whether `rest` has a job of a shard whose due line holds jobs."""
        lined = {slot for slot, lead in self._ctx.leads.by_slot.items() if lead.waiting}
        return bool(lined) and any(slot in lined for (slot, _), _ in rest)

    async def _emit_round(self, expired: list[tuple[WheelKey, int]], now_ms: int) -> None:
        by_slot: dict[int, list[str]] = defaultdict(list)
        dues: dict[int, list[int]] = defaultdict(list)  # for the fire lateness metric
        for (slot, job_id), due in expired:
            by_slot[slot].append(job_id)
            dues[slot].append(due)
        batch = self._ctx.settings.emit_batch
        calls: list[Call[Any]] = []
        targets: list[tuple[Lead, list[str], list[int]]] = []
        for slot, ids in by_slot.items():
            lead = self._ctx.leads.by_slot.get(slot)
            if lead is None or not lead.active:
                continue  # the shard was lost or released: its new leader fires these
            for i in range(0, len(ids), batch):
                chunk = ids[i : i + batch]
                calls.append(
                    fire.emit_due(
                        lead.keys,
                        self._ctx.leads.token,
                        now_ms,
                        chunk,
                        max_bytes=self._ctx.settings.emit_batch_bytes,
                    )
                )
                targets.append((lead, chunk, dues[slot][i : i + batch]))
        if not calls:
            return
        crash.point("emit.before_send")
        try:
            results = await self._ctx.executor.run(calls, return_exceptions=True)
        except BaseException:
            self._again(targets)  # a connection error: whether the calls ran is unknown
            raise
        crash.point("emit.after_reply")
        outage = None
        for target, result in zip(targets, results, strict=True):
            lead, chunk, chunk_dues = target
            if isinstance(result, Exception) and is_transient(result):
                outage = result  # LOADING and the like: pause once every shard is settled
                self._again([target])
            else:
                self._settle(lead, chunk, result, now_ms)
                if isinstance(result, fire.EmitResult):
                    self._ctx.metrics.fired_by_wheel(
                        lead.keys.topic, now_ms, chunk, chunk_dues, result
                    )
        if outage is not None:
            raise outage

    def _again(self, targets: list[tuple[Lead, list[str], list[int]]]) -> None:
        """Put an unanswered round back in the wheel (re-sending emits only pending ids)."""
        for lead, chunk, chunk_dues in targets:
            self.schedule(lead, list(zip(chunk, chunk_dues, strict=True)))

    def _settle(
        self, lead: Lead, ids: list[str], result: fire.EmitResult | Exception, now_ms: int
    ) -> None:
        if isinstance(result, LeaseLostError):
            self._refused.discard(lead.slot)
            if lead.active:
                log.warning("lost the lease of %s while emitting", lead.keys.tag)
                self._ctx.lost(lead)
            return
        if isinstance(result, Exception):
            # This shard only (a wrong-type key, say): no pause for the others; its ids
            # are tried again after the backoff pause (the script never emits one twice).
            retry_ms = now_ms + max(1, round(self.failed(result) * 1000))
            self._refused.add(lead.slot)
            self.schedule(lead, [(job_id, retry_ms) for job_id in ids])
            return
        if self._refused:
            self._refused.discard(lead.slot)
        record_emit(self._ctx, lead, result, now_ms)
        if result.waiting:
            was, lead.waiting = lead.waiting, result.waiting
            if not was and self.on_line is not None:
                self.on_line()  # the line's pace until a sweep finds it empty
        if result.throttled:
            lead.throttled = True  # its held-back jobs left the wheel: the preloader sweeps them
        if result.not_yet_due:
            # Rescheduled later (or our clock ran ahead of Redis): fire at the new time.
            self.schedule(lead, [(i, max(due, now_ms + 1)) for i, due in result.not_yet_due])
        if result.held:
            # Over the call's byte budget: next round, right after this one.
            self.schedule(lead, [(i, now_ms) for i in result.held])


def record_emit(ctx: NodeContext, lead: Lead, result: fire.EmitResult, sent_ms: int) -> None:
    """Count what an emit call sent at `sent_ms` did; log each job it could not emit."""
    lead.emitted += result.emitted
    if result.emitted:
        ctx.event("emitted", lead.keys, result.emitted, sent_ms)
    if result.orphans:
        log.error("%s: %d job ids had no envelope and were dropped", lead.keys.tag, result.orphans)
        ctx.event("orphans", lead.keys, result.orphans)
    for job_id in result.malformed:
        log.error(
            "%s: job %r has an envelope that cannot be decoded; moved to the dead-letter "
            "stream as malformed",
            lead.keys.tag,
            job_id,
        )
    if result.malformed:
        ctx.event("malformed", lead.keys, len(result.malformed))
