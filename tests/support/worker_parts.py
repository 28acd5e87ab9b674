"""Building blocks for unit tests of the worker's parts: a `Consumer` on a scripted executor,
stream entries as the worker reads them, and an async handler the test releases job by job.

    executor = ScriptedExecutor()
    me = consumer(executor, shards=2)
    handler = HeldHandler()
    in_flight.accept(0, [entry("a")])
    await handler.started_by("a")
    handler.release("a")
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import msgpack

from tests.support.fakes import ScriptedExecutor
from wheelq.core.job import Field, Job
from wheelq.core.keys import all_shards
from wheelq.store.streams import Entry
from wheelq.worker.stream_reader import Consumer

TOPIC = "t"
GROUP = "g"
WAIT_S = 5.0
"""Longest wait for an event a test expects at once (a bug fails the test, not hangs it)."""


def consumer(executor: ScriptedExecutor, *, shards: int = 1, name: str = "me") -> Consumer:
    """Consumer `name` of group `GROUP` on `shards` shards of `TOPIC`."""
    return Consumer(executor, TOPIC, all_shards(TOPIC, shards), GROUP, name)


def entry(
    job_id: str,
    *,
    entry_id: str | None = None,
    attempt: int = 1,
    max_attempts: int = 1,
    group: str | None = None,
    payload: object = None,
) -> Entry:
    """A ready-stream entry of job `job_id` (entry id ``"<n>-0"`` by default, n from the id's
    digits or 1)."""
    fields = {
        Field.ID: job_id.encode(),
        Field.TOPIC: TOPIC.encode(),
        Field.DUE: b"1700000000000",
        Field.ATTEMPT: str(attempt).encode(),
        Field.MAX_ATTEMPTS: str(max_attempts).encode(),
        Field.PAYLOAD: msgpack.packb(payload if payload is not None else job_id),
    }
    if group is not None:
        fields[Field.GROUP] = group.encode()
    digits = "".join(c for c in job_id if c.isdigit()) or "1"
    return (entry_id or f"{digits}-0", fields)


class HeldHandler:
    """An async handler that runs until the test releases its job (`release`), then
    returns, or raises ValueError for the ids in `failing`."""

    def __init__(self, failing: set[str] | None = None) -> None:
        self.failing = failing or set()
        self.seen: list[Job] = []
        self._started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._release: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    async def __call__(self, job: Job) -> None:
        self.seen.append(job)
        self._started[job.id].set()
        await self._release[job.id].wait()
        if job.id in self.failing:
            raise ValueError(f"{job.id} failed")

    def started(self, job_id: str) -> bool:
        return self._started[job_id].is_set()

    async def started_by(self, *job_ids: str) -> None:
        """Wait until every one of `job_ids` has started (at most `WAIT_S`)."""
        for job_id in job_ids:
            await asyncio.wait_for(self._started[job_id].wait(), WAIT_S)

    def release(self, *job_ids: str) -> None:
        for job_id in job_ids:
            self._release[job_id].set()
