"""Moving notices of led shards to the jobs waiting on them (docs/architecture.md, "Jobs that
follow jobs"): a script that ends a job someone waits on adds a notice on the job's shard and
nudges its leader (a '!' in the inbox and on the wake channel); the leader reads the
shard's notices, has each heard on its waiting job's shard (``resolve.lua``), and deletes
those heard. A notice is deleted only after it was heard, and hearing one twice changes
nothing, so a node that dies between the two leaves the next leader to send it again."""

from __future__ import annotations

import logging
from collections import defaultdict

from wheelq.core.follow import Notice, parse_wire_ref
from wheelq.core.keys import ShardKeys
from wheelq.runtime import crash
from wheelq.runtime.outage import is_transient
from wheelq.scheduler.led_shards import Lead, NodeContext, NodePart
from wheelq.store import enqueue, follow

log = logging.getLogger(__name__)

BATCH = 250
"""Notices read from a shard a round: a round's hearing stays short (a few ms), so a notice
that arrives during one waits little for the next."""


class Resolver(NodePart):
    """Whenever a led shard may hold notices (taken on, nudged), moves them on."""

    name = "resolver"
    title = "notice resolver"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx, log)
        self.heard = 0
        """Notices heard by their waiting jobs (each counted once a send that changed one)."""
        self.released = 0
        """Waiting jobs made due."""

    async def step(self) -> float | None:
        leads = [lead for lead in self._ctx.leads.all() if lead.active and lead.notices]
        if not leads:
            return None
        busy = await self._round(leads)
        self._keep_count()
        return 0.0 if busy else None

    async def _round(self, leads: list[Lead]) -> bool:
        """Move one batch of notices of every lead in `leads` at once: one round trip to
        read them, one to have them heard, one to delete those heard (each pipelined across
        the shards); returns whether more may wait."""
        nudged = [lead.nudged for lead in leads]  # a nudge during the read is not lost
        reads = await self._ctx.executor.run(
            [follow.read_notices(lead.keys, BATCH) for lead in leads], return_exceptions=True
        )
        by_shard: dict[ShardKeys, list[Notice]] = defaultdict(list)
        read: list[tuple[Lead, list[Notice]]] = []
        dropped: dict[ShardKeys, list[str]] = defaultdict(list)
        for lead, notices, seen in zip(leads, reads, nudged, strict=True):
            if is_transient(notices):
                raise notices
            if isinstance(notices, Exception):
                self._refused.add(lead.slot)
                self.failed(notices)
                continue
            if not notices:
                lead.checked = seen
                continue
            read.append((lead, notices))
            for notice in notices:
                if notice.shard < 0:
                    dropped[lead.keys].append(notice.entry)
                    log.warning("dropped an unreadable notice of %s", lead.keys.tag)
                else:
                    by_shard[ShardKeys(notice.topic, notice.shard)].append(notice)
        if not read:
            return False
        shards = list(by_shard)
        replies = await self._ctx.executor.run(
            [follow.hear(keys, by_shard[keys]) for keys in shards], return_exceptions=True
        )
        crash.point("resolve.after_hear")
        heard: set[Notice] = set()  # (an entry id names a notice on its own stream only)
        cancels = []
        for keys, reply in zip(shards, replies, strict=True):
            if is_transient(reply):
                raise reply
            if isinstance(reply, Exception):
                log.warning("notices for %s could not be heard: %s", keys.tag, reply)
                self.failed(reply)
                continue
            self.heard += reply.changed
            self.released += reply.released
            heard.update(by_shard[keys])
            cancels += [found for ref in reply.cancel if (found := parse_wire_ref(ref))]
        if cancels:  # a failed join's children still pending; before the notices go
            await self._ctx.executor.run([enqueue.cancel(keys, job_id) for keys, job_id in cancels])
        busy = False
        drops = []
        for lead, notices in read:
            done = [n.entry for n in notices if n in heard] + dropped.pop(lead.keys, [])
            if len(done) < len(notices):
                self._refused.add(lead.slot)  # tried again at the next nudge
                if done:
                    drops.append(follow.drop_notices(lead.keys, done))
                continue
            busy = True  # read again until a read finds none: what came meanwhile is not lost
            drops.append(follow.drop_notices_upto(lead.keys, notices[-1].entry))
        if drops:
            await self._ctx.executor.run(drops)
        return busy
