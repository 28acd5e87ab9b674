"""Promoting the far tier of led shards into their sorted sets, a leaf at a time, well
before its jobs come due (docs/architecture.md, "The far tier")."""

from __future__ import annotations

import logging

from wheelq.errors import LeaseLostError
from wheelq.runtime import crash
from wheelq.runtime.outage import is_transient
from wheelq.scheduler.led_shards import NodeContext, NodePart
from wheelq.store import far_tier

log = logging.getLogger(__name__)

MAX_CALLS_PER_ROUND = 64
"""Promotion calls a round makes per shard at most (a backlog of leaves takes rounds)."""


class Promoter(NodePart):
    """Every ``far_promote_interval_ms`` (sooner when the next leaf is due, or a shard is
    newly led), promotes the leaves of each led shard that have come within its horizon."""

    name = "promoter"
    title = "far-tier promoter"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx, log)
        self.promoted = 0
        """Jobs moved from the far tier into sorted sets."""

    async def first_wait(self) -> float:
        return 0.0  # a leaf may be due already: a node that was down leaves them behind

    async def step(self) -> float:
        next_ms = await self.promote_once()
        wait_ms = self._ctx.settings.far_promote_interval_ms
        if next_ms is not None:
            wait_ms = min(wait_ms, max(0, next_ms - self._ctx.clock.now_ms()))
        return wait_ms / 1000

    async def promote_once(self) -> int | None:
        """One round over every led shard; returns the Redis ms the next leaf comes within
        its horizon (None: no far job in any led shard)."""
        pending = {lead.keys: lead for lead in self._ctx.leads.all() if lead.active}
        calls_made = dict.fromkeys(pending, 0)
        next_ms: int | None = None
        while pending:
            token = self._ctx.leads.token
            calls = [far_tier.promote(keys, token) for keys in pending]
            replies = await self._ctx.executor.run(calls, return_exceptions=True)
            crash.point("promote.after_reply")  # moved in Redis, not yet counted here
            for reply in replies:
                if is_transient(reply):
                    raise reply
            for keys, result in zip(list(pending), replies, strict=True):
                if isinstance(result, LeaseLostError):
                    del pending[keys]  # deposed: the new leader promotes it
                    continue
                if isinstance(result, Exception):
                    self.failed(result)  # this shard only: the others go on
                    del pending[keys]
                    continue
                self.promoted += result.moved
                if result.moved:
                    self._ctx.event("promoted", keys, result.moved)
                calls_made[keys] += 1
                if not result.more or calls_made[keys] >= MAX_CALLS_PER_ROUND:
                    del pending[keys]
                    if result.next_ms is not None:
                        next_ms = min(next_ms or result.next_ms, result.next_ms)
        return next_ms
