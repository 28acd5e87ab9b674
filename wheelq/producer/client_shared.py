"""What `Client` and `AsyncClient` share besides the operations: the enqueue docstring and
how a topic's stats carry the spool's."""

from __future__ import annotations

import dataclasses
import os

from wheelq.producer.operations import TopicStats
from wheelq.producer.spool import SpoolStats

Path = str | os.PathLike[str]

ENQUEUE_DOC = """Enqueue `payload` on `topic`, due after `delay` or at `at` (neither: now).

        Args:
            topic: Topic name, 1-100 characters from [A-Za-z0-9_.-]; created on first use.
            payload: Any msgpack-serialisable value (at most `max_payload_bytes` encoded).
            delay: Seconds from now (int, float or timedelta), 0 to ten years.
            at: Absolute due time: epoch seconds or an aware datetime (past = now).
            job_id: Your own id, which makes the call idempotent while the job is
                pending; default a generated, time-sortable, URL-safe id.
            max_attempts: Runs allowed before the job is dead-lettered (1-1000);
                default `default_max_attempts`.
            replace: With `job_id`, replace a pending job of that id instead of failing.
            ack: ``"primary"`` (return once the primary has it), ``"replicated"`` (and
                ``ack_replicas`` replicas: WAIT) or ``"persisted"`` (and fsynced by the
                primary and ``ack_replicas`` replicas: WAITAOF); default the client's
                ``ack`` (see README, "Acknowledged durability").
            traceparent: The W3C traceparent of the trace the job belongs to
                (``00-<32 hex>-<16 hex>-<2 hex>``); its handler's span is a child of it.
                Default: with the ``otel`` extra, this call's ``send`` span (a child of
                the current span); without, none (see README, "Tracing").
            callback: Where `wheelq deliver` POSTs the job when it is due: a URL, a
                `Callback` or a mapping with ``url``, ``headers`` and ``timeout_ms``
                (see README, "HTTP service"); other consumer groups see it as
                `Job.callback`.
            debounce_ms: With `job_id`, instead of `delay`/`at`: the job is due this long
                after the latest call, so calls in a burst fire it once, after the last
                (its payload and options are the latest call's); 1 ms to ten years.
            max_wait_ms: With `debounce_ms`: fire no later than this long after the
                first call of the burst, however the calls go on (>= debounce_ms).
            key: The job's key (a tenant, a customer id; 1-256 bytes): `Job.key`, and what
                a worker's `Flow` limits per key unless its ``key=`` says otherwise.
            ordered: With `key`: the key's jobs run one at a time, in due order, in every
                consumer group (a failing job holds the ones after it until it succeeds or
                is dead-lettered).

        Returns:
            The job id.

        Raises:
            InvalidArgumentError: A bad topic, delay, at, job_id, max_attempts,
                traceparent, callback, debounce_ms, max_wait_ms, key or ordered (also a
                ValueError);
                nothing was written.
            PayloadTypeError: The payload cannot be serialised, or would not decode back
                (a tuple as a dict key); also a TypeError.
            DuplicateJobError: `job_id` is pending already and `replace` is False.
            RedisUnavailableError: Redis cannot take the job now (its `reason` says why);
                with a spool, the job is spooled and its id returned instead.
            DurabilityError: Written, but `ack` was not reached within ``ack_timeout_ms``.
            AckUnsupportedError: ``ack="persisted"`` on a server without WAITAOF or AOF;
                nothing was written.
        """


def with_spool(stats: TopicStats | None, spool: SpoolStats | None) -> TopicStats | None:
    """`stats` with the spool's depth and age, when both are there."""
    return stats if stats is None or spool is None else dataclasses.replace(stats, spool=spool)
