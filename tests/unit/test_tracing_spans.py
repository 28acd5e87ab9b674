"""Tracing without Redis: the traceparent a producer operation writes into each envelope,
the send and process spans (`wheelq.runtime.tracing`) on an SDK provider of the test's own,
the process span current in the handler (async, and on a sync handler's thread), and
nothing of OpenTelemetry loaded or written without the ``otel`` extra."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from tests.support.tracing import Spans
from wheelq import EnqueueItem, HandlerTimeoutError, InvalidArgumentError, Job
from wheelq.core.job import Envelope
from wheelq.core.settings import ClientSettings
from wheelq.core.trace import format_traceparent, parse_traceparent
from wheelq.producer.operations import Op, Producer
from wheelq.runtime import tracing
from wheelq.store.call import Call
from wheelq.store.scripts import Placed
from wheelq.worker.handler_runner import HandlerRunner

TOPIC = "t"
GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def producer() -> Producer:
    p = Producer(ClientSettings())
    p._shards[TOPIC] = 1  # known: no registration round trip
    return p


def run_op(op: Op[Any]) -> tuple[Any, list[Envelope]]:
    """Drive an enqueue operation, answering each job SCHEDULED; returns its result and the
    envelopes it sent."""
    sent: list[Envelope] = []
    try:
        calls: list[Call[Any]] = next(op)
        while True:
            replies = []
            for call in calls:
                per_job = 3 if call.args[4] else 5  # a shared layout: id, value, envelope
                envelopes = [Envelope.unpack(raw) for raw in call.args[4 + per_job :: per_job]]
                sent += envelopes
                replies.append([Placed.SCHEDULED] * len(envelopes))
            calls = op.send(replies)
    except StopIteration as done:
        return done.value, sent


def span_traceparent(span: Any) -> str:
    ctx = span.get_span_context()
    return format_traceparent(ctx.trace_id, ctx.span_id, ctx.trace_flags)


def job(traceparent: str | None = None) -> Job:
    return Job(
        "j1", TOPIC, None, 5, 2, 3, entry_id="7-0", shard=1, deliveries=2, traceparent=traceparent
    )


# --- the producer ---------------------------------------------------------------------------


def test_without_tracing_an_enqueue_writes_no_traceparent_unless_given() -> None:
    p = producer()
    assert p.tracing is None  # the suite's default: no otel extra
    _, (plain,) = run_op(p.enqueue(TOPIC, EnqueueItem(payload=1)))
    _, (given,) = run_op(p.enqueue(TOPIC, EnqueueItem(payload=1, traceparent=GIVEN)))
    assert (plain.traceparent, given.traceparent) == ("", GIVEN)


@pytest.mark.parametrize("bad", ["00-abc", GIVEN.upper(), 7])
def test_a_bad_traceparent_is_refused_before_anything_is_sent(bad: Any, traced: Spans) -> None:
    untraced = producer()
    untraced.tracing = None
    for p in (untraced, producer()):
        with pytest.raises(InvalidArgumentError, match="traceparent must be") as info:
            next(p.enqueue(TOPIC, EnqueueItem(payload=1, traceparent=bad)))
        assert info.value.parameter == "traceparent"
        many = p.enqueue_many(TOPIC, [{"payload": 1}, {"payload": 2, "traceparent": bad}])
        with pytest.raises(InvalidArgumentError, match=r"^items\[1\]: traceparent") as info:
            next(many)
        assert info.value.parameter == "traceparent"


def test_a_traced_enqueue_writes_its_send_span_a_child_of_the_current_span(
    traced: Spans,
) -> None:
    with traced.tracer.start_as_current_span("request") as request:
        job_id, (envelope,) = run_op(producer().enqueue(TOPIC, EnqueueItem(payload=1)))
    (send,) = traced.named(f"send {TOPIC}")
    assert envelope.traceparent == span_traceparent(send)
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert send.kind is SpanKind.PRODUCER
    assert dict(send.attributes or {}) == {
        "messaging.system": "wheelq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": TOPIC,
        "messaging.message.id": job_id,
    }


def test_enqueue_many_is_one_send_span_whose_context_every_job_carries_but_its_own(
    traced: Spans,
) -> None:
    items = [EnqueueItem(payload=n) for n in range(3)] + [EnqueueItem(payload=3, traceparent=GIVEN)]
    ids, envelopes = run_op(producer().enqueue_many(TOPIC, items))
    (send,) = traced.finished()
    assert [e.traceparent for e in envelopes] == [span_traceparent(send)] * 3 + [GIVEN]
    assert send.parent is None  # no current span: a root
    assert (send.attributes or {})["messaging.batch.message_count"] == len(ids) == 4


def test_a_given_traceparent_is_the_send_spans_parent_and_what_the_job_carries(
    traced: Spans,
) -> None:
    _, (envelope,) = run_op(producer().enqueue(TOPIC, EnqueueItem(payload=1, traceparent=GIVEN)))
    (send,) = traced.finished()
    assert envelope.traceparent == GIVEN
    given = parse_traceparent(GIVEN)
    assert given is not None and send.parent is not None
    assert (send.context.trace_id, send.parent.span_id) == given[:2]


def test_a_failed_enqueue_ends_its_span_with_the_error(traced: Spans) -> None:
    op = producer().enqueue(TOPIC, EnqueueItem(payload=1))
    next(op)
    with pytest.raises(ConnectionError):
        op.throw(ConnectionError("reset"))
    (send,) = traced.finished()
    assert send.status.status_code is StatusCode.ERROR
    assert [e.name for e in send.events] == ["exception"]


# --- the consumer ---------------------------------------------------------------------------


async def test_the_process_span_is_a_child_of_the_jobs_traceparent_and_linked_to_it(
    traced: Spans,
) -> None:
    runner = HandlerRunner(_async_noop, timeout_ms=0, threads=1, tracing=tracing.load(), group="g")
    assert await runner.run(job(GIVEN)) is None
    (process,) = traced.finished()
    given = parse_traceparent(GIVEN)
    assert given is not None and process.parent is not None
    assert (process.context.trace_id, process.parent.span_id) == given[:2]
    assert process.parent.is_remote
    assert [link.context.span_id for link in process.links] == [given[1]]
    assert process.kind is SpanKind.CONSUMER
    assert process.name == f"process {TOPIC}"
    assert dict(process.attributes or {}) == {
        "messaging.system": "wheelq",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": TOPIC,
        "messaging.destination.partition.id": "1",
        "messaging.message.id": "j1",
        "messaging.consumer.group.name": "g",
        "wheelq.job.attempt": 2,
        "wheelq.job.deliveries": 2,
        "wheelq.job.due_ms": 5,
        "wheelq.job.fired_ms": 7,
    }
    assert process.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("traceparent", [None, "", "garbled"])
async def test_a_job_without_a_valid_traceparent_gets_a_root_process_span(
    traceparent: str | None, traced: Spans
) -> None:
    runner = HandlerRunner(_async_noop, timeout_ms=0, threads=1, tracing=tracing.load())
    with traced.tracer.start_as_current_span("unrelated"):
        assert await runner.run(job(traceparent)) is None
    process = traced.named(f"process {TOPIC}")[0]
    assert (process.parent, list(process.links)) == (None, [])


@pytest.mark.parametrize("is_async", [True, False])
async def test_the_handlers_own_spans_are_children_of_the_process_span(
    is_async: bool, traced: Spans
) -> None:
    def handler(j: Job) -> None:
        with traced.tracer.start_as_current_span("inside"):
            raise ValueError("boom")

    async def async_handler(j: Job) -> None:
        handler(j)

    runner = HandlerRunner(
        async_handler if is_async else handler, timeout_ms=0, threads=1, tracing=tracing.load()
    )
    try:
        error = await runner.run(job(GIVEN))
    finally:
        runner.close()
    assert isinstance(error, ValueError)
    (inside,) = traced.named("inside")
    (process,) = traced.named(f"process {TOPIC}")
    assert inside.parent is not None and inside.parent.span_id == process.context.span_id
    assert process.status.status_code is StatusCode.ERROR
    assert process.status.description == "ValueError: boom"


async def test_an_async_handler_that_runs_over_ends_its_span_as_an_error(traced: Spans) -> None:
    async def slow(j: Job) -> None:
        await asyncio.Event().wait()

    runner = HandlerRunner(slow, timeout_ms=10, threads=1, tracing=tracing.load())
    assert isinstance(await runner.run(job(GIVEN)), HandlerTimeoutError)
    (process,) = traced.finished()
    assert process.status.status_code is StatusCode.ERROR
    assert "handler_timeout_ms" in (process.status.description or "")


async def _async_noop(j: Job) -> None:
    return None


# --- without the otel extra -------------------------------------------------------------------

WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if not installed: importing it raises ImportError
import wheelq
from wheelq.core.job import Envelope
from wheelq.runtime import tracing
from wheelq.producer.operations import Producer
from wheelq.worker.handler_runner import HandlerRunner

assert tracing.load() is None and tracing.inject() is None
p = Producer(wheelq.ClientSettings())
p._shards["t"] = 1
call = next(p.enqueue("t", wheelq.EnqueueItem(payload=1)))[0]
assert Envelope.unpack(call.args[-1]).traceparent == ""  # its only job's envelope, last
assert p.tracing is None
runner = HandlerRunner(lambda job: None, timeout_ms=0, threads=1)
assert runner._await is runner.handler and runner._call_fn == runner._call
print("ok")
"""


def test_without_opentelemetry_nothing_is_traced_and_nothing_fails() -> None:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WITHOUT_OTEL)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "ok\n", "")


def test_importing_wheelq_loads_no_tracing_until_a_role_is_made() -> None:
    # (redis-py imports opentelemetry itself when it is installed: the check is wheelq's)
    code = (
        "import wheelq; from wheelq.runtime import tracing; "
        "print(tracing._loaded is tracing._UNLOADED); wheelq.Client.from_url('redis://x'); "
        "print(type(tracing._loaded).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (out.returncode, out.stdout) == (0, "True\nTracing\n")


# --- the extra installed, no tracer provider set ---------------------------------------------


@pytest.fixture
def api_default(monkeypatch: pytest.MonkeyPatch) -> tracing.Tracing:
    """wheelq's tracing over the API's own default provider (it records nothing), with its
    spans made to fail the test: none may be opened."""
    loaded = tracing.Tracing()
    monkeypatch.setattr(tracing, "_loaded", loaded)

    def no_span(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a span was opened that nothing records")

    monkeypatch.setattr(loaded, "send", no_span)
    monkeypatch.setattr(loaded, "process", no_span)
    return loaded


def test_tracing_is_active_once_a_provider_that_records_is_given_or_set(
    api_default: tracing.Tracing, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    assert not api_default.active
    assert tracing.Tracing(TracerProvider()).active
    monkeypatch.setattr(trace, "get_tracer_provider", TracerProvider)  # set after the start
    monkeypatch.setattr(tracing, "RECHECK_S", 0.0)  # looked up again at once
    assert api_default.active


def test_with_no_provider_an_enqueue_opens_no_span_and_still_writes_the_traceparent(
    api_default: tracing.Tracing,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    p = producer()
    _, (plain,) = run_op(p.enqueue(TOPIC, EnqueueItem(payload=1)))
    _, (given,) = run_op(p.enqueue(TOPIC, EnqueueItem(payload=1, traceparent=GIVEN)))
    with TracerProvider().get_tracer("app").start_as_current_span("request") as request:
        _, (inside,) = run_op(p.enqueue(TOPIC, EnqueueItem(payload=1)))
        _, many = run_op(p.enqueue_many(TOPIC, [{"payload": 1}, {"payload": 2}]))
    current = span_traceparent(request)
    assert (plain.traceparent, given.traceparent, inside.traceparent) == ("", GIVEN, current)
    assert [e.traceparent for e in many] == [current, current]


async def test_with_no_provider_a_handler_runs_without_a_span(
    api_default: tracing.Tracing,
) -> None:
    ran: list[str] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)

    def sync_handler(job: Job) -> None:
        ran.append(job.id)

    for h in (handler, sync_handler):
        runner = HandlerRunner(h, timeout_ms=0, threads=1, tracing=tracing.load(), group="g")
        try:
            assert await runner.run(job(GIVEN)) is None
        finally:
            runner.close()
    assert ran == ["j1", "j1"]
