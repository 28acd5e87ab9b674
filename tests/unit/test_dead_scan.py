"""One dead-letter listing, one scan bound (`wheelq.admin.dead_letters.SCAN_LIMIT`): a
filtered page reads through at most that many dead letters before it answers, in every face
that lists them (the admins, the jobs list's dead state, the HTTP API and console through
`AsyncAdmin`, ``wheelq dlq list``), and its ``next`` goes on from there."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from wheelq import Admin, AsyncAdmin
from wheelq.admin import dead_letters as dl
from wheelq.admin import job_lists
from wheelq.core.job_list import JobFilter
from wheelq.core.settings import ClientSettings
from wheelq.producer.operations import Op, Producer


def _fake_dead(op: Op[Any]) -> tuple[Any, int]:
    """Run `op` against one shard holding dead letters without end, none of reason
    ``deliveries``; what it answered and how many dead letters it read."""
    read = 0
    replies: list[Any] | None = None
    try:
        while True:
            calls = op.send(replies) if replies is not None else next(op)
            replies = []
            for call in calls:
                if call.command[0] == "HGET":  # the topic's shard count
                    replies.append(1)
                    continue
                count = int(call.command[-1])
                page = [
                    (f"{read + n + 1}-0", {b"id": b"j", b"reason": b"failed", b"group": b"g"})
                    for n in range(count)
                ]
                read += count
                replies.append(page)
    except StopIteration as done:
        return done.value, read


@pytest.mark.parametrize("admin", [Admin, AsyncAdmin])
def test_the_admins_list_with_the_one_scan_bound_by_default(admin: type) -> None:
    default = inspect.signature(admin.dead_letters).parameters["scan_limit"].default
    assert default == dl.SCAN_LIMIT


def test_a_filtered_page_that_matches_nothing_stops_at_the_scan_bound_and_goes_on_from_there() -> (
    None
):
    producer = Producer(ClientSettings())
    page, read = _fake_dead(dl.dead_letters(producer, "t", 10, None, reason="deliveries"))
    assert (list(page), read) == ([], dl.SCAN_LIMIT)
    assert page.next == f"0/{dl.SCAN_LIMIT}-0"


def test_the_jobs_lists_dead_state_reads_with_the_same_bound() -> None:
    producer = Producer(ClientSettings())
    match = JobFilter(reason="deliveries")
    page, read = _fake_dead(job_lists.dead_page(producer, "t", 10, None, match))
    assert (list(page), read) == ([], dl.SCAN_LIMIT)
    assert page.next is not None
