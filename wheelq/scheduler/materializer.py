"""Writing schedules' runs ahead, once (docs/architecture.md, "Schedules")."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import msgpack

from wheelq.core.flow import order_keys
from wheelq.core.job import envelope_fields
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.core.recurring import Schedule, plan, run_id
from wheelq.errors import LeaseLostError
from wheelq.runtime.outage import is_transient
from wheelq.scheduler.led_shards import Lead, NodeContext, NodePart
from wheelq.store import flow
from wheelq.store import schedules as sched
from wheelq.store.call import Call
from wheelq.store.schedules import ShardSchedules

log = logging.getLogger(__name__)

CALLS_PER_ROUND_TRIP = 16
MAX_REMEMBERED = 1000  # unplannable definitions remembered (logged once each)


class Materializer(NodePart):
    """Plans the schedules of the shards this node leads, every ``schedule_interval_ms``."""

    name = "schedules"
    title = "schedule planner"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx, log)
        self._epochs: dict[int, int] = {}  # Lead slot -> the epoch this node plans that shard with.
        self.written = 0  # Runs written as jobs.
        self.skipped = 0  # Missed runs not written, by their misfire policy.
        self.unplannable = 0  # Schedules skipped because their record cannot be planned.
        self._unplannable_seen: set[tuple[str, str, bytes]] = set()

    async def step(self) -> float:
        await self.plan_once()
        return self._ctx.settings.schedule_interval_ms / 1000

    async def plan_once(self) -> int:
        """One round over every led shard that is home to schedules; returns runs written."""
        leads = {(lead.keys.topic, lead.keys.shard): lead for lead in self._ctx.leads.all()}
        slots = {lead.slot for lead in leads.values()}
        self._epochs = {s: e for s, e in self._epochs.items() if s in slots}  # leads gone
        if not leads:
            return 0
        (homes,) = await self._ctx.executor.run([sched.homes()])
        mine = [leads[key] for h in homes if (key := (h.topic, h.shard)) in leads]
        if not mine:
            return 0
        reads = [sched.read(lead.keys) for lead in mine]
        found = await self._ctx.executor.run(reads, return_exceptions=True)
        written = 0
        for lead, shard in zip(mine, found, strict=True):
            try:
                if isinstance(shard, Exception):
                    raise shard
                if not shard.records or not lead.active:
                    continue
                written += await self._plan_shard(lead, shard)
            except LeaseLostError:
                self._epochs.pop(lead.slot, None)  # deposed, or fenced out: read again
            except Exception as exc:
                if is_transient(exc):
                    raise  # an outage: the whole round pauses and is tried again
                self.failed(exc)  # this shard only (a wrong-typed key): the others go on
        self.written += written
        return written

    async def _plan_shard(self, lead: Lead, shard: ShardSchedules) -> int:
        run = self._ctx.executor.run
        keys = lead.keys
        epoch = self._epochs.get(lead.slot)
        if epoch != shard.epoch:
            (epoch,) = await run([sched.claim(keys, self._ctx.leads.token, shard.epoch)])
            if not epoch:
                return 0  # a pause or another planner since the read: next round
            names = sorted(shard.records)
            await run(
                [sched.fence(s, epoch, False, names) for s in all_shards(keys.topic, lead.shards)]
            )
            self._epochs[lead.slot] = epoch
        now = self._ctx.clock.now_ms()
        horizon = now + self._ctx.settings.window_ms
        calls: list[Call[int]] = []
        orders: list[Call[Any]] = []
        planned: dict[str, int] = {}
        for name, (definition, state) in shard.records.items():
            try:
                schedule = Schedule.unpack(keys.topic, name, definition, state)
                if schedule.paused:
                    continue
                p = plan(schedule, now, horizon)
                writes = _writes(schedule, p.runs, epoch, lead.shards, now)
            except Exception as exc:  # this schedule only: the others of its shard go on
                self._unplannable(keys.topic, name, definition, exc)
                continue
            self.skipped += p.skipped
            planned[name] = p.planned_ms
            calls += writes
            if p.runs and schedule.run_option("ordered") and schedule.run_option("key"):
                orders.append(_order(schedule, p.runs))
        if orders:  # ordered runs join their key's order before they are written
            await run(orders)
        written = 0
        for i in range(0, len(calls), CALLS_PER_ROUND_TRIP):
            written += sum(await run(calls[i : i + CALLS_PER_ROUND_TRIP]))
        if planned:
            await run([sched.advance(keys, self._ctx.leads.token, epoch, planned)])
        return written

    def _unplannable(self, topic: str, name: str, definition: bytes, exc: Exception) -> None:
        """Skip a schedule whose record cannot be read or planned (one wheelq did not write,
        or an older wheelq took): logged and counted once per definition, skipped each round
        (its failure stays in `status()` until it is fixed or removed)."""
        seen = (topic, name, definition)
        if seen in self._unplannable_seen:
            self.still_failing()
            return
        if len(self._unplannable_seen) >= MAX_REMEMBERED:
            self._unplannable_seen.clear()
        self._unplannable_seen.add(seen)
        self.unplannable += 1
        log.error("schedule %s of topic %s cannot be planned: it is skipped", name, topic)
        self.failed(exc)


def _writes(
    schedule: Schedule, runs: list[int], epoch: int, shards: int, now_ms: int
) -> list[Call[int]]:
    """One `materialize` call per shard the runs land in, each with its runs ascending."""
    by_shard: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    # the envelope an enqueue writes (producer.items.validate_item) of a job with its options
    fields = envelope_fields(
        schedule.payload, 1, schedule.max_attempts, now_ms, "", "", schedule.options
    )
    envelope: bytes = msgpack.packb(fields, use_bin_type=False)
    for at in runs:
        by_shard[shard_of(run_id(schedule.name, at), shards)].append((at, envelope))
    return [
        sched.materialize(ShardKeys(schedule.topic, s), epoch, schedule.name, batch)
        for s, batch in by_shard.items()
    ]


def _order(schedule: Schedule, runs: list[int]) -> Call[Any]:
    """Register an ordered schedule's runs in their key's order (as a producer registers an
    ordered job, docs/architecture.md, "Flow control")."""
    keys = order_keys(schedule.topic, schedule.run_option("key"))
    return flow.order_register(keys, [(run_id(schedule.name, at), at) for at in runs])
