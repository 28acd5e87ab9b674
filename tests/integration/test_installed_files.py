"""A running process never reads its installed files again: an upgrade in place (``pip
install`` into the venv of a running worker or service) removes them under it.

Each test runs the `wheelq` command from a copy of the package, removes the copy once the
process is up, then drives what used to read the disk on first use: a worker's retry (its
Lua script; the OSError was counted as "Redis unreachable", every other ack of the round
was held back for good and jobs that had succeeded ran again until dead-lettered), and the
console's pages and style sheet.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.support.cli import ROOT, start_wheelq, stop
from tests.support.http import get_page, get_status
from tests.support.servers import free_port
from tests.support.waiting import eventually, until
from wheelq import AsyncAdmin, AsyncClient, JobState

pytestmark = pytest.mark.cluster_too

SHARDS = 2
HOUR_MS = 3_600_000
HANDLERS = """
import json


async def handle(job):
    print(json.dumps({"job": job.id, "attempt": job.attempt}), flush=True)
    if job.payload == "flaky" and job.attempt == 1:
        raise RuntimeError("fails on its first attempt")
    return {"job": job.id, "attempt": job.attempt}
"""
WORKER_ENV = {
    "WHEELQ_WORKER_VISIBILITY_TIMEOUT_MS": "1000",  # a held-back ack shows as a second run
    "WHEELQ_WORKER_CLAIM_INTERVAL_MS": "100",
    "WHEELQ_WORKER_MAX_DELIVERIES": "3",
    "WHEELQ_WORKER_RETRY_BASE_MS": str(HOUR_MS),  # the test fires the retry itself
    "WHEELQ_WORKER_RETRY_JITTER_PCT": "0",
}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder holding a copy of the package (and the test's handlers): ``python -m
    wheelq`` run there imports the copy, which the test may remove."""
    folder = tmp_path / "site"
    shutil.copytree(ROOT / "wheelq", folder / "wheelq")
    (folder / "handlers.py").write_text(HANDLERS)
    return folder


async def state_of(client: AsyncClient, topic: str, job_id: str, state: JobState) -> None:
    async def check() -> bool:
        return (await client.get(topic, job_id)).state is state

    await eventually(check, timeout_s=20, what=f"{job_id} to be {state.value}")


async def test_a_worker_retries_and_acks_after_its_installed_files_are_removed(
    redis_url: str, client: AsyncClient, admin: AsyncAdmin, topic: str, site: Path
) -> None:
    proc = start_wheelq(
        "worker", "--redis-url", redis_url, "--topic", topic, "handlers:handle",
        cwd=site, env=WORKER_ENV,
    )  # fmt: skip
    try:
        first = await client.enqueue(topic, "first")
        await state_of(client, topic, first, JobState.SUCCEEDED)  # up, and has acked
        shutil.rmtree(site / "wheelq")  # an upgrade in place: the old files are gone

        flaky = await client.enqueue(topic, "flaky", max_attempts=3)
        plain = [await client.enqueue(topic, n) for n in range(5)]
        await state_of(client, topic, flaky, JobState.RETRYING)
        for job_id in plain:
            await state_of(client, topic, job_id, JobState.SUCCEEDED)
        await client.reschedule(topic, flaky, delay=0)
        assert await client.result(topic, flaky, timeout=20) == {"job": flaky, "attempt": 2}
        assert await admin.dead_letters(topic) == []
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0, err[-3000:]

    runs = Counter((line["job"], line["attempt"]) for line in map(json.loads, out.splitlines()))
    expected = {(job_id, 1): 1 for job_id in [first, flaky, *plain]} | {(flaky, 2): 1}
    assert runs == expected, "a job ran again: its ack was held back"
    assert "unreachable" not in err and "No such file" not in err, err[-3000:]


async def test_the_console_serves_every_page_after_its_installed_files_are_removed(
    redis_url: str, client: AsyncClient, topic: str, site: Path
) -> None:
    job_id = await client.enqueue(topic, {"n": 1}, delay=3600)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_wheelq(
        "serve", "--redis-url", redis_url, "--port", str(port), "--deliver", "none", cwd=site
    )
    try:
        await until(lambda: get_status(f"{base}/healthz") == 200, timeout_s=30, what="serve")
        assert get_page(f"{base}/ui")[0] == 200  # what a first render has read
        shutil.rmtree(site / "wheelq")  # an upgrade in place: the old files are gone

        for path in (
            "/ui",
            f"/ui/topics/{topic}",
            f"/ui/topics/{topic}/jobs/{job_id}",
            f"/ui/topics/{topic}/schedules",
            f"/ui/topics/{topic}/dead",
            "/ui/topics/no-such-topic",  # the error page
        ):
            status, kind, body = get_page(base + path)
            assert kind.startswith("text/html") and b"</html>" in body, (path, status, body)
            assert status == (404 if "no-such" in path else 200), (path, status, body[:500])
        status, kind, body = get_page(f"{base}/ui/static/style.css")
        assert (status, kind.split(";")[0]) == (200, "text/css") and body
    finally:
        _, err = stop(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
