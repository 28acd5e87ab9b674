"""The process list in every face (docs/architecture.md, "Processes"): the library, the
HTTP API, the console and the CLI, on one server and a cluster; a process killed with
kill -9 leaves the list within its heartbeat's expiry, one stopped at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from tests.support.worker_proc import WorkerProcess
from wheelq import AsyncAdmin, Job, ProcessInfo, Scheduler, Worker
from wheelq.core.keys import PROCESS_RECORDS_KEY, PROCESSES_KEY
from wheelq.web.auth import Token

pytestmark = pytest.mark.cluster_too

SERIOUS = {"serious", "critical"}


async def noop(job: Job) -> None:
    return None


@pytest.fixture
async def admin(redis_url: str) -> AsyncIterator[AsyncAdmin]:
    found = AsyncAdmin.from_url(redis_url)
    try:
        yield found
    finally:
        await found.aclose()


async def of_topic(admin: AsyncAdmin, topic: str) -> list[ProcessInfo]:
    return [p for p in await admin.processes() if topic in p.topics]


async def test_a_node_and_a_worker_of_one_process_are_one_live_process(
    redis_url: str, admin: AsyncAdmin, topic: str
) -> None:
    worker = Worker.from_url(redis_url, topic, noop, group="billing", concurrency=7)
    node = Scheduler.from_url(redis_url, topic)
    await node.start()
    await worker.start()
    try:

        async def led() -> list[ProcessInfo]:
            found = await of_topic(admin, topic)
            return found if found and found[0].leads_total == 4 else []

        (info,) = await eventually(led, timeout_s=20, what="the process, leading 4 shards")
        assert info.id == worker.process_id == node.process_id
        assert info.role == "scheduler+worker" and info.pid == os.getpid()
        assert (info.topics, info.groups, info.concurrency) == ((topic,), ("billing",), 7)
        assert sorted(lead.shard for lead in info.leads) == [0, 1, 2, 3]
        ttl = node.settings.lease_ttl_ms
        assert all(0 <= lead.lease_age_ms < ttl for lead in info.leads)
        assert 0 <= info.beat_age_ms <= info.ttl_ms and info.ttl_ms == 3000
        assert info.version and info.started_ms <= info.last_beat_ms
    finally:
        await worker.stop()
        await node.stop()
    assert await of_topic(admin, topic) == []  # stopped: off the list at once


async def test_a_worker_counts_what_it_handled_and_failed(
    redis_url: str, admin: AsyncAdmin, topic: str
) -> None:
    async def handle(job: Job) -> None:
        if job.payload == "bad":
            raise ValueError("bad")

    worker = Worker.from_url(redis_url, topic, handle, max_deliveries=1, retry_base_ms=60_000)
    node = Scheduler.from_url(redis_url, topic)
    await node.start()
    await worker.start()
    try:
        from wheelq import AsyncClient

        client = AsyncClient.from_url(redis_url)
        try:
            for payload in ("ok", "ok", "bad"):
                await client.enqueue(topic, payload)
        finally:
            await client.aclose()

        async def counted() -> list[ProcessInfo]:
            found = await of_topic(admin, topic)
            return found if found and (found[0].handled, found[0].failed) == (2, 1) else []

        (info,) = await eventually(counted, timeout_s=20, what="2 handled, 1 failed")
        (role,) = [r for r in info.roles if r.role == "worker"]
        assert role.name == worker.consumer and role.in_flight == 0
    finally:
        await worker.stop()
        await node.stop()


async def test_a_process_killed_leaves_the_list_within_its_expiry(
    redis_url: str, admin: AsyncAdmin, topic: str, tmp_path: Path
) -> None:
    proc = WorkerProcess(redis_url, topic, "c1", tmp_path, {}, {})
    try:

        async def listed() -> list[ProcessInfo]:
            return [p for p in await of_topic(admin, topic) if p.pid == proc.pid]

        (info,) = await eventually(listed, timeout_s=30, what="the worker process listed")
        assert info.role == "worker"
        proc.signal(signal.SIGKILL)
        killed = time.monotonic()
        proc.proc.wait(timeout=10)

        async def gone() -> bool:
            return not await listed()

        await eventually(gone, timeout_s=info.ttl_ms / 1000 + 2, what="the killed process gone")
        # It was gone no later than its record's expiry: its last beat, plus the ttl.
        assert time.monotonic() - killed <= info.ttl_ms / 1000 + 2
    finally:
        proc.finish()


async def test_records_that_are_not_ones_are_skipped_and_expired_ones_not_listed(
    redis_url: str, admin: AsyncAdmin, redis_async: Any, topic: str
) -> None:
    bad_id, stale_id = f"bad-{topic}", f"stale-{topic}"
    await redis_async.zadd(PROCESSES_KEY, {bad_id: 2**52, stale_id: 1})
    await redis_async.hset(PROCESS_RECORDS_KEY, mapping={bad_id: b"\xc1", stale_id: b"\xc1"})
    worker = Worker.from_url(redis_url, topic, noop)
    await worker.start()
    try:
        found = await eventually(
            lambda: of_topic(admin, topic), timeout_s=20, what="the worker listed"
        )
        assert len(found) == 1
        assert bad_id not in {p.id for p in await admin.processes()}
        # The beat removed the expired record (one with the far expiry stays, unread).
        assert await redis_async.zscore(PROCESSES_KEY, stale_id) is None
        assert await redis_async.hexists(PROCESS_RECORDS_KEY, stale_id) == 0
    finally:
        await worker.stop()
        await redis_async.zrem(PROCESSES_KEY, bad_id)
        await redis_async.hdel(PROCESS_RECORDS_KEY, bad_id)


# --- HTTP, the console, the CLI --------------------------------------------------------------


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def test_the_api_lists_processes_as_the_library_does(
    api: Served, admin: AsyncAdmin, redis_url: str, topic: str
) -> None:
    worker = Worker.from_url(redis_url, topic, noop, group="g")
    await worker.start()
    try:
        (info,) = await eventually(
            lambda: of_topic(admin, topic), timeout_s=20, what="the worker listed"
        )
        status, body, _ = await api.call("GET", "/v1/processes?junk=1&limit=-5")
        assert status == 200
        (mine,) = [p for p in body["processes"] if p["id"] == info.id]
        # The service runs in this loop, to this server: one process, two roles.
        assert sorted(r["role"] for r in mine["roles"]) == ["service", "worker"]
        (worker_role,) = [r for r in mine["roles"] if r["role"] == "worker"]
        assert worker_role["topics"] == [topic] and worker_role["groups"] == ["g"]
        assert set(mine) >= {"host", "pid", "version", "started_ms", "beat_age_ms", "ttl_ms"}
    finally:
        await worker.stop()


async def test_a_token_limited_to_some_topics_sees_only_processes_of_those(
    redis_url: str, topic: str
) -> None:
    tokens = (Token("a" * 20, "read", (topic,)), Token("b" * 20, "read", ("elsewhere-*",)))
    async with serving(redis_url, tokens=tokens) as api:
        worker = Worker.from_url(redis_url, topic, noop)
        await worker.start()
        try:

            async def seen(secret: str) -> set[str]:
                headers = {"Authorization": f"Bearer {secret}"}
                status, body, _ = await api.call("GET", "/v1/processes", headers=headers)
                assert status == 200
                return {t for p in body["processes"] for r in p["roles"] for t in r["topics"]}

            await eventually(
                lambda: _truthy(seen("a" * 20), topic), timeout_s=20, what="the worker seen"
            )
            assert topic not in await seen("b" * 20)
            status, _, _ = await api.call("GET", "/v1/processes")
            assert status == 401
        finally:
            await worker.stop()


async def _truthy(found: Any, topic: str) -> bool:
    return topic in await found


async def test_the_console_page_lists_processes_without_javascript_and_passes_axe(
    api: Served, admin: AsyncAdmin, browser: Any, redis_url: str, topic: str
) -> None:
    worker = Worker.from_url(redis_url, topic, noop, group="g")
    node = Scheduler.from_url(redis_url, topic)
    await node.start()
    await worker.start()
    axe = pytest.importorskip("axe_playwright_python.async_playwright").Axe()
    try:

        async def led() -> list[ProcessInfo]:
            found = await of_topic(admin, topic)
            return found if found and found[0].leads_total == 4 else []

        (info,) = await eventually(led, timeout_s=20, what="the process, leading 4 shards")
        bad: dict[str, list[str]] = {}
        for scheme in ("light", "dark"):
            context = await browser.new_context(color_scheme=scheme, java_script_enabled=False)
            try:
                page = await context.new_page()
                await page.goto(api.base + "/ui")
                await page.get_by_role("link", name="processes", exact=True).click()
                await page.wait_for_url("**/ui/processes")
                row = page.locator(f'tr[data-id="{info.id}"]')
                text = await row.inner_text()
                assert "scheduler+worker" in text and topic in text and "4 shards" in text
                await row.get_by_text("4 shards").click()  # <details>: no script needed
                assert f"{topic}/0: lease" in await row.inner_text()
                await context.close()
                context = await browser.new_context(color_scheme=scheme)
                page = await context.new_page()
                await page.goto(api.base + "/ui/processes")
                results = await axe.run(page)
                found = [
                    f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}"
                    for v in results.response["violations"]
                    if v["impact"] in SERIOUS
                ]
                if found:
                    bad[scheme] = found
            finally:
                await context.close()
        assert not bad, bad
        status, body, _ = await api.call("GET", "/ui/processes?refresh=1")
        assert status == 422 and "refresh" in body  # a bad value is a page, never a 500
    finally:
        await worker.stop()
        await node.stop()


async def test_wheelq_ps_lists_the_process_as_a_table_and_as_json(
    redis_url: str, admin: AsyncAdmin, topic: str
) -> None:
    worker = Worker.from_url(redis_url, topic, noop, group="g", concurrency=3)
    await worker.start()
    try:
        (info,) = await eventually(
            lambda: of_topic(admin, topic), timeout_s=20, what="the worker listed"
        )
        done = await asyncio.to_thread(
            run_wheelq, "ps", "--json", "--topic", topic, "--redis-url", redis_url
        )
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()
        found = json.loads(line)
        assert found["id"] == info.id and found["roles"][0]["concurrency"] == 3
        table = await asyncio.to_thread(
            run_wheelq, "ps", "--topic", topic, "--redis-url", redis_url
        )
        assert table.returncode == 0, table.stderr
        head, row = table.stdout.splitlines()
        assert head.split()[:3] == ["PROCESS", "ROLE", "TOPICS"]
        assert row.split()[:5] == [f"{info.host}:{info.pid}", "worker", topic, "g", "3"]
        top = await asyncio.to_thread(
            run_wheelq, "top", "--once", "--interval", "0.1", "--redis-url", redis_url
        )
        assert top.returncode == 0, top.stderr
        assert "worker" in top.stdout and "(wheelq ps)" in top.stdout
    finally:
        await worker.stop()
    none = run_wheelq("ps", "--topic", topic, "--redis-url", redis_url)
    assert none.returncode == 0 and none.stdout == "" and "no processes" in none.stderr
