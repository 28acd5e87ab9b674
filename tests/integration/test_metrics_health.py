"""``/healthz`` and ``/readyz`` beside ``/metrics`` (`MetricsServer`): what a container's
liveness and readiness probes ask of a scheduler node, a worker and a relay-less process.
Live while the process serves; ready only between the end of a start that worked and the
beginning of a stop, and only while Redis answers PING through the role's own connection
(cut here with a TCP proxy)."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from urllib.parse import urlsplit

import wheelq
from tests.support.http import request
from tests.support.waiting import eventually, until
from wheelq.metrics import MetricsServer
from wheelq.metrics.server import READY_PING_S
from wheelq.testing.proxy import CuttingProxy

FAST = {"preload_interval_ms": 100, "check_interval_ms": 100, "lease_ttl_ms": 2000}


async def _get(port: int, path: str, method: str = "GET") -> tuple[int, object]:
    return await asyncio.to_thread(request, method, f"http://127.0.0.1:{port}{path}")


async def _ready_is(port: int, status: int) -> None:
    async def check() -> bool:
        return (await _get(port, "/readyz"))[0] == status

    await eventually(check, timeout_s=10, what=f"/readyz answering {status}")


async def test_a_node_is_ready_from_its_start_to_its_stop_and_while_redis_answers(
    redis_url: str, topic: str
) -> None:
    async with CuttingProxy(urlsplit(redis_url).port or 0) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        node = wheelq.Scheduler.from_url(url, [topic], **FAST)
        async with MetricsServer(node, port=0, host="127.0.0.1") as metrics:
            # Serving before the node starts (as `wheelq scheduler` runs them): live, not ready.
            assert await _get(metrics.port, "/healthz") == (200, {"status": "ok"})
            status, body = await _get(metrics.port, "/readyz")
            assert status == 503 and "not started" in body["detail"], body  # type: ignore[index]
            await node.start()
            try:
                assert await _get(metrics.port, "/readyz") == (200, {"status": "ready"})
                # the metrics are still served on every other path
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics") as r:
                    assert b"wheelq_part_up" in r.read()
                # Redis away: not ready, and why; still live.
                proxy.refusing = True
                proxy.cut()
                status, body = await _get(metrics.port, "/readyz")
                assert status == 503, body
                assert "PING" in body["detail"], body  # type: ignore[index]
                assert (await _get(metrics.port, "/healthz"))[0] == 200
                proxy.refusing = False
                await _ready_is(metrics.port, 200)
            finally:
                stopping = asyncio.ensure_future(node.stop())
            await stopping
            status, body = await _get(metrics.port, "/readyz")
            assert status == 503 and "stopping" in body["detail"], body  # type: ignore[index]


async def test_a_worker_stopping_is_not_ready_and_probes_take_only_get(
    redis_url: str, topic: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def handler(job: wheelq.Job) -> None:
        started.set()
        await release.wait()

    async with wheelq.AsyncClient.from_url(redis_url) as client:
        worker = wheelq.Worker.from_url(redis_url, topic, handler, shutdown_grace_ms=10_000)
        async with worker, MetricsServer(worker, port=0, host="127.0.0.1") as metrics:
            assert await _get(metrics.port, "/readyz") == (200, {"status": "ready"})
            assert (await _get(metrics.port, "/readyz", "POST"))[0] == 405
            assert (await _get(metrics.port, "/healthz", "DELETE"))[0] == 405
            await client.enqueue(topic, {"n": 1})
            await until(started.is_set, timeout_s=10, what="a handler running")
            stopping = asyncio.ensure_future(worker.stop())
            # While its handler finishes within the grace, the worker is not ready.
            await _ready_is(metrics.port, 503)
            assert not stopping.done()
            release.set()
            await stopping


async def test_clients_are_ready_while_redis_answers_through_their_own_connection(
    redis_url: str,
) -> None:
    """A producer's process serving metrics (a Client or an AsyncClient: no start, no stop)
    is ready exactly while its own connection reaches Redis."""
    async with CuttingProxy(urlsplit(redis_url).port or 0) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        async with wheelq.AsyncClient.from_url(url) as async_client:
            with wheelq.Client.from_url(url) as client:
                for role in (client, async_client):
                    async with MetricsServer(role, port=0, host="127.0.0.1") as metrics:
                        assert await _get(metrics.port, "/readyz") == (200, {"status": "ready"})
                        proxy.refusing = True
                        proxy.cut()
                        status, body = await _get(metrics.port, "/readyz")
                        assert status == 503, body
                        assert "PING" in body["detail"], body  # type: ignore[index]
                        proxy.refusing = False


async def test_a_client_hung_on_redis_answers_every_probe_within_the_ping_bound(
    redis_url: str,
) -> None:
    """A Client's PING blocks the thread it runs on, as long as redis-py's socket timeout
    (seconds, or for ever): with Redis hung (the proxy holds every byte, the connection
    open), a flood of probes is answered 503 within `READY_PING_S`, through one PING."""
    async with CuttingProxy(urlsplit(redis_url).port or 0) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        with wheelq.Client.from_url(url) as client:
            async with MetricsServer(client, port=0, host="127.0.0.1") as metrics:
                assert await _get(metrics.port, "/readyz") == (200, {"status": "ready"})
                proxy.stall()

                def probe() -> tuple[int, object, float]:  # timed on its own thread
                    started = time.monotonic()
                    status, body = request("GET", f"http://127.0.0.1:{metrics.port}/readyz")
                    return status, body, time.monotonic() - started

                answers = await asyncio.gather(*[asyncio.to_thread(probe) for _ in range(20)])
                pinging = [t for t in threading.enumerate() if t.name.startswith("wheelq-readyz")]
                for status, body, waited in answers:
                    assert status == 503, body
                    assert f"no answer within {READY_PING_S:g} s" in body["detail"], body  # type: ignore[index]
                    assert waited < 2 * READY_PING_S, (
                        waited
                    )  # not the socket's timeout, or for ever
                assert len(pinging) == 1  # one PING waits; the probes wait for it
                proxy.unstall()
                await _ready_is(metrics.port, 200)
