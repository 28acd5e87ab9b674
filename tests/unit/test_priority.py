"""``priority=`` as a stored option (docs/architecture.md, "Options"): its row of the table, a
default job stored with no byte for it (envelope slot 13 and the entry field ``priority``
written only when not 5), read back as 5 when absent, carried by a retry, shown by `get()`;
every bad value refused naming ``priority`` before anything is encoded, on the library's
faces, a task's and the HTTP body's; in eager mode a task's default and a call's own reach
`current_job().priority`, through a retry; the job lists' filter takes it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from pydantic import ValidationError

import wheelq
from wheelq.cli.jobs import given_flags
from wheelq.core.history import entry_options
from wheelq.core.job import Envelope, Job, pack_envelope
from wheelq.core.job_list import JobFilter, ListedJob, ListState, stored_priority
from wheelq.core.options import BY_NAME, KINDS, OPTIONS, RUN, STORED, EnqueueItem, run_values
from wheelq.core.retry import retry_envelope
from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidArgumentError
from wheelq.producer.items import EncodeBatch, validate_batch, validate_item
from wheelq.tasks.task import TaskConfig
from wheelq.web.models.enqueue import JobIn

BAD = [-1, 10, 5.0, True, "9", 2**70]
"""Values no face takes: out of range, a float (even a whole one), a bool, a string."""
ENTRY = {b"id": b"j", b"topic": b"t", b"due": b"1", b"attempt": b"1", b"payload": b"\x01"}


def test_the_row_stores_it_after_expires_shared_carried_by_runs_with_http_and_cli() -> None:
    row = BY_NAME["priority"]
    assert row.kind == "priority" and row.entry == b"priority"
    assert (row.shared, row.runs, row.http, row.cli) == (True, True, int, int)
    assert row.doc.startswith("0-9, higher first, default 5")
    assert [o.name for o in STORED][-2:] == ["expires", "priority"]  # slot 13, after 12
    assert 8 + STORED.index(row) == 13  # Lua's slot 8 (1-based) holds STORED[0]
    assert row in RUN and [o.name for o in OPTIONS][-1] == "priority"
    kind = KINDS["priority"]
    assert (kind.unset, kind.slot(5), kind.slot(0), kind.slot(9)) == (5, "", "0", "9")
    assert (kind.read(b""), kind.read(b"0"), kind.read(b"9"), kind.shown) == (5, 0, 9, "int")


def test_a_default_job_stores_no_byte_for_it_and_one_given_fills_slot_13() -> None:
    settings, batch = ClientSettings(), EncodeBatch(1_000)
    plain = validate_item(settings, EnqueueItem(payload=1, job_id="a"), batch)
    five = validate_item(settings, EnqueueItem(payload=1, job_id="b", priority=5), batch)
    assert five.envelope == plain.envelope == pack_envelope(b"\x01", 1, 5, 1_000)
    nine = validate_item(settings, EnqueueItem(payload=1, job_id="c", priority=9), batch)
    fields = msgpack.unpackb(nine.envelope, raw=False)
    assert len(fields) == 13 and fields[12] == "9" and set(fields[7:12]) == {""}
    assert Envelope.unpack(nine.envelope).priority == 9
    assert Envelope.unpack(plain.envelope).priority == 5
    zero = validate_item(settings, EnqueueItem(payload=1, job_id="d", priority=0), batch)
    assert msgpack.unpackb(zero.envelope, raw=False)[12] == "0"  # 0 is set, not falsy


@pytest.mark.parametrize(("field", "priority"), [(None, 5), (b"", 5), (b"0", 0), (b"9", 9)])
def test_a_job_and_get_read_the_entry_field_as_5_when_absent(
    field: bytes | None, priority: int
) -> None:
    fields = dict(ENTRY) if field is None else {**ENTRY, b"priority": field}
    job = Job.from_entry("1-0", fields)
    assert job.priority == priority
    assert entry_options(fields)["priority"] == priority
    assert Job("j", "t", None, 1, 1, 1).priority == 5


@pytest.mark.parametrize("priority", [0, 5, 9])
def test_a_retry_envelope_carries_the_jobs_priority(priority: int) -> None:
    job = Job.from_entry("1-0", {**ENTRY, b"priority": str(priority).encode()})
    again = Envelope.unpack(retry_envelope(job, b"p", 9, "g"))
    assert (again.priority, again.attempt, again.group) == (priority, 2, "g")
    if priority == 5:  # a default retry is no longer than one without the option
        plain = Envelope.unpack(retry_envelope(Job.from_entry("1-0", ENTRY), b"p", 9, "g"))
        assert again == plain


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_bad_priority_is_refused_naming_it_on_every_library_face(bad: Any) -> None:
    settings = ClientSettings()
    with pytest.raises(InvalidArgumentError, match=r"priority must be an int in \[0, 9\]") as e:
        validate_item(settings, EnqueueItem(payload=1, priority=bad), EncodeBatch(0))
    assert e.value.parameter == "priority"
    items = [EnqueueItem(payload=0), EnqueueItem(payload=1, priority=bad)]
    with pytest.raises(InvalidArgumentError, match=r"items\[1\]") as many:
        validate_batch(settings, items, None, 0)
    assert many.value.parameter == "priority"
    with pytest.raises(InvalidArgumentError) as runs:
        run_values({"priority": bad})
    assert runs.value.parameter == "priority"
    with pytest.raises(InvalidArgumentError) as task:
        TaskConfig(priority=bad)
    assert task.value.parameter == "priority"
    with pytest.raises(InvalidArgumentError) as listed:
        JobFilter.of(priority=bad)
    assert listed.value.parameter == "priority"


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_the_http_body_refuses_a_bad_priority_before_the_client_sees_it(bad: Any) -> None:
    """A float, a bool and a string fail the body's strict int; -1 and 10 pass it and fail
    the item's check (both answered 422, tests/integration/test_priority_faces.py)."""
    try:
        body = JobIn.model_validate({"payload": 1, "priority": bad})
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == ("priority",)
        return
    assert isinstance(bad, int) and not isinstance(bad, bool)
    with pytest.raises(InvalidArgumentError) as caught:
        validate_item(ClientSettings(), body.item(0), EncodeBatch(0))
    assert caught.value.parameter == "priority"


def test_the_cli_keeps_a_flag_of_0_that_is_falsy() -> None:
    """``--priority 0`` (0 == False) was dropped with the unset switches."""
    flags: dict[str, Any] = {o.name: None for o in OPTIONS if o.cli}
    args = argparse.Namespace(**(flags | {"priority": 0, "ordered": False}))
    assert given_flags(args, OPTIONS) == {"priority": 0}


def test_the_job_lists_filter_keeps_the_rows_of_its_priority_and_not_the_unknown() -> None:
    def row(priority: int | None) -> ListedJob:
        return ListedJob("j", "t", ListState.READY, 0, priority=priority)

    match = JobFilter.of(priority=0)
    assert [match.keeps(row(p)) for p in (0, 5, None)] == [True, False, False]
    assert all(JobFilter.of().keeps(row(p)) for p in (0, 5, None))
    for state in ListState:
        match.check(state)  # every state takes it
    assert (stored_priority(None), stored_priority(b"7"), stored_priority(b"x")) == (5, 7, None)


# --- eager mode: no Redis ----------------------------------------------------------------------

app = wheelq.App("redis://127.0.0.1:1/0")  # nothing listens there
seen: list[int] = []


@app.task(priority=8)
def urgent(n: int) -> int:
    seen.append(wheelq.current_job().priority)
    return n


@app.task(max_attempts=2)
async def flaky() -> int:
    job = wheelq.current_job()
    seen.append(job.priority)
    if job.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return job.attempt


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    seen.clear()
    yield
    app.close()


def test_eager_a_tasks_priority_is_its_jobs_unless_the_call_gives_one() -> None:
    with app.eager():
        urgent.enqueue(1)
        urgent.options(priority=0).enqueue_in(60, 2)
        urgent.options(job_id="x").enqueue(3)
    assert seen == [8, 0, 8]
    with pytest.raises(InvalidArgumentError) as caught:
        urgent.options(priority=10).enqueue(4)
    assert caught.value.parameter == "priority" and seen == [8, 0, 8]


async def test_eager_an_async_tasks_retry_keeps_its_priority() -> None:
    with app.eager():
        handle = await flaky.options(priority=2).aenqueue()
    assert await handle.aresult(timeout=0) == 2
    assert seen == [2, 2]
