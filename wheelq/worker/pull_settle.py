"""Settling pulled jobs by receipt: an ack is a worker's success, a nack a worker's failure
(retried with the backoff or the given delay, dead-lettered after the last attempt). Both
are fenced by XACK in their scripts: a receipt settled twice, or after the entry was taken
over and settled, changes nothing the second time."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from wheelq.core import wire
from wheelq.core.job import Job
from wheelq.core.keys import ShardKeys
from wheelq.core.retry import Reason, RetryPolicy, retry_envelope
from wheelq.store import consume
from wheelq.store.calls import Call, Executor
from wheelq.worker.receipts import Receipt


async def ack_receipts(
    executor: Executor, now_ms: int, topic: str, group: str, receipts: list[Receipt]
) -> int:
    """Ack the receipts' entries and record the successes; returns how many were unacked."""
    by_shard: dict[int, list[consume.Done]] = defaultdict(list)
    for r in receipts:
        by_shard[r.shard].append((r.entry_id, r.job_id, now_ms, now_ms - r.pulled_ms))
    calls = [
        consume.ack_done(ShardKeys(topic, shard), group, done) for shard, done in by_shard.items()
    ]
    return sum(await executor.run(calls)) if calls else 0


async def nack_receipts(
    executor: Executor,
    now_ms: int,
    policy: RetryPolicy,
    topic: str,
    group: str,
    receipts: list[Receipt],
    delay_ms: int | None,
) -> tuple[int, int]:
    """Retry or dead-letter the receipts' jobs (read back from the stream for their
    envelopes); returns (retried, dead-lettered)."""
    reads = [consume.read_ready(ShardKeys(topic, r.shard), r.entry_id, 1) for r in receipts]
    found = await executor.run(reads) if reads else []
    calls: list[Call[Any]] = []
    for r, rows in zip(receipts, found, strict=True):
        if not rows or rows[0][0] != r.entry_id:
            continue  # trimmed: it was acked long ago
        keys = ShardKeys(topic, r.shard)
        try:
            job = Job.from_entry(r.entry_id, rows[0][1], r.shard)
        except ValueError as exc:
            calls.append(
                consume.dead_letter(keys, group, [(r.entry_id, Reason.MALFORMED, str(exc))])
            )
            continue
        error = f"nacked by a pull consumer (attempt {job.attempt} of {job.max_attempts})"
        if job.attempt >= job.max_attempts:
            calls.append(consume.dead_letter(keys, group, [(r.entry_id, Reason.FAILED, error)]))
            continue
        wait = policy.backoff_ms(job.attempt, random.random()) if delay_ms is None else delay_ms
        envelope = retry_envelope(job, rows[0][1][wire.PAYLOAD], now_ms, group)
        calls.append(consume.retry(keys, group, r.entry_id, job.id, wait, envelope, error, now_ms))
    retried = dead = 0
    for reply in await executor.run(calls) if calls else []:
        if isinstance(reply, consume.Retried):
            retried += reply.done
        else:
            dead += int(reply)
    return retried, dead
