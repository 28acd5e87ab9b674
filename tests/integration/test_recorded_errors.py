"""A failed attempt's error as each interface says it, on a real server with a real worker:
one line where an operator reads (the exception's type and message, or the message of a
`Retry` or `Fail` raised on purpose, never a module path), and whole, with its traceback,
where a developer looks (the library, and a separate ``*_detail`` field over HTTP)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.cli import run_wheelq
from tests.support.clients import admin_of
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq import AsyncClient, Fail, Job, JobInfo, JobState, Worker

FAST: dict[str, Any] = {"retry_base_ms": 3_600_000, "retry_jitter_pct": 0, "claim_interval_ms": 100}


class PaymentDeclinedError(Exception):
    """A handler's own exception, defined in a module of its own."""


class Refused(Fail):
    """A `Fail` subclass defined outside wheelq (as the callback deliverer's own are)."""


async def handler(job: Job) -> None:
    if job.payload == "decline":
        raise PaymentDeclinedError(f"card declined on attempt {job.attempt}")
    raise Refused("https://hooks.example/run answered HTTP 410: subscription removed")


@pytest.fixture
async def api(redis_url: str, topic: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        await served.service.admin.create_topic(topic, 1)
        worker = Worker.from_url(redis_url, topic, handler, **FAST)
        async with worker:
            yield served


async def state_of(client: AsyncClient, topic: str, job_id: str, state: JobState) -> JobInfo:
    async def check() -> JobInfo | None:
        info = await client.get(topic, job_id)
        return info if info.state is state else None

    return await eventually(check, timeout_s=15, what=f"{job_id} to be {state}")


async def test_a_handlers_exception_is_one_line_and_its_traceback_is_kept_apart(
    api: Served, topic: str, redis_url: str
) -> None:
    client = api.service.client
    admin = admin_of(client)
    job_id = await client.enqueue(topic, "decline", max_attempts=2)
    retrying = await state_of(client, topic, job_id, JobState.RETRYING)
    line = "PaymentDeclinedError: card declined on attempt 1"
    assert retrying.last_error is not None  # the library keeps it whole
    assert retrying.last_error.startswith(line + "\nTraceback") and __file__ in retrying.last_error

    status, body, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{job_id}")
    assert status == 200
    assert body["last_error"] == line  # was the whole traceback, server paths and all
    assert body["last_error_detail"] == retrying.last_error
    (group,) = body["groups"]
    assert (group["error"], group["error_detail"]) == (line, retrying.last_error)

    shown = await asyncio.to_thread(run_wheelq, "job", topic, job_id, "--redis-url", redis_url)
    (row,) = [row for row in shown.stdout.splitlines() if row.startswith("last error")]
    assert row.removeprefix("last error").strip() == line  # not the traceback's last line

    await client.reschedule(topic, job_id, delay=0)
    dead = await state_of(client, topic, job_id, JobState.DEAD)
    (letter,) = await admin.dead_letters(topic)
    assert letter.error == dead.last_error and "Traceback" in letter.error
    status, body, _ = await api.call("GET", f"/v1/topics/{topic}/dead")
    (shown_letter,) = body["dead"]
    assert (
        shown_letter["error"] == "attempt 2 of 2: PaymentDeclinedError: card declined on attempt 2"
    )
    assert shown_letter["error_detail"] == letter.error


async def test_a_fail_raised_on_purpose_is_its_message_without_a_class_path(
    api: Served, topic: str, redis_url: str
) -> None:
    client = api.service.client
    admin = admin_of(client)
    job_id = await client.enqueue(topic, "refuse", max_attempts=5)
    await state_of(client, topic, job_id, JobState.DEAD)
    expected = (
        "attempt 1 of 5, not retried: "
        "https://hooks.example/run answered HTTP 410: subscription removed"
    )
    (letter,) = await admin.dead_letters(topic)
    assert letter.error == expected  # was "...: test_recorded_errors.Refused: https://..."
    _, body, _ = await api.call("GET", f"/v1/topics/{topic}/dead")
    assert [(d["error"], d["error_detail"]) for d in body["dead"]] == [(expected, None)]

    listed = await asyncio.to_thread(
        run_wheelq, "dlq", "list", topic, "--json", "--redis-url", redis_url
    )
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["error"], row["error_detail"]) == (expected, None)
