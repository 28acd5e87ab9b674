"""``GET /v1/topics/{t}/events``: a topic's job events as Server-Sent Events, resumable with
``Last-Event-ID`` (docs/architecture.md, "Job events"); ``POST .../events/on|off`` turns
them on or off.

Each stream reads with blocking reads on a pool of its own (`EventStreams`,
``pull_connections`` wide): on one server one read covers every shard (one connection a
stream, however many shards); on a cluster each shard is read on its own, on up to
``pull_connections`` connections, in turns. A stream that finds no room is 503 with
Retry-After, and streams never take the API's connections. A slow reader only slows itself:
it reads as it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from wheelq.admin import events as job_events
from wheelq.core.events import Event
from wheelq.errors import EventsOffError, UnknownTopicError
from wheelq.runtime.outage import wait_for_either
from wheelq.web import as_json
from wheelq.web.event_streams import EventStreams
from wheelq.web.models import EventsConfigModel, EventsOnIn, TopicPath
from wheelq.web.problems import RESPONSES
from wheelq.web.service import any_topic, json_response, service

router = APIRouter(prefix="/v1/topics", tags=["events"], responses=RESPONSES)

HEARTBEAT_S = 5.0
"""A comment line this often keeps proxies from closing a quiet stream."""
QUEUED = 100
"""Events read ahead of what the stream has sent."""
BLOCK_MS = 2000
"""One blocking read's block (a cluster's reads block less: `job_events.CLUSTER_BLOCK_MS`)."""
MAX_POSITION_CHARS = 8000
"""A position over HTTP (query or header; HTTP servers refuse much longer headers): enough for
a topic of about 300 shards (a position is some 16 to 25 characters a shard)."""
Since = Annotated[
    str,
    Query(
        max_length=MAX_POSITION_CHARS,
        description="now (default), start, or a position an event gave (its id); the "
        "Last-Event-ID header, when sent, takes its place",
    ),
]


def sse(event: Event) -> bytes:
    """One event as Server-Sent Events: its position as the id, its kind as the event."""
    data = json.dumps(as_json(event), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.position}\nevent: {event.kind}\ndata: {data}\n\n".encode()


@router.get(
    "/{topic}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "The events"}},
)
async def events(
    topic: TopicPath,
    request: Request,
    since: Since = "now",
    last_event_id: Annotated[str | None, Header(max_length=MAX_POSITION_CHARS)] = None,
) -> StreamingResponse:
    """The topic's job events as they happen (fired, started, succeeded, retrying, dead,
    cancelled, paused, resumed), as Server-Sent Events: each event's ``id`` is its position,
    so a client that reconnects with ``Last-Event-ID`` misses and repeats none the streams
    still hold. 404 for an unknown topic; 409 when the topic keeps no events; 422 for a bad
    position; 503 with Retry-After when the connections of event streams
    (``pull_connections``) are taken."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    shards = (await svc.admin.topics()).get(topic)
    if shards is None:
        raise UnknownTopicError(topic)
    if not (await svc.admin.events_config(topic)).enabled:
        raise EventsOffError(topic)
    start = last_event_id or since
    streams: EventStreams = svc.event_streams
    held = streams.reader(shards)
    executor, reads = await held.__aenter__()  # released by the pump once its reads ended
    events_of = job_events.follow(executor, topic, shards, start, BLOCK_MS, reads)
    first: asyncio.Task[Event] = asyncio.create_task(anext(events_of))
    await asyncio.wait([first], timeout=0.05)  # a bad position fails here: 422, not a stream
    if first.done() and first.exception() is not None:
        await events_of.aclose()
        await held.__aexit__(None, None, None)
        raise first.exception()  # type: ignore[misc]
    queue: asyncio.Queue[Event] = asyncio.Queue(QUEUED)
    pump = asyncio.create_task(_pump(events_of, first, queue, held))
    streams.pumps.add(pump)
    pump.add_done_callback(streams.pumps.discard)
    return StreamingResponse(
        _stream(queue, pump, streams),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get("/{topic}/events/config", response_model=EventsConfigModel)
async def events_config(topic: TopicPath, request: Request) -> Response:
    """The topic's job events setting: whether its jobs write events, and how many are kept
    for how long (off, with the defaults, for a topic that does not exist)."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    return json_response(as_json(await svc.admin.events_config(topic)))


@router.post("/{topic}/events/on", response_model=EventsConfigModel)
@any_topic
async def events_on(topic: TopicPath, request: Request, body: EventsOnIn | None = None) -> Response:
    """Turn the topic's job events on (the topic is created if new): from then on each shard
    keeps a stream of what happens to its jobs, about `max_len` events for at most
    `max_age_ms` (each left out keeps its value), which ``GET .../events`` follows. Answers
    the setting."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    now = await svc.admin.events_config(topic)
    max_len = None if body is None else body.max_len
    max_age_ms = None if body is None else body.max_age_ms
    config = await svc.admin.set_events(
        topic,
        True,
        max_len=now.max_len if max_len is None else max_len,
        max_age_ms=now.max_age_ms if max_age_ms is None else max_age_ms,
    )
    return json_response(as_json(config))


@router.post("/{topic}/events/off", response_model=EventsConfigModel)
async def events_off(topic: TopicPath, request: Request) -> Response:
    """Turn the topic's job events off: its jobs write no more (streams already open stay
    open, quiet; the events kept are trimmed with age). 404 for an unknown topic."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    if topic not in await svc.admin.topics():
        raise UnknownTopicError(topic)
    return json_response(as_json(await svc.admin.set_events(topic, False)))


async def _pump(
    events_of: AsyncIterator[Event],
    first: asyncio.Task[Event],
    queue: asyncio.Queue[Event],
    held: contextlib.AbstractAsyncContextManager[Any],
) -> None:
    """Read the events into `queue` (a slow client holds the reads back, nothing else);
    once cancelled, let the reads end and give their connections back."""
    try:
        await queue.put(await first)
        async for event in events_of:
            await queue.put(event)
    finally:
        if not first.done() and not first.cancelling():
            first.cancel()
        await asyncio.gather(first, return_exceptions=True)  # its reads end first
        with contextlib.suppress(BaseException):
            await events_of.aclose()  # type: ignore[attr-defined]
        await held.__aexit__(None, None, None)


async def _stream(
    queue: asyncio.Queue[Event], pump: asyncio.Task[None], streams: EventStreams
) -> AsyncIterator[bytes]:
    try:
        yield b": wheelq events\n\n"
        while not streams.closing.is_set():
            got = asyncio.ensure_future(queue.get())
            await wait_for_either(got, streams.closing, HEARTBEAT_S)
            if got.done():
                yield sse(got.result())
                continue
            got.cancel()
            if pump.done():  # the read failed (Redis away): end; the client reconnects
                break
            yield b": keep-alive\n\n"
    finally:
        if not pump.cancelling():  # it ends within a read's block: the response does not wait
            pump.cancel()
