"""``GET /v1/topics/{t}/events``: a topic's job events as Server-Sent Events, resumable with
``Last-Event-ID`` (docs/architecture.md, "Job events").

Each stream reads every shard with a blocking read on a pool of its own (`EventStreams`,
``pull_connections`` wide): one that finds no room is 503 with Retry-After, and streams never
take the API's connections. A slow reader only slows itself: it reads as it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from wheelq.core.events import Event
from wheelq.errors import UnknownTopicError
from wheelq.producer.async_client import AsyncClient
from wheelq.runtime.outage import wait_for_either
from wheelq.store.connect import BlockingReads
from wheelq.web import as_json
from wheelq.web.api_jobs import service
from wheelq.web.models import TopicPath
from wheelq.web.problems import RESPONSES, RETRY_AFTER_S, ProblemError

router = APIRouter(prefix="/v1/topics", tags=["events"], responses=RESPONSES)

HEARTBEAT_S = 15.0
"""A comment line this often keeps proxies from closing a quiet stream."""
QUEUED = 100
"""Events read ahead of what the stream has sent."""
Since = Annotated[
    str,
    Query(
        max_length=40_000,
        description="now (default), start, or a position an event gave (its id); the "
        "Last-Event-ID header, when sent, takes its place",
    ),
]


class EventStreams:
    """The service's event streams: blocking reads on a pool of their own; `close()` ends
    every stream."""

    def __init__(self, client: AsyncClient, connections: int) -> None:
        self._client = client
        self._reads = BlockingReads(client.executor, connections)
        self._reader: AsyncClient | None = None
        self.closing = asyncio.Event()

    @contextlib.asynccontextmanager
    async def reader(self, shards: int) -> AsyncIterator[AsyncClient]:
        """A client whose reads hold `shards` of the pool's connections (503: no room)."""
        async with self._reads.slots(shards, 0) as taken:
            if taken < shards:
                raise ProblemError(
                    503,
                    "unavailable",
                    "No connection free",
                    f"an event stream of this topic reads {shards} shards at once and only "
                    f"{self._reads.connections - self._reads.in_use} of the "
                    f"{self._reads.connections} connections of event streams are free "
                    "(pull_connections); try again later",
                    headers={"Retry-After": RETRY_AFTER_S},
                )
            if self._reader is None:
                self._reader = AsyncClient(self._reads.executor().client)
            yield self._reader

    def close(self) -> None:
        self.closing.set()

    async def aclose(self) -> None:
        await self._reads.aclose()


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
    last_event_id: Annotated[str | None, Header(max_length=40_000)] = None,
) -> StreamingResponse:
    """The topic's job events as they happen (fired, started, succeeded, retrying, dead,
    cancelled, paused, resumed), as Server-Sent Events: each event's ``id`` is its position,
    so a client that reconnects with ``Last-Event-ID`` misses and repeats none the streams
    still hold. 404 for an unknown topic; 409 when the topic keeps no events; 422 for a bad
    position; 503 with Retry-After when the connections of event streams
    (``pull_connections``) are taken."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    shards = (await svc.client.topics()).get(topic)
    if shards is None:
        raise UnknownTopicError(topic)
    if not (await svc.client.events_config(topic)).enabled:
        raise ProblemError(
            409,
            "events-off",
            "Events off",
            f"topic {topic!r} keeps no job events: turn them on first (client.set_events, or "
            f"`wheelq topics events {topic} --on`)",
            field="topic",
        )
    start = last_event_id or since
    streams: EventStreams = svc.event_streams
    held = streams.reader(shards)
    reader = await held.__aenter__()  # released when the stream ends, however it ends
    try:
        events_of = reader.events(topic, since=start)
        first = asyncio.ensure_future(anext(events_of))
        await asyncio.wait([first], timeout=0.05)  # a bad position fails here: 422, not a stream
        if first.done() and first.exception() is not None:
            raise first.exception()  # type: ignore[misc]
    except BaseException:
        await held.__aexit__(None, None, None)
        raise
    return StreamingResponse(
        _stream(events_of, first, streams, held),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(
    events_of: AsyncIterator[Event],
    first: asyncio.Future[Event],
    streams: EventStreams,
    held: contextlib.AbstractAsyncContextManager[Any],
) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[Event] = asyncio.Queue(QUEUED)

    async def read() -> None:
        await queue.put(await first)
        async for event in events_of:
            await queue.put(event)

    reading = asyncio.ensure_future(read())
    try:
        yield b": wheelq events\n\n"
        while not streams.closing.is_set():
            got = asyncio.ensure_future(queue.get())
            await wait_for_either(got, streams.closing, HEARTBEAT_S)
            if got.done():
                yield sse(got.result())
                continue
            got.cancel()
            if reading.done():  # the read failed (Redis away): end; the client reconnects
                break
            yield b": keep-alive\n\n"
    finally:
        reading.cancel()
        first.cancel()
        await asyncio.gather(reading, first, return_exceptions=True)
        with contextlib.suppress(BaseException):
            await events_of.aclose()  # type: ignore[attr-defined]
        await held.__aexit__(None, None, None)
