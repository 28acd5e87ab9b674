"""The dashboard's charts on a real server: from the service's own samples (what they show
after jobs fire, and since when), and from a real Prometheus (Debian's) scraping a
scheduler node's and a worker's metrics; a Prometheus that does not answer leaves the
charts empty, saying so, and the page still renders."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.clients import admin_of
from tests.support.servers import free_port
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq import AsyncAdmin, AsyncClient, Job, Scheduler, Worker
from wheelq.core.clock import ManualClock
from wheelq.metrics import MetricsServer
from wheelq.web.charts import Chart
from wheelq.web.samples import TOPICS_PER_STEP, Sampler

SCRAPE_S = 1


def latest(html: str, chart: str) -> dict[str, str]:
    """A chart's description (what a screen reader is told) as {series: latest value}."""
    found = re.search(rf'<desc id="chart-{chart}-desc">latest: ([^<]*)</desc>', html)
    if found is None:
        return {}
    return dict(part.rsplit(" ", 1) for part in found[1].split(", "))


async def page(api: Served, path: str) -> tuple[int, str]:
    async with api.http.get(api.base + path) as r:
        return r.status, await r.text()


async def test_the_pages_chart_the_service_s_own_samples(redis_url: str, topic: str) -> None:
    async with serving(redis_url) as api:
        client, sampler = api.service.client, api.service.sampler
        assert sampler is not None
        await admin_of(client).create_topic(topic, 4)
        _, before = await page(api, f"/ui/topics/{topic}")
        assert "none yet" in before and latest(before, "throughput") == {}  # nothing sampled
        await client.enqueue_many(
            topic, [{"payload": i, "delay": timedelta(hours=1)} for i in range(7)]
        )
        await sampler.take({topic: 4}, api.service.clock.now_ms())
        await client.enqueue_many(topic, [{"payload": i} for i in range(50)])  # due now: fired
        await asyncio.sleep(1.1)  # samples a second apart at least: a rate needs a span
        await sampler.take({topic: 4}, api.service.clock.now_ms())
        status, html = await page(api, f"/ui/topics/{topic}?range=15m")
        assert status == 200
        assert html.count('<svg class="chart"') == 3
        assert float(latest(html, "throughput")["fired/s"]) > 0
        assert latest(html, "backlog")["pending"] == "7"
        assert latest(html, "backlog")["ready"] == "50"  # no group yet: all of them
        assert "own samples" in html and "since" in html
        status, overview = await page(api, "/ui?range=6h")
        assert status == 200 and float(latest(overview, "throughput")["fired/s"]) > 0
        assert (await page(api, f"/ui/topics/{topic}?range=2d"))[0] == 422


def values(charts: list[Chart], key: str, label: str) -> list[float | None]:
    (chart,) = [c for c in charts if c.key == key]
    (found,) = [s for s in chart.series if s.label == label]
    return [v for _, v in found.points]


async def test_a_steady_topic_is_flat_on_the_list_while_topics_take_turns(
    redis_url: str, topic: str
) -> None:
    # Issue 43 item 9: the list summed only the topics sampled at each moment, so a busy
    # topic sampled in one round dropped to zero at the next round's points.
    names = {f"{topic}-{n}": 1 for n in range(TOPICS_PER_STEP + 2)}  # two rounds' worth
    busy = min(names)  # sampled in the first round
    clock = ManualClock(1_800_000_000_000)
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        for name in names:
            await admin.create_topic(name, 1)
        later = [{"payload": i, "delay": timedelta(hours=1)} for i in range(45)]
        await client.enqueue_many(busy, later)

        async def topics() -> dict[str, int]:
            return names

        sampler = Sampler(client.executor, topics, clock)
        start_ms = clock.now_ms()
        for _ in range(12):  # 13 jobs/s fired, steadily, as the sampler's clock runs
            wait_s = await sampler.step()
            clock.advance(int(wait_s * 1000))
            await client.enqueue_many(busy, [{"payload": 0}] * round(13 * wait_s))
        listed = await sampler.charts(None, start_ms, clock.now_ms())
        own = await sampler.charts(busy, start_ms, clock.now_ms())
    rounds = {s.at_ms for h in sampler.histories.values() for s in h.fine}
    assert len(values(listed, "backlog", "pending")) == len(rounds) > 2
    assert set(values(listed, "backlog", "pending")) == {45.0}
    for charts in (listed, own):  # a rate once every topic has a second sample, never a 0
        fired = values(charts, "throughput", "fired/s")
        first = fired.index(13.0)
        assert first <= 3 and set(fired[first:]) == {13.0}, fired
        assert fired[:first] == [None] * first, fired


# --- from Prometheus ---------------------------------------------------------------------


@contextlib.contextmanager
def prometheus(tmp_path: Path, targets: list[str]) -> Iterator[str]:
    """Debian's Prometheus scraping `targets` every second; its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus on PATH (Debian: apt-get install prometheus)")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    listed = ", ".join(f"'{t}'" for t in targets)
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
        f"scrape_configs:\n  - job_name: wheelq\n    static_configs:\n      - targets: [{listed}]\n"
    )
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def series_count(url: str, query: str) -> int:
    """How many points Prometheus has of `query` over the last minute."""
    async with aiohttp.ClientSession() as http:
        try:
            async with http.get(f"{url}/api/v1/query", params={"query": query}) as r:
                if r.status != 200:  # 503 while it starts (loading its storage): not yet
                    return 0
                body: Any = await r.json(content_type=None)
        except aiohttp.ClientError:
            return 0
    result = body.get("data", {}).get("result", [])
    return len(result[0]["values"]) if result else 0


@pytest.fixture
async def roles(redis_url: str, topic: str) -> AsyncIterator[list[str]]:
    """A scheduler node and a worker of `topic`, each with its metrics; their targets."""

    async def handle(job: Job) -> None:
        return None

    node = Scheduler.from_url(redis_url, [topic])
    worker = Worker.from_url(redis_url, topic, handle)
    async with (
        node,
        worker,
        MetricsServer(node, port=0, host="127.0.0.1") as node_metrics,
        MetricsServer(worker, port=0, host="127.0.0.1") as worker_metrics,
    ):
        yield [
            m.url.removeprefix("http://").removesuffix("/metrics")
            for m in (node_metrics, worker_metrics)
        ]


async def test_with_prometheus_the_charts_show_the_roles_metrics(
    redis_url: str, topic: str, roles: list[str], tmp_path: Path
) -> None:
    with prometheus(tmp_path, roles) as url:
        async with serving(redis_url, prometheus_url=url) as api:
            client = api.service.client
            fired = f'wheelq_scheduler_fired_total{{topic="{topic}"}}[1m]'

            async def trickle() -> bool:  # jobs due a moment ahead, fired on time by the node
                await client.enqueue_many(
                    topic, [{"payload": i, "delay": timedelta(milliseconds=200)} for i in range(20)]
                )
                return await series_count(url, fired) >= 6

            await eventually(trickle, timeout_s=60, what="six scrapes of fired jobs")
            status, html = await page(api, f"/ui/topics/{topic}?range=15m")
            assert status == 200, html[:400]
            assert "from Prometheus" in html
            assert float(latest(html, "throughput")["fired/s"]) > 0
            assert float(latest(html, "throughput")["handled/s"]) > 0
            assert float(latest(html, "lateness")["fire p99"]) >= 0
            assert "pending" in latest(html, "backlog")


async def test_a_prometheus_that_does_not_answer_leaves_the_charts_empty_saying_why(
    redis_url: str, topic: str
) -> None:
    async with serving(redis_url, prometheus_url=f"http://127.0.0.1:{free_port()}") as api:
        await api.service.admin.create_topic(topic, 1)
        status, html = await page(api, f"/ui/topics/{topic}")
        assert status == 200
        assert html.count('<svg class="chart"') == 3
        assert "Prometheus did not answer" in html
