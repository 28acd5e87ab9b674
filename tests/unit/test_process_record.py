"""The process list's record (`wheelq.core.process`): its stored form read back, what a
reader works out from it, and records that are not one."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelq.core.process import (
    FORMAT,
    MAX_HELD,
    MAX_LEADS,
    ROLES,
    HeldEntry,
    LeadInfo,
    ProcessInfo,
    RoleInfo,
    live_order,
    pack_process,
    role_info,
    unpack_process,
)

names = st.text(min_size=1, max_size=20)
counts = st.integers(min_value=0, max_value=2**53)
leads = st.builds(LeadInfo, names, st.integers(0, 1023), counts, counts)
held = st.builds(HeldEntry, names, st.integers(0, 1023), names, st.none() | counts)
roles = st.builds(
    RoleInfo,
    st.sampled_from(ROLES),
    names,
    st.lists(names, max_size=5).map(tuple),
    st.lists(names, max_size=3).map(tuple),
    st.none() | st.integers(1, 10_000),
    counts,
    counts,
    counts,
    st.lists(leads, max_size=5).map(tuple),
    counts,
    st.lists(held, max_size=5).map(tuple),
)
processes = st.builds(
    ProcessInfo,
    names,
    names,
    st.integers(1, 2**22),
    names,
    counts,
    st.integers(1000, 60_000),
    st.integers(2000, 600_000),
    st.lists(roles, max_size=4).map(tuple),
)


@given(processes)
def test_a_record_reads_back_as_written(info: ProcessInfo) -> None:
    expires_ms = 1_000_000 + info.ttl_ms  # the beat landed at 1,000,000

    found = unpack_process(pack_process(info), expires_ms, 1_000_250)

    assert found == dataclasses.replace(info, last_beat_ms=1_000_000, beat_age_ms=250)


def test_the_beat_age_is_how_long_ago_the_last_beat_landed_never_negative() -> None:
    info = ProcessInfo("h:1:ab", "h", 1, "0.2.0", 5, 1000, 3000)
    raw = pack_process(info)

    assert unpack_process(raw, 13_000, 10_400).beat_age_ms == 400
    assert unpack_process(raw, 13_000, 10_400).up_ms == 10_400 - 5
    assert unpack_process(raw, 13_000, 9_000).beat_age_ms == 0  # read before the beat's now


def test_a_process_sums_and_joins_what_its_roles_do() -> None:
    node = role_info("scheduler", "n", topics=["b", "a"], handled=7, leads=[LeadInfo("a", 0, 9, 1)])
    worker = role_info(
        "worker", "c", topics=["a"], groups=["g"], concurrency=10, in_flight=3, handled=5, failed=1
    )
    info = ProcessInfo("h:1:ab", "h", 1, "0.2.0", 5, 1000, 3000, (node, worker))

    assert info.role == "scheduler+worker"
    assert info.topics == ("a", "b")
    assert info.groups == ("g",)
    assert (info.concurrency, info.in_flight, info.handled, info.failed) == (10, 3, 12, 1)
    assert info.leads == (LeadInfo("a", 0, 9, 1),) and info.leads_total == 1
    assert ProcessInfo("x", "h", 1, "v", 0, 1000, 3000).concurrency is None


def test_a_role_lists_at_most_max_leads_and_counts_them_all() -> None:
    many = [LeadInfo("t", n, 0, 0) for n in range(MAX_LEADS + 5)]

    role = role_info("scheduler", "n", leads=many)

    assert len(role.leads) == MAX_LEADS and role.leads_total == MAX_LEADS + 5


def test_a_worker_lists_its_held_entries_running_ones_first_at_most_max_held() -> None:
    read_ahead = [HeldEntry("t", 0, f"{n}-0", None) for n in range(MAX_HELD)]
    running = [HeldEntry("t", 1, "7-0", 1500)]

    role = role_info("worker", "c", in_flight=MAX_HELD + 1, held=read_ahead + running)

    assert len(role.held) == MAX_HELD and role.held[0] == running[0]  # none left out for them
    info = ProcessInfo("i", "h", 1, "v", 0, 1000, 3000, (role,))
    assert unpack_process(pack_process(info), 3000, 0).roles[0].held == role.held


def test_a_record_of_a_worker_that_lists_no_held_entries_reads_as_none_held() -> None:
    fields = msgpack.unpackb(
        pack_process(
            ProcessInfo(
                "i",
                "h",
                1,
                "v",
                0,
                1000,
                3000,
                (role_info("worker", "c", held=[HeldEntry("t", 0, "1-0", 5)]),),
            )
        )
    )
    del fields[8][0][10:]  # as an older wheelq wrote it

    assert unpack_process(msgpack.packb(fields), 3000, 0).roles[0].held == ()


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="role must be one of"):
        role_info("poller", "n")


def test_fields_a_later_format_appends_are_ignored() -> None:
    fields = msgpack.unpackb(pack_process(ProcessInfo("i", "h", 1, "v", 0, 1000, 3000)))
    fields.append({"new": 1})

    found = unpack_process(msgpack.packb(fields), 3000, 0)

    assert found.id == "i"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1",  # never used in msgpack
        msgpack.packb({"id": "x"}),
        msgpack.packb([FORMAT + 1, "i", "h", 1, "v", 0, 1000, 3000, []]),
        msgpack.packb([FORMAT, "i", "h", "1", "v", 0, 1000, 3000, []]),
        msgpack.packb([FORMAT, "i", "h", True, "v", 0, 1000, 3000, []]),
        msgpack.packb([FORMAT, "i", "h", 1, "v", 0, 1000, 3000, [["worker"]]]),
        msgpack.packb([FORMAT, "i", "h", 1, "v", 0, 1000, 3000, [[1] * 10]]),
        msgpack.packb([FORMAT, "i", "h", 1, "v", 0, 1000, 3000, None]),
    ],
)
def test_what_is_not_a_record_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        unpack_process(raw, 0, 0)


def test_lists_show_nodes_then_workers_then_services_then_relays() -> None:
    def of(pid: int, *kinds: str) -> ProcessInfo:
        return ProcessInfo(
            f"h:{pid}", "h", pid, "v", 0, 1000, 3000, tuple(role_info(k, "n") for k in kinds)
        )

    found = [of(1, "relay"), of(2, "worker"), of(3, "service", "worker"), of(4, "scheduler"), of(5)]

    assert [p.pid for p in live_order(found)] == [4, 2, 3, 1, 5]
