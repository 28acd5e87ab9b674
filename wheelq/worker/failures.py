"""What a failed run turns into: a retry after its backoff, a deferral, or a dead letter.

The decision is `wheelq.core.retry.after_failure` (the attempt, the exception, the
policy); this module hands it to the settler and says it in the log, once per run: a
warning for a dead letter, info for a retry, debug for a deferral (`wheelq.Defer`, or a
flow limit holding a job back), which is a wait, not a failure.
"""

from __future__ import annotations

import enum
import logging
import random

from wheelq.core.job import Job
from wheelq.core.retry import Reason, RetryPolicy, after_failure
from wheelq.worker.settler import Settler

log = logging.getLogger("wheelq.worker.in_flight")  # the hot path's logger, as before


class Fate(enum.Enum):
    """Where a failed run went."""

    RETRIED = "retried"
    """Enqueued again after its backoff, one attempt on."""
    DEFERRED = "deferred"
    """Enqueued again after its delay, the same attempt (it did not fail)."""
    DEAD = "dead"
    """Dead-lettered: its last attempt, or `wheelq.Fail`."""


def settle_failure(
    settler: Settler,
    policy: RetryPolicy,
    topic: str,
    job: Job,
    payload: bytes,
    error: Exception,
    ended_ms: int,
) -> Fate:
    """Retry, defer or dead-letter `job`, whose run raised `error` at `ended_ms` (epoch
    ms); `payload` as encoded, for the retry's envelope."""
    outcome = after_failure(job.attempt, job.max_attempts, error, policy, random.random())
    summary = outcome.error.splitlines()[0]
    if outcome.delay_ms is None:
        log.warning("job %s of %s dead-lettered: %s", job.id, topic, summary)
        settler.dead(job.shard, job.entry_id, Reason.FAILED, outcome.error)
        return Fate.DEAD
    if outcome.counts:
        log.info(
            "job %s of %s failed (attempt %d of %d), retry in %d ms: %s",
            *(job.id, topic, job.attempt, job.max_attempts, outcome.delay_ms, summary),
        )
    else:
        log.debug("job %s of %s deferred %d ms: %s", job.id, topic, outcome.delay_ms, summary)
    settler.retry(job, payload, outcome.delay_ms, ended_ms, outcome.error, outcome.counts)
    return Fate.RETRIED if outcome.counts else Fate.DEFERRED


def defer(settler: Settler, job: Job, payload: bytes, defer_ms: int, now_ms: int) -> None:
    """Held back by a flow limit: run `job` again after `defer_ms`, keeping the attempt."""
    why = f"deferred {defer_ms} ms by flow control"
    settler.retry(job, payload, defer_ms, now_ms, why, counts=False)
