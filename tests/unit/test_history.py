"""`job_info`: the state a lookup shows, decided without a server from `Lookup`s built by hand
(what lookup.lua returns is checked on real servers in tests/integration/test_job_history.py).
"""

from __future__ import annotations

import msgpack
import pytest

from tests.support.entries import ready_fields
from wheelq.core.history import (
    GroupLookup,
    JobState,
    Lookup,
    Record,
    job_info,
    outcome,
    pack_success,
    read_record,
)
from wheelq.core.job import Envelope
from wheelq.core.payload import encode_payload
from wheelq.errors import MalformedJobError

NOW = 1_700_000_010_000
E1 = "1700000001000-0"
E2 = "1700000002000-0"
FIELDS = ready_fields(
    "j",
    due_ms=1_700_000_000_900,
    attempt=1,
    max_attempts=3,
    payload=encode_payload({"a": 1}, 1024),
)


def rec(kind: str, entry: str, at: int = 0, took: int = 0, err: str = "", why: str = "") -> bytes:
    return msgpack.packb([kind, entry, at, took, err, why, "9-0" if kind == "D" else ""])


def group(
    name: str = "g",
    *,
    delivered: str = E1,
    record: bytes | None = None,
    latest: str | None = E1,
    pending: tuple[str, int, int] | None = None,
) -> GroupLookup:
    return GroupLookup(name, delivered, record, latest, None, pending)


def fired(*groups: GroupLookup, cancelled: int | None = None) -> Lookup:
    return Lookup(NOW, None, None, cancelled, E1, FIELDS, list(groups))


def test_pending_and_retrying_come_from_the_envelope() -> None:
    first = Envelope(encode_payload("p", 64), 1, 3, 5).pack()
    info = job_info("t", "j", Lookup(NOW, NOW + 60_000, first, None, None, None))
    assert (info.state, info.due_ms, info.attempt, info.payload) == (
        JobState.PENDING,
        NOW + 60_000,
        1,
        "p",
    )

    retry = Envelope(encode_payload("p", 64), 2, 3, 5, "g", "j").pack()
    failed = group(record=rec("R", E1, NOW - 5, 0, "boom"))
    info = job_info("t", "j", Lookup(NOW, NOW + 1000, retry, None, E1, FIELDS, [failed]))
    assert (info.state, info.attempt, info.last_error) == (JobState.RETRYING, 2, "boom")
    assert [(g.group, g.state) for g in info.groups] == [("g", JobState.RETRYING)]


def test_a_job_on_the_due_line_is_ready_and_waiting_with_its_envelopes_details() -> None:
    first = Envelope(encode_payload("p", 64), 1, 3, 5).pack()
    line = Lookup(NOW, NOW - 20, first, None, None, None, waiting=True)
    info = job_info("t", "j", line)
    assert (info.state, info.waiting, info.due_ms, info.payload) == (
        JobState.READY,
        True,
        NOW - 20,
        "p",
    )
    assert info.entry_id is None and info.groups == ()
    # A retry waiting there: ready, its group too (it is due, not retrying any more).
    retry = Envelope(encode_payload("p", 64), 2, 3, 5, "g", "j").pack()
    failed = group(record=rec("R", E1, NOW - 5, 0, "boom"))
    line = Lookup(NOW, NOW - 20, retry, None, E1, FIELDS, [failed], waiting=True)
    info = job_info("t", "j", line)
    assert (info.state, info.waiting, info.attempt) == (JobState.READY, True, 2)
    assert [(g.group, g.state) for g in info.groups] == [("g", JobState.READY)]
    pending = job_info("t", "j", Lookup(NOW, NOW + 1000, first, None, None, None))
    assert not pending.waiting


def test_a_pending_envelope_that_does_not_decode_is_a_malformed_job_error() -> None:
    with pytest.raises(MalformedJobError):
        job_info("t", "j", Lookup(NOW, NOW, b"\xc1", None, None, None))


@pytest.mark.parametrize(
    ("g", "state"),
    [
        (group(delivered="0-0"), JobState.READY),
        (group(pending=("w1", 250, 1)), JobState.RUNNING),
        (group(record=rec("S", E1, NOW, 12)), JobState.SUCCEEDED),
        (group(), JobState.SUCCEEDED),  # acked, no record (a plain XACK)
        (group(record=rec("D", E1, NOW, 0, "boom", "failed")), JobState.DEAD),
        (group(record=rec("R", E1, NOW, 0, "boom")), JobState.RETRYING),
        (group(record=rec("C", E1, NOW, 0, "boom")), JobState.CANCELLED),  # its retry cancelled
        (group(record=rec("S", "1-0", NOW, 12)), JobState.SUCCEEDED),  # a stale record
    ],
)
def test_a_fired_jobs_group_state(g: GroupLookup, state: JobState) -> None:
    info = job_info("t", "j", fired(g))
    (only,) = info.groups
    assert only.state is state and info.state is state
    assert (info.entry_id, info.fired_ms, info.attempt, info.payload) == (
        E1,
        1_700_000_001_000,
        1,
        {"a": 1},
    )


def test_running_reports_consumer_since_and_deliveries_never_before_the_entry() -> None:
    (g,) = job_info("t", "j", fired(group(pending=("w1", 250, 2)))).groups
    assert (g.consumer, g.since_ms, g.deliveries) == ("w1", NOW - 250, 2)
    (g,) = job_info("t", "j", fired(group(pending=("w1", 10**9, 1)))).groups
    assert g.since_ms == 1_700_000_001_000


def test_the_job_state_is_the_least_finished_of_its_groups() -> None:
    done = group("a", record=rec("S", E1, NOW, 1))
    dead = group("b", record=rec("D", E1, NOW, 0, "boom", "failed"))
    ready = group("c", delivered="0-0")
    running = group("d", pending=("w", 1, 1))
    assert job_info("t", "j", fired(done, dead)).state is JobState.DEAD
    assert job_info("t", "j", fired(done, dead, ready)).state is JobState.READY
    assert job_info("t", "j", fired(done, ready, running)).state is JobState.RUNNING
    assert job_info("t", "j", fired(done, done)).state is JobState.SUCCEEDED
    assert job_info("t", "j", fired()).state is JobState.READY  # no group reads it yet


def test_a_group_whose_retry_was_cancelled_is_cancelled_never_retrying() -> None:
    cancelled = group("a", record=rec("C", E1, NOW - 5, 0, "boom"))
    info = job_info("t", "j", fired(cancelled))
    (g,) = info.groups
    assert (info.state, g.state, g.finished_ms, g.error) == (
        JobState.CANCELLED,
        JobState.CANCELLED,
        NOW - 5,
        "boom",
    )
    # Least finished first: a group still running or dead is the job's state, not the cancel;
    # one that succeeded leaves the job cancelled.
    done = group("b", record=rec("S", E1, NOW, 1))
    dead = group("c", record=rec("D", E1, NOW, 0, "boom", "failed"))
    running = group("d", pending=("w", 1, 1))
    assert job_info("t", "j", fired(cancelled, done)).state is JobState.CANCELLED
    assert job_info("t", "j", fired(cancelled, dead)).state is JobState.DEAD
    assert job_info("t", "j", fired(cancelled, running)).state is JobState.RUNNING


def test_a_group_only_firing_later_than_the_jobs_entry_is_that_groups_view() -> None:
    again = group(latest=E2, delivered=E2, pending=("w", 5, 1), record=rec("F", E2, 0, 0, "boom"))
    info = job_info("t", "j", fired(again))
    (g,) = info.groups
    assert (info.state, g.entry_id, info.entry_id, info.last_error) == (
        JobState.RUNNING,
        E2,
        E2,
        "boom",
    )


def test_cancelled_after_its_last_firing_is_cancelled_and_before_it_is_not() -> None:
    late, early = 1_700_000_005_000, 1_700_000_000_500
    assert job_info("t", "j", fired(group(), cancelled=late)).state is JobState.CANCELLED
    assert job_info("t", "j", fired(group(), cancelled=early)).state is JobState.SUCCEEDED
    nothing = Lookup(NOW, None, None, None, None, None)
    assert job_info("t", "j", nothing).state is JobState.UNKNOWN
    only_cancelled = Lookup(NOW, None, None, early, None, None)
    info = job_info("t", "j", only_cancelled)
    assert (info.state, info.cancelled_ms) == (JobState.CANCELLED, early)


def test_a_retry_cancelled_after_its_firing_keeps_the_attempts_made() -> None:
    # Issue 43 item 18: a cancelled retry read as nothing but its cancel ("attempt - of -").
    late = 1_700_000_005_000
    info = job_info("t", "j", fired(group(record=rec("R", E1, NOW, 0, "boom")), cancelled=late))
    assert (info.state, info.cancelled_ms) == (JobState.CANCELLED, late)
    assert (info.attempt, info.max_attempts, info.entry_id) == (1, 3, E1)
    assert [g.group for g in info.groups] == ["g"]


def test_a_record_that_is_not_one_is_ignored() -> None:
    assert read_record(b"\xc1") is None and read_record(msgpack.packb([1])) is None
    assert job_info("t", "j", fired(group(record=b"junk"))).state is JobState.SUCCEEDED


def test_a_success_record_keeps_a_result_only_when_there_is_one() -> None:
    plain = pack_success(E1, 5, 2, None)
    assert msgpack.unpackb(plain) == ["S", E1, 5, 2, "", "", ""]  # as before results
    assert plain == msgpack.packb(["S", E1, 5, 2, "", "", ""])
    kept = pack_success(E1, 5, 2, msgpack.packb({"n": 1}))
    assert read_record(kept) == Record("S", E1, 5, 2, "", "", "", msgpack.packb({"n": 1}))
    assert read_record(plain) == Record("S", E1, 5, 2, "", "", "", None)
    info = job_info("t", "j", fired(group(record=kept)))
    assert [(g.state, g.result) for g in info.groups] == [(JobState.SUCCEEDED, {"n": 1})]
    assert outcome(info, "g") == info.groups[0]


@pytest.mark.parametrize(
    ("lookup", "final"),
    [
        (fired(group(record=rec("S", E1))), JobState.SUCCEEDED),
        (fired(group(record=rec("D", E1, err="boom", why="failed"))), JobState.DEAD),
        (fired(group(pending=("w", 5, 1))), None),
        (fired(group(delivered="0-0")), None),
        (fired(group(record=rec("R", E1, err="boom"))), None),
        (Lookup(NOW, None, None, 1_700_000_000_500, None, None), JobState.CANCELLED),
        (Lookup(NOW, None, None, None, None, None), None),
    ],
    ids=["succeeded", "dead", "running", "ready", "retrying", "cancelled", "unknown"],
)
def test_outcome_is_final_only_for_succeeded_dead_or_cancelled(
    lookup: Lookup, final: JobState | None
) -> None:
    found = outcome(job_info("t", "j", lookup), "g")
    assert (found and found.state) == final
    assert outcome(job_info("t", "j", lookup), "another group") is None or final == "cancelled"
