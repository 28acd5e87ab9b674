"""Job results: `result()`, waiting for one group's outcome of a job without polling
(docs/architecture.md, "Job results")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from wheelq.core import keys as k
from wheelq.core.due import delay_ms
from wheelq.core.history import SEPARATOR, JobState, job_info, outcome
from wheelq.errors import (
    JobFailedError,
    ResultTimeoutError,
    UnknownGroupError,
    UnknownJobError,
    UnknownTopicError,
)
from wheelq.producer.operations import Op, Producer
from wheelq.store import history, results, streams
from wheelq.store.groups import has_group

MAX_TIMEOUT_S = 86_400
"""The longest `result()` wait (a day)."""
BLOCK_MS = 2000
"""One blocking read of the notes, well inside a socket timeout (as a pull's)."""

Timeout = float | int | timedelta


def timeout_ms(timeout: object, name: str = "timeout") -> int:
    """`timeout` (seconds: int, float or timedelta, 0 to a day) as whole ms, rounded up.

    Raises:
        InvalidArgumentError: Not a finite number of seconds in [0, 86400].
    """
    return delay_ms(timeout, name, MAX_TIMEOUT_S * 1000)


def result(producer: Producer, topic: str, job_id: str, group: str, timeout: object) -> Op[Any]:
    """What the handler of `group` returned for job `job_id`, once the job's latest run
    succeeded there; waits up to `timeout` for it.

    Registers in ``{T:s}:waiters`` and looks the job up in one round trip, then blocks on
    ``{T:s}:done`` (the scripts that settle add a note there only while someone waits), and
    looks it up again when a note names it: no lookup loop. A group no stream of the
    topic has is an error at once (no worker of it could settle the job), unless the job
    has an outcome there already.

    Raises:
        InvalidArgumentError: A bad topic, job id, group or timeout (nothing written).
        UnknownTopicError: No such topic (nothing waited).
        UnknownJobError: Nothing is known of the job (nothing waited), or its result was
            kept for its task's ``result_ttl``, which has passed.
        UnknownGroupError: The topic has no consumer group `group` (nothing waited).
        JobFailedError: The job was dead-lettered (or cancelled) in `group`.
        ResultTimeoutError: It had not finished when `timeout` passed.
    """
    k.validate_topic(topic)
    k.validate_job_id(job_id)
    k.validate_group(group)
    wait_ms = timeout_ms(timeout)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:  # no such topic: no job to wait for
        raise UnknownTopicError(topic)
    keys = k.ShardKeys(topic, k.shard_of(job_id, shards))
    field = job_id + SEPARATOR + group
    clock = producer.clock
    deadline = clock.now_ms() + wait_ms
    after = streams.ZERO_ID
    look = True
    group_known = False
    while True:
        left = deadline - clock.now_ms()
        if look or left <= 0:  # at the deadline, once more: a missed note delays, never misleads
            waits = results.await_outcome(keys, field, deadline, clock.now_ms()) if left > 0 else []
            replies = yield [*waits, history.lookup(keys, job_id)]
            info = job_info(topic, job_id, replies[-1])
            done = outcome(info, group)
            if done is not None and done.state is JobState.SUCCEEDED:
                if done.result_ttl_ms is None:
                    return done.result
                (kept,) = yield [results.kept_result(keys, field)]
                if kept is None:  # its task's result_ttl has passed
                    raise UnknownJobError(topic, job_id)
                return kept.value
            if done is not None:
                raise JobFailedError(
                    topic, job_id, group, done.state, done.reason, done.error, done.dead_entry_id
                )
            if info.state is JobState.UNKNOWN:  # never enqueued, or forgotten: no outcome to come
                raise UnknownJobError(topic, job_id)
            if not group_known:  # once: a group is deleted only on purpose
                if not (yield from has_group(topic, keys.shard, group)):
                    raise UnknownGroupError(topic, group)
                group_known = True
            if waits:
                after = replies[-2]
        if left <= 0:
            state = next((g.state for g in info.groups if g.group == group), info.state)
            raise ResultTimeoutError(topic, job_id, group, wait_ms, state)
        (woken,) = yield [results.read_done(keys, after, producer.block_ms(min(left, BLOCK_MS)))]
        after = woken.last or after
        # Named (a settlement: its field; a cancel: the id), or a note may have been missed.
        look = field in woken.fields or job_id in woken.fields or woken.full
