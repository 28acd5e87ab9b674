"""Traces on real servers: one trace from `enqueue` through the scheduler to the handler
(the OpenTelemetry SDK's in-memory exporter), a retry in the same trace, and nothing written
when there is no trace context.

The producer's ``send`` span is a child of the caller's span; the job carries its context in
the envelope and the stream entry's ``trace`` field; the worker's ``process`` span is its
child. Waits are conditions with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import redis.asyncio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from tests.support.clients import admin_of
from tests.support.tracing import Spans
from tests.support.waiting import until
from wheelq import AsyncAdmin, AsyncClient, Job, Scheduler, Worker
from wheelq.core.job import Field
from wheelq.core.keys import all_shards
from wheelq.core.trace import format_traceparent

SHARDS = 2
FAST: dict[str, Any] = {"visibility_timeout_ms": 1000, "claim_interval_ms": 100}
SCHEDULER: dict[str, Any] = {"window_ms": 5000, "preload_interval_ms": 100, "lease_ttl_ms": 2000}
GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
WAIT_S = 30


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.context
    return format_traceparent(ctx.trace_id, ctx.span_id, ctx.trace_flags)


class Handled:
    """An async handler that records each job and fails the attempts it is told to."""

    def __init__(self, fail_attempts: int = 0) -> None:
        self.jobs: list[Job] = []
        self.fail_attempts = fail_attempts
        self.succeeded = asyncio.Event()

    async def __call__(self, job: Job) -> None:
        self.jobs.append(job)
        if job.attempt <= self.fail_attempts:
            raise RuntimeError(f"boom on attempt {job.attempt}")
        self.succeeded.set()


@pytest.fixture
async def roles() -> AsyncIterator[AsyncExitStack]:
    """Where the test's client, scheduler and worker are stopped."""
    async with AsyncExitStack() as stack:
        yield stack


async def start(
    stack: AsyncExitStack, url: str, topic: str, handler: Handled, **worker: Any
) -> AsyncClient:
    """A client, a scheduler node and a worker on `topic` (made after tracing is set up)."""
    client = await stack.enter_async_context(AsyncClient.from_url(url))
    admin = admin_of(client)
    await admin.create_topic(topic, SHARDS)
    await stack.enter_async_context(Scheduler.from_url(url, [topic], **SCHEDULER))
    settings = {**FAST, **worker}
    await stack.enter_async_context(Worker.from_url(url, topic, handler, **settings))
    return client


async def entries(r: redis.asyncio.Redis, topic: str) -> list[dict[bytes, bytes]]:
    out = []
    for keys in all_shards(topic, SHARDS):
        out += [fields for _, fields in await r.xrange(keys.ready)]
    return out


async def test_one_trace_runs_from_enqueue_through_the_scheduler_to_the_handler(
    traced: Spans,
    roles: AsyncExitStack,
    redis_url: str,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    handler = Handled()
    client = await start(roles, redis_url, topic, handler)
    with traced.tracer.start_as_current_span("request") as request:
        job_id = await client.enqueue(topic, {"n": 1}, delay=0.3)  # through the sorted set
    await asyncio.wait_for(handler.succeeded.wait(), WAIT_S)
    await until(lambda: traced.named(f"process {topic}"), timeout_s=WAIT_S, what="process span")

    (send,) = traced.named(f"send {topic}")
    (process,) = traced.named(f"process {topic}")
    trace_id = request.get_span_context().trace_id
    assert send.context.trace_id == process.context.trace_id == trace_id
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    (job,) = handler.jobs
    assert (job.id, job.traceparent) == (job_id, traceparent_of(send))
    assert (process.attributes or {})["messaging.message.id"] == job_id
    [fields] = await entries(redis_async, topic)
    assert fields[Field.TRACE] == traceparent_of(send).encode()


async def test_every_attempt_of_a_retried_job_is_in_the_trace_it_was_enqueued_in(
    traced: Spans,
    roles: AsyncExitStack,
    redis_url: str,
    topic: str,
) -> None:
    handler = Handled(fail_attempts=1)
    client = await start(roles, redis_url, topic, handler, retry_base_ms=50, retry_jitter_pct=0)
    await client.enqueue(topic, {"n": 1}, max_attempts=2)
    await asyncio.wait_for(handler.succeeded.wait(), WAIT_S)
    name = f"process {topic}"
    await until(lambda: len(traced.named(name)) == 2, timeout_s=WAIT_S, what="two process spans")

    (send,) = traced.named(f"send {topic}")
    first, second = sorted(traced.named(name), key=lambda s: s.start_time or 0)
    for process in (first, second):
        assert process.parent is not None and process.parent.span_id == send.context.span_id
        assert process.context.trace_id == send.context.trace_id
    assert [(s.attributes or {})["wheelq.job.attempt"] for s in (first, second)] == [1, 2]
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "RuntimeError: boom on attempt 1"
    assert second.status.status_code is StatusCode.UNSET
    assert [job.traceparent for job in handler.jobs] == [traceparent_of(send)] * 2


async def test_without_a_trace_context_nothing_is_written_and_a_given_one_travels(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    # the suite's default: no otel extra
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, SHARDS)
        plain = await client.enqueue(topic, {"n": 1})  # due now: fired by the enqueue
        given = await client.enqueue(topic, {"n": 2}, traceparent=GIVEN)
        batch = await client.enqueue_many(
            topic, [{"payload": 3}, {"payload": 4, "traceparent": GIVEN}]
        )

    by_id = {f[Field.ID].decode(): f for f in await entries(redis_async, topic)}
    assert set(by_id) == {plain, given, *batch}
    assert [Field.TRACE in by_id[i] for i in (plain, batch[0])] == [False, False]
    assert list(by_id[plain]) == list(Field.READY)
    assert [by_id[i][Field.TRACE] for i in (given, batch[1])] == [GIVEN.encode()] * 2
    jobs = [Job.from_entry("1-0", by_id[i]) for i in (plain, given)]
    assert [j.traceparent for j in jobs] == [None, GIVEN]
