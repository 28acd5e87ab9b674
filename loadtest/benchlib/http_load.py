"""The HTTP side of `loadtest/http_service.py`, run as processes of their own so neither
shares the service's event loop or core budget with what it measures:

    python loadtest/benchlib/http_load.py flood URL TOPIC SECONDS CONNECTIONS BATCH
        POSTs enqueues as fast as CONNECTIONS connections allow for SECONDS (BATCH 0: one
        job a request; else BATCH jobs a batch request); prints {"jobs", "requests",
        "errors", "seconds"} as JSON.
    python loadtest/benchlib/http_load.py ahead URL TOPIC SECONDS RATE START_MS HOOK
        Enqueues SECONDS x RATE jobs in batch requests, due from START_MS (epoch ms) at
        RATE a second, each with the callback HOOK; prints {"sent", "errors"} as JSON.
    python loadtest/benchlib/http_load.py receive PORT OUT
        Answers callbacks 200 and records (due ms, arrival ms) of each; on SIGTERM writes
        them to OUT as JSON.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from typing import Any

import aiohttp


async def flood(url: str, topic: str, seconds: float, connections: int, batch: int) -> None:
    path = f"{url}/v1/topics/{topic}/jobs" + ("/batch" if batch else "")
    body: dict[str, Any] = (
        {"jobs": [{"payload": {"n": i}, "delay_ms": 3_600_000} for i in range(batch)]}
        if batch
        else {"payload": {"n": 1}, "delay_ms": 3_600_000}
    )
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    counts = {"requests": 0, "errors": 0}
    deadline = time.monotonic() + seconds

    async def one(http: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            async with http.post(path, data=data, headers=headers) as r:
                await r.read()
                counts["requests" if r.status in (200, 201) else "errors"] += 1

    connector = aiohttp.TCPConnector(limit=connections)
    started = time.monotonic()
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(*(one(http) for _ in range(connections)))
    took = time.monotonic() - started
    jobs = counts["requests"] * (batch or 1)
    print(json.dumps({**counts, "jobs": jobs, "seconds": took}))


async def ahead(url: str, topic: str, seconds: float, rate: int, start_ms: int, hook: str) -> None:
    path = f"{url}/v1/topics/{topic}/jobs/batch"
    total = int(seconds * rate)
    sent = errors = 0
    async with aiohttp.ClientSession() as http:
        for first in range(0, total, 1000):
            jobs = [
                {"payload": {"n": i}, "at": start_ms + i * 1000 // rate, "callback": {"url": hook}}
                for i in range(first, min(first + 1000, total))
            ]
            async with http.post(path, json={"jobs": jobs}) as r:
                body = await r.json()
                if r.status != 200:
                    errors += len(jobs)
                    continue
                for result in body["results"]:
                    sent += result["status"] == 201
                    errors += result["status"] != 201
    print(json.dumps({"sent": sent, "errors": errors}))


class _Receiver(asyncio.Protocol):
    """A minimal HTTP/1.1 server for the callbacks: it answers every request 200 and notes
    (due ms, arrival ms) of each. aiohttp's server cost the receiver most of a core at
    3,000 callbacks/s, on a machine whose two cores the service under test needs."""

    def __init__(self, got: list[tuple[int, float]]) -> None:
        self.got = got
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        arrived = time.time() * 1000
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            at = head.find(b"content-length:")
            line_end = head.find(b"\r\n", at)
            length = 0 if at < 0 else int(head[at + 15 : line_end if line_end > 0 else None])
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body, self.buffer = self.buffer[head_end + 4 : end], self.buffer[end:]
            self.got.append((int(json.loads(body)["due_ms"]), arrived))
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


async def receive(port: int, out: str) -> None:
    got: list[tuple[int, float]] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Receiver(got), "127.0.0.1", port)
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    print("ready", flush=True)
    await stopped.wait()
    server.close()
    with open(out, "w") as f:
        json.dump(got, f)


def main(argv: list[str]) -> None:
    try:
        from uvloop import run
    except ImportError:
        from asyncio import run
    mode, rest = argv[0], argv[1:]
    if mode == "flood":
        run(flood(rest[0], rest[1], float(rest[2]), int(rest[3]), int(rest[4])))
    elif mode == "ahead":
        url, topic, seconds, rate, start, hook = rest
        run(ahead(url, topic, float(seconds), int(rate), int(start), hook))
    else:
        run(receive(int(rest[0]), rest[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
