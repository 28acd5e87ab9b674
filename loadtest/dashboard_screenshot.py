"""Full-page shots of the dashboard's topic page and topic list, charts included, over
realistic data (docs/img/dashboard.png, docs/img/dashboard-overview.png).

    python loadtest/dashboard_screenshot.py
    python loadtest/dashboard_screenshot.py --out-dir /tmp --chromium /usr/bin/chromium

It starts an embedded server, two scheduler nodes (so the shards have leaders), the HTTP
service on uvicorn and a worker; makes three topics with jobs pending for later, jobs
fired and acked by a pull consumer, a few left in flight, and dead letters with real
handler errors; views the topic page once (the rates compare against that view), lets a
steady trickle of jobs fire for half a minute while the service samples its topics (every
2 s here, faster than its 15 s, to fill the charts' 15 minutes in that time), and saves
both pages as Chromium shows them.
It needs Chromium (``--chromium``, ``WHEELQ_CHROMIUM``, or ``chromium`` on PATH) and
playwright's Python package (no playwright browser download).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn

from wheelq import AsyncAdmin, AsyncClient, Fail, Job, Scheduler, Worker
from wheelq.testing import EmbeddedServer
from wheelq.web.app import create_app
from wheelq.web.service import WebService

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "orders"
TRICKLE_S = 30.0
SAMPLE_S = 2.0


async def until(check: Any, what: str, timeout_s: float = 30) -> None:
    """Poll the coroutine function `check` until it returns true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        if loop.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def fired_at_least(client: AsyncClient, topic: str, n: int) -> bool:
    stats = await AsyncAdmin.of(client).stats(topic)
    return stats is not None and stats.in_stream >= n


async def make_data(client: AsyncClient, svc: WebService) -> None:
    rng = random.Random(7)
    later = [
        {"job_id": f"ord-{i:05d}", "payload": _order(rng, i), "delay": rng.uniform(600, 7200)}
        for i in range(1500)
    ]
    await client.enqueue_many(TOPIC, later)
    now = [{"job_id": f"ord-n{i:04d}", "payload": _order(rng, i), "delay": 0} for i in range(240)]
    await client.enqueue_many(TOPIC, now)
    await until(lambda: fired_at_least(client, TOPIC, 240), "the due orders to fire")
    # billing acks what it pulls; audit keeps a few in flight (a slow consumer).
    for group, keep in (("billing", 0), ("audit", 9)):
        pulled = await _pull(svc, group, 240 if keep == 0 else 60)
        receipts = [p.receipt for p in pulled[keep:]]
        if receipts:
            await svc.puller.ack(TOPIC, group, receipts)
    mails = [
        {"job_id": f"mail-{i:03d}", "payload": {"to": f"user{i}@example.com"}, "max_attempts": 1}
        for i in range(40)
    ]
    await client.enqueue_many("emails", mails)
    await client.enqueue_many(
        "emails", [{"payload": {"digest": i}, "delay": 3600 + i * 60} for i in range(120)]
    )
    await client.enqueue_many(
        "reports", [{"payload": {"day": d}, "delay": 86400} for d in range(7)]
    )
    failed = [
        {"job_id": f"ord-x{i}", "payload": _order(rng, 9000 + i), "max_attempts": 1}
        for i in range(6)
    ]
    await client.enqueue_many(TOPIC, failed)


def _order(rng: random.Random, i: int) -> dict[str, Any]:
    return {"order": 10_000 + i, "sku": f"SKU-{rng.randint(100, 999)}", "qty": rng.randint(1, 5)}


async def _pull(svc: WebService, group: str, n: int) -> list[Any]:
    await svc.admin.create_group(TOPIC, group)  # a pull never creates its group
    out: list[Any] = []
    while len(out) < n:
        got = (await svc.puller.pull(TOPIC, group, f"{group}-1", min(100, n - len(out)), 500)).jobs
        if not got:
            break
        out += got
    return out


async def failing(job: Job) -> None:
    """The worker of group "fulfilment": orders x* and some mails fail for good."""
    if job.id.startswith("ord-x"):
        raise Fail(f"ValueError: SKU {job.payload['sku']} is discontinued\n  at reserve()")
    if job.topic == "emails" and job.id.endswith(("3", "7")):
        raise Fail("SMTPRecipientsRefused: 550 5.1.1 mailbox unavailable")


async def trickle(client: AsyncClient, svc: WebService, seconds: float) -> None:
    """A stream of orders due over `seconds`, rising then falling, so the page has a fire
    rate and its charts a shape; the service samples its topics every `SAMPLE_S`."""
    n = int(seconds * 40)
    jobs = [{"payload": {"order": i}, "delay": seconds * (i / n) ** 0.7} for i in range(n)]
    await client.enqueue_many(TOPIC, jobs)
    assert svc.sampler is not None
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await svc.sampler.take(await AsyncAdmin.of(client).topics(), svc.clock.now_ms())
        await asyncio.sleep(SAMPLE_S)  # the sampling interval of this shot


async def shoot(url: str, out_dir: Path, chromium: str) -> None:
    from playwright.async_api import async_playwright

    client = AsyncClient.from_url(url)
    admin = AsyncAdmin.of(client)
    svc = WebService(AsyncClient.from_url(url))
    svc.owns_client = True
    server = uvicorn.Server(
        uvicorn.Config(create_app(svc), host="127.0.0.1", port=0, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    nodes = [Scheduler.from_url(url, node_id=f"sched-{n}.prod:7411") for n in ("a", "b")]
    workers = [
        Worker.from_url(url, topic, failing, group="fulfilment") for topic in (TOPIC, "emails")
    ]
    try:
        for topic, shards in ((TOPIC, 4), ("emails", 2), ("reports", 1)):
            await admin.create_topic(topic, shards)  # before the workers make them
        for part in (*nodes, *workers):
            await part.start()

        async def started() -> bool:
            if serving.done():
                serving.result()  # raises why it did not start
            return bool(server.started)

        await until(started, "uvicorn")
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        await make_data(client, svc)
        shots = {
            out_dir / "dashboard.png": f"{base}/ui/topics/{TOPIC}?range=15m",
            out_dir / "dashboard-overview.png": f"{base}/ui?range=15m",
        }
        async with aiohttp.ClientSession() as http:
            for page_url in shots.values():
                async with http.get(page_url) as first:
                    first.raise_for_status()  # the view the rates compare against
        await trickle(client, svc, TRICKLE_S)
        async with async_playwright() as p:
            browser = await p.chromium.launch(
                executable_path=chromium, headless=True, args=["--no-sandbox"]
            )
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            for out, page_url in shots.items():
                await page.goto(page_url)
                await page.screenshot(path=str(out), full_page=True)
                print(f"{out}: {out.stat().st_size:,} bytes")
            await browser.close()
    finally:
        for part in workers:
            await part.stop()
        for node in nodes:
            await node.stop()
        server.should_exit = True
        await serving
        await client.aclose()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "img")
    p.add_argument("--chromium", default=os.environ.get("WHEELQ_CHROMIUM"))
    args = p.parse_args()
    chromium = args.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no Chromium found: pass --chromium or set WHEELQ_CHROMIUM", file=sys.stderr)
        return 2
    with EmbeddedServer(appendonly=True) as server:
        asyncio.run(shoot(server.url, args.out_dir, chromium))
    return 0


if __name__ == "__main__":
    sys.exit(main())
