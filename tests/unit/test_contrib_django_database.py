"""`closing_connections`: Django's ``close_old_connections()`` before and after each run of a
handler, sync or async, even one that raises, in the thread its queries run in (the
handler's own for a sync one; Django's thread-sensitive ``sync_to_async`` thread for an
async one)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from wheelq.contrib.django import database
from wheelq.core.job import Job
from wheelq.worker.handler_runner import is_async

JOB: Any = object()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, threading.Thread]]:
    """Each call of close_old_connections and each handler run, with its thread."""
    made: list[tuple[str, threading.Thread]] = []
    monkeypatch.setattr(
        database,
        "close_old_connections",
        lambda: made.append(("close", threading.current_thread())),
    )
    return made


def test_a_sync_handler_closes_stale_connections_before_and_after_in_its_thread(
    calls: list[tuple[str, threading.Thread]],
) -> None:
    def handler(job: Job) -> str:
        calls.append(("run", threading.current_thread()))
        return "done"

    wrapped = database.closing_connections(handler)
    assert not is_async(wrapped)
    ran_on = threading.Thread(target=wrapped, args=(JOB,))
    ran_on.start()
    ran_on.join()
    assert calls == [("close", ran_on), ("run", ran_on), ("close", ran_on)]
    assert wrapped(JOB) == "done"


def test_a_failing_handler_still_closes_them_after(
    calls: list[tuple[str, threading.Thread]],
) -> None:
    def handler(job: Job) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        database.closing_connections(handler)(JOB)
    assert [what for what, _ in calls] == ["close", "close"]


def test_an_async_handler_closes_them_in_the_thread_its_orm_calls_run_in(
    calls: list[tuple[str, threading.Thread]],
) -> None:
    async def handler(job: Job) -> str:
        await sync_to_async(lambda: calls.append(("query", threading.current_thread())))()
        return "done"

    wrapped = database.closing_connections(handler)
    assert is_async(wrapped)
    assert asyncio.run(wrapped(JOB)) == "done"  # type: ignore[arg-type]
    assert [what for what, _ in calls] == ["close", "query", "close"]
    threads = {thread for _, thread in calls}
    assert len(threads) == 1 and threading.main_thread() not in threads
