"""Settling pulled jobs by receipt: an ack is a worker's success, a nack a worker's failure
(retried with the backoff or the given delay, dead-lettered after the last attempt). Each
script settles an entry only while it is pending to the delivery its receipt names: a receipt
settled twice changes nothing the second time, and a stale one (its entry taken over by a
later pull) settles nothing at all, so it cannot end the newer delivery's run."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from wheelq.core.job import Field, Job
from wheelq.core.keys import ShardKeys
from wheelq.core.retry import Reason, RetryPolicy, retry_envelope
from wheelq.store import consume
from wheelq.store.executor import Call, Executor
from wheelq.worker.receipts import Outcome, Receipt
from wheelq.worker.settler import ACKS_PER_CALL

_SETTLED = {1: None, 0: Outcome.SETTLED_BEFORE, -1: Outcome.STALE}
"""A script's per-entry answer (`consume.ack_delivered`) as an outcome; None: as asked."""


async def ack_receipts(
    executor: Executor, now_ms: int, topic: str, group: str, receipts: list[Receipt]
) -> list[Outcome]:
    """Ack the receipts' entries and record the successes; each receipt's outcome, in order.
    A shard's receipts go in calls of at most `ACKS_PER_CALL` entries, as a worker's acks
    do, so one request never holds Redis for long."""
    by_shard: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(receipts):
        by_shard[r.shard].append(i)
    parts = [
        (shard, mine[i : i + ACKS_PER_CALL])
        for shard, mine in by_shard.items()
        for i in range(0, len(mine), ACKS_PER_CALL)
    ]
    calls = [
        consume.ack_delivered(
            ShardKeys(topic, shard),
            group,
            [_done(receipts[i], now_ms) for i in part],
            [(receipts[i].consumer, receipts[i].deliveries) for i in part],
        )
        for shard, part in parts
    ]
    outcomes = [Outcome.ACKED] * len(receipts)
    for (_, part), got in zip(parts, await executor.run(calls), strict=True):
        for i, code in zip(part, got, strict=True):
            outcomes[i] = _SETTLED[code] or Outcome.ACKED
    return outcomes


def _done(r: Receipt, now_ms: int) -> consume.Done:
    return (r.entry_id, r.job_id, now_ms, now_ms - r.pulled_ms)


async def nack_receipts(
    executor: Executor,
    now_ms: int,
    policy: RetryPolicy,
    topic: str,
    group: str,
    receipts: list[Receipt],
    delay_ms: int | None,
) -> list[Outcome]:
    """Retry or dead-letter the receipts' jobs (read back from the stream for their
    envelopes); each receipt's outcome, in order."""
    reads = [consume.read_ready(ShardKeys(topic, r.shard), r.entry_id, 1) for r in receipts]
    found = await executor.run(reads) if reads else []
    outcomes = [Outcome.SETTLED_BEFORE] * len(receipts)  # trimmed: it was acked long ago
    calls: list[Call[Any]] = []
    asked: list[int] = []
    for i, (r, rows) in enumerate(zip(receipts, found, strict=True)):
        if not rows or rows[0][0] != r.entry_id:
            continue
        keys = ShardKeys(topic, r.shard)
        delivery = (r.consumer, r.deliveries)
        asked.append(i)
        try:
            job = Job.from_entry(r.entry_id, rows[0][1], r.shard)
        except ValueError as exc:
            entry = (r.entry_id, Reason.MALFORMED, str(exc))
            calls.append(consume.dead_letter_delivered(keys, group, entry, delivery))
            continue
        error = f"nacked by a pull consumer (attempt {job.attempt} of {job.max_attempts})"
        if job.attempt >= job.max_attempts:
            entry = (r.entry_id, Reason.FAILED, error)
            calls.append(consume.dead_letter_delivered(keys, group, entry, delivery))
            continue
        wait = policy.backoff_ms(job.attempt, random.random()) if delay_ms is None else delay_ms
        envelope = retry_envelope(job, rows[0][1][Field.PAYLOAD], now_ms, group)
        calls.append(
            consume.retry(keys, group, r.entry_id, job.id, wait, envelope, error, now_ms, delivery)
        )
    for i, reply in zip(asked, await executor.run(calls) if calls else [], strict=True):
        if isinstance(reply, consume.Retried):
            code = 1 if reply.done else -1 if reply.stale else 0
            outcomes[i] = _SETTLED[code] or Outcome.RETRIED
        else:
            outcomes[i] = _SETTLED[int(reply)] or Outcome.DEAD_LETTERED
    return outcomes
