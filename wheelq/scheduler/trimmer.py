"""Trimming led shards (docs/architecture.md, invariant 5, and "Job history")."""

from __future__ import annotations

import logging

from wheelq.runtime.outage import is_transient
from wheelq.scheduler.led_shards import NodeContext, NodePart
from wheelq.store import history

log = logging.getLogger(__name__)

CONSUMER_IDLE_MS = 86_400_000  # Idle empty consumers are forgotten after this.
MAX_CALLS_PER_ROUND = 50  # Per shard per round (a backlog takes rounds).


class Trimmer(NodePart):
    """Every ``trim_interval_ms``, trims the ready streams of the shards this node leads."""

    name = "trimmer"
    title = "trimmer"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx, log)
        self.trimmed = 0

    async def first_wait(self) -> float:
        return self._ctx.settings.trim_interval_ms / 1000

    async def step(self) -> float:
        await self.trim_once()
        return self._ctx.settings.trim_interval_ms / 1000

    async def trim_once(self) -> int:
        """Trim every led shard, each up to `MAX_CALLS_PER_ROUND` calls; returns entries removed."""
        s = self._ctx.settings
        total = 0
        pending = {lead.keys: lead for lead in self._ctx.leads.all()}
        calls_made = dict.fromkeys(pending, 0)
        while pending:
            calls = [
                history.trim(
                    lead.keys,
                    s.retention_ms,
                    s.trim_batch,
                    CONSUMER_IDLE_MS,
                    s.history_max_bytes // lead.shards,
                )
                for lead in pending.values()
            ]
            replies = await self._ctx.executor.run(calls, return_exceptions=True)
            for reply in replies:
                if is_transient(reply):
                    raise reply
            for keys, result in zip(list(pending), replies, strict=True):
                if isinstance(result, Exception):
                    self.failed(result)  # this shard only: the others are trimmed
                    del pending[keys]
                    continue
                total += result.trimmed
                self.trimmed += result.trimmed
                if result.trimmed:
                    self._ctx.event("trimmed", keys, result.trimmed)
                calls_made[keys] += 1
                if not result.more or calls_made[keys] >= MAX_CALLS_PER_ROUND:
                    del pending[keys]
        return total
