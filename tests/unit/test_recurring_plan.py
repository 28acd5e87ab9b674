"""core.recurring: which runs a planning round writes (misfire policies, grace, horizon,
cursor), a Hypothesis oracle for interval schedules, the stored record and its state, and
name / misfire validation. Expected runs are worked out by hand or by brute force."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import cast
from zoneinfo import ZoneInfo

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.callback import Callback
from wheelq.core.options import (
    RUN,
    STORED,
    Option,
    named_slots,
    run_values,
    stored_unset,
    view,
)
from wheelq.core.recurring import (
    MAX_CATCH_UP,
    RECORD_VERSION,
    Misfire,
    Plan,
    Recurrence,
    Schedule,
    plan,
    recurrence,
    run_id,
    validate_misfire,
    validate_name,
)
from wheelq.errors import InvalidArgumentError

BERLIN = "Europe/Berlin"
PAYLOAD = msgpack.packb({"report": "daily", "n": [1, 2]}, use_bin_type=True)
UNSET = stored_unset()
HOOK = Callback("https://hooks.example/run", {"Authorization": "Bearer s3cret"})


def schedule(
    rule: Recurrence,
    cursor: int = 0,
    misfire: str = "once",
    max_catch_up: int = 10,
    paused: bool = False,
) -> Schedule:
    policy = cast(Misfire, misfire)
    return Schedule(
        "nightly", "reports", rule, policy, max_catch_up, PAYLOAD, 3, UNSET, 7, paused, cursor
    )


def every(
    ms: int = 1000, cursor: int = 10_000, misfire: str = "once", catch_up: int = 10
) -> Schedule:
    return schedule(recurrence(every_ms=ms, start_ms=0), cursor, misfire, catch_up)


def wall(y: int, mo: int, d: int, h: int, mi: int = 0, fold: int = 0) -> int:
    return int(datetime(y, mo, d, h, mi, tzinfo=ZoneInfo(BERLIN), fold=fold).timestamp() * 1000)


ON_TIME = list(range(14_000, 19_001, 1000))


@pytest.mark.parametrize(
    ("misfire", "max_catch_up", "caught", "skipped"),
    [
        ("once", 10, [13_000], 2),
        ("all", 10, [11_000, 12_000, 13_000], 0),
        ("all", 3, [11_000, 12_000, 13_000], 0),
        ("all", 2, [12_000, 13_000], 1),
        ("all", 1, [13_000], 2),
        ("skip", 10, [], 3),
    ],
)
def test_outage_of_three_runs_under_each_policy(
    misfire: str, max_catch_up: int, caught: list[int], skipped: int
) -> None:
    # cursor 10_000, back at 14_500: 11_000..13_000 are late by more than 1000 ms
    s = every(cursor=10_000, misfire=misfire, catch_up=max_catch_up)
    assert plan(s, 14_500, 19_500, grace_ms=1000) == Plan(caught + ON_TIME, 19_500, skipped)


@pytest.mark.parametrize("misfire", ["once", "all", "skip"])
def test_no_outage_writes_the_window_for_every_policy(misfire: str) -> None:
    s = every(cursor=10_000, misfire=misfire)
    expected = Plan([11_000, 12_000, 13_000, 14_000, 15_000], 15_000, 0)
    assert plan(s, 10_000, 15_000, grace_ms=1000) == expected


def test_a_run_late_by_exactly_grace_is_on_time() -> None:
    s = every(cursor=10_000, misfire="skip")
    assert plan(s, 14_000, 15_000, grace_ms=1000) == Plan([13_000, 14_000, 15_000], 15_000, 2)
    assert plan(s, 14_001, 15_000, grace_ms=1000) == Plan([14_000, 15_000], 15_000, 3)
    assert plan(s, 14_000, 15_000, grace_ms=0) == Plan([14_000, 15_000], 15_000, 3)
    # the only missed run is just after the cursor, late by grace + 1 ms
    once = every(cursor=12_999, misfire="once")
    assert plan(once, 14_001, 15_000, grace_ms=1000) == Plan([13_000, 14_000, 15_000], 15_000, 0)


def test_cursor_and_horizon_bounds() -> None:
    s = every(cursor=11_000, misfire="all")
    assert plan(s, 11_000, 14_999, grace_ms=1000).runs == [12_000, 13_000, 14_000]
    assert plan(s, 11_000, 15_000, grace_ms=1000).runs == [12_000, 13_000, 14_000, 15_000]
    assert plan(s, 11_000, 11_999, grace_ms=1000) == Plan([], 11_999, 0)


@pytest.mark.parametrize("horizon", [11_000, 10_999, 0])
def test_horizon_at_or_before_cursor_plans_nothing(horizon: int) -> None:
    s = every(cursor=11_000, misfire="all")
    assert plan(s, 50_000, horizon) == Plan([], 11_000, 0)


def test_start_in_the_past_is_a_misfire_from_start() -> None:
    rule = recurrence(every_ms=1000, start_ms=5_000)
    s = schedule(rule, cursor=0, misfire="once")
    # 5_000..8_000 are missed, 9_000 is late by exactly the grace
    expected = Plan([8_000, 9_000, 10_000, 11_000, 12_000], 12_000, 3)
    assert plan(s, 10_000, 12_000, grace_ms=1000) == expected


def test_end_bounds_caught_up_and_on_time_runs() -> None:
    s = schedule(recurrence(every_ms=1000, start_ms=0, end_ms=15_000), 10_000, "all")
    assert plan(s, 14_500, 30_000, grace_ms=1000) == Plan(
        [11_000, 12_000, 13_000, 14_000, 15_000], 30_000, 0
    )


def test_skipped_is_counted_up_to_max_catch_up_whatever_the_outage() -> None:
    day = 86_400_000
    for misfire, kept in (("skip", 0), ("once", 1), ("all", 10)):
        p = plan(every(100, cursor=0, misfire=misfire), day, day + 1000, grace_ms=1000)
        assert p.skipped == MAX_CATCH_UP
        assert p.runs == list(range(day - 1000 - kept * 100, day + 1001, 100))


@pytest.mark.parametrize(
    ("misfire", "caught", "skipped"),
    [
        # autumn: the 25th runs once, at 02:30 CEST
        ("all", [wall(2026, 10, d, 2, 30) for d in (24, 25, 26)], 0),
        ("once", [wall(2026, 10, 26, 2, 30)], 2),
        ("skip", [], 3),
    ],
)
def test_cron_outage_across_fall_back(misfire: str, caught: list[int], skipped: int) -> None:
    rule = recurrence(cron="30 2 * * *", tz=BERLIN, start_ms=0)
    s = schedule(rule, wall(2026, 10, 23, 12), misfire)
    p = plan(s, wall(2026, 10, 26, 12), wall(2026, 10, 27, 12))
    assert p == Plan([*caught, wall(2026, 10, 27, 2, 30)], wall(2026, 10, 27, 12), skipped)


def test_cron_outage_across_spring_forward() -> None:
    s = schedule(recurrence(cron="30 2 * * *", tz=BERLIN, start_ms=0), wall(2026, 3, 27, 12), "all")
    p = plan(s, wall(2026, 3, 30, 12), wall(2026, 3, 31, 12))
    assert p.runs == [
        wall(2026, 3, 28, 2, 30),
        wall(2026, 3, 29, 3, 0),  # 02:30 does not exist that day
        wall(2026, 3, 30, 2, 30),
        wall(2026, 3, 31, 2, 30),
    ]
    assert p.runs[2] - p.runs[1] == 23 * 3_600_000 + 1_800_000


def test_cron_cursor_inside_the_second_repeated_hour_never_replans_a_run() -> None:
    # the 25th's only run (02:30 CEST) was written before the cursor (02:10 CET)
    cursor = wall(2026, 10, 25, 2, 10, fold=1)
    s = schedule(recurrence(cron="30 2 * * *", tz=BERLIN, start_ms=0), cursor, "skip")
    assert plan(s, cursor, cursor + 3_600_000).runs == []


KEEP = {"skip": 0, "once": 1}


@settings(max_examples=400, deadline=None)
@given(
    every_ms=st.integers(100, 3000),
    start=st.integers(0, 20_000),
    cursor=st.integers(0, 40_000),
    now=st.integers(0, 40_000),
    ahead=st.integers(-3000, 20_000),
    grace=st.integers(0, 3000),
    misfire=st.sampled_from(["once", "all", "skip"]),
    max_catch_up=st.integers(1, 20),
)
def test_interval_plan_matches_brute_force(
    every_ms: int,
    start: int,
    cursor: int,
    now: int,
    ahead: int,
    grace: int,
    misfire: str,
    max_catch_up: int,
) -> None:
    horizon = now + max(ahead, -grace)  # never before now - grace (the planner's is now + window)
    s = schedule(recurrence(every_ms=every_ms, start_ms=start), cursor, misfire, max_catch_up)
    p = plan(s, now, horizon, grace_ms=grace)
    due = [t for t in range(start, horizon + 1, every_ms) if t > cursor]
    missed = [t for t in due if t < now - grace]
    on_time = [t for t in due if t >= now - grace]
    kept = min(KEEP.get(misfire, max_catch_up), len(missed))
    assert p.runs == sorted(set(p.runs))
    assert all(cursor < t <= horizon for t in p.runs)
    assert [t for t in p.runs if t >= now - grace] == on_time
    assert [t for t in p.runs if t < now - grace] == missed[len(missed) - kept :]
    assert p.skipped == len(missed) - kept
    assert p.planned_ms == max(cursor, horizon)


# --- the stored record -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        recurrence(every_ms=250, start_ms=1_000, anchor_ms=1_100, end_ms=9_000_000),
        recurrence(cron="0 9 * * MON-FRI", tz=BERLIN, start_ms=5, end_ms=None),
    ],
)
def test_record_round_trips(rule: Recurrence) -> None:
    options = run_values({"callback": HOOK, "key": "tenant-7", "ordered": True})
    s = Schedule("a.b:c-1", "reports", rule, "all", 17, PAYLOAD, 4, options, 1234, False, 0)
    assert Schedule.unpack("reports", "a.b:c-1", s.pack(), None) == s
    assert msgpack.unpackb(s.pack(), raw=False)["v"] == RECORD_VERSION
    assert s.data == {"report": "daily", "n": [1, 2]}
    assert s.callback == HOOK.pack()
    unset = view(UNSET, RUN)  # (any other option: unset, as shown)
    given = {n: v for n, v in s.run_options.items() if v != unset[n]}
    assert given == {"callback": HOOK.url, "key": "tenant-7", "ordered": True}


@pytest.mark.parametrize("option", RUN, ids=lambda o: o.name)
def test_the_record_keeps_each_option_the_runs_carry_by_name(option: Option) -> None:
    """Every option of `RUN` (a new one too) is stored, by name, and read back."""
    given = {"callback": HOOK, "text": "k-1", "flag": True, "int": 3, "priority": 9}[
        option.kind or ""
    ]
    values = {option.name: given}
    if option.requires:
        values[option.requires] = "k-1"
    options = run_values(values)
    assert options[STORED.index(option)] != UNSET[STORED.index(option)]
    s = schedule(recurrence(every_ms=1000, start_ms=0))
    s = dataclasses.replace(s, options=options)
    record = msgpack.unpackb(s.pack(), raw=False)
    assert option.name in record["options"]
    assert Schedule.unpack("reports", "nightly", s.pack(), None).options == options


def test_a_record_of_version_1_is_read_its_callback_carried_by_the_runs() -> None:
    """A record written before the runs' options were kept by name (version 1: ``callback``
    alone, no ``options``) still loads, its runs carrying its callback."""
    s = schedule(recurrence(every_ms=1000, start_ms=0))
    old = msgpack.unpackb(s.pack(), raw=False)
    del old["options"]
    old |= {"v": 1, "callback": HOOK.pack()}
    read = Schedule.unpack("reports", "nightly", msgpack.packb(old, use_bin_type=True), None)
    assert read.options == run_values({"callback": HOOK})
    assert read.callback == HOOK.pack() and read.error is None


def test_a_record_keeps_what_version_1_reads() -> None:
    """A wheelq of version 1 reads ``max_attempts`` and ``callback`` of a newer record (and
    ignores the rest): both are written."""
    options = run_values({"callback": HOOK, "key": "k"})
    s = dataclasses.replace(schedule(recurrence(every_ms=1000, start_ms=0)), options=options)
    record = msgpack.unpackb(s.pack(), raw=False)
    assert (record["max_attempts"], record["callback"]) == (3, HOOK.pack())
    assert record["options"] == named_slots(options)


def test_an_option_a_run_does_not_take_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match="'traceparent'"):
        run_values({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    with pytest.raises(InvalidArgumentError) as caught:
        run_values({"ordered": True})  # without a key
    assert caught.value.parameter == "ordered"


def test_an_option_a_newer_wheelq_stored_is_left_out() -> None:
    s = schedule(recurrence(every_ms=1000, start_ms=0))
    record = msgpack.unpackb(s.pack(), raw=False)
    record["options"]["shiny_new_option"] = "9"
    read = Schedule.unpack("reports", "nightly", msgpack.packb(record, use_bin_type=True), None)
    assert read == s


def test_a_record_whose_option_is_no_slot_is_unreadable_and_named() -> None:
    s = schedule(recurrence(every_ms=1000, start_ms=0))
    record = msgpack.unpackb(s.pack(), raw=False)
    record["options"]["key"] = 5
    stored = Schedule.stored("reports", "nightly", msgpack.packb(record, use_bin_type=True), None)
    assert stored.error is not None and "key" in stored.error


def test_repr_shows_the_payload_decoded_and_the_callbacks_url_only() -> None:
    hook = run_values({"callback": HOOK})
    big = msgpack.packb({"report": "daily", "rows": list(range(1000))}, use_bin_type=True)
    rule = recurrence(every_ms=1000, start_ms=0)
    shown = repr(Schedule("nightly", "reports", rule, "once", 10, big, 3, hook, 7))
    assert "data={'report': 'daily', 'rows': [0, 1, 2, 3, 4, 5, ...]}" in shown
    assert "callback='https://hooks.example/run'" in shown
    assert "\\x" not in shown and "b'" not in shown  # no packed bytes
    assert "s3cret" not in shown
    assert len(shown) < 400 < len(big)
    broken = repr(Schedule("n", "t", rule, "once", 10, b"\xc1", 3, UNSET, 7))
    assert "data=<1 bytes, not a payload>" in broken and "callback=None" in broken


@pytest.mark.parametrize(
    ("state", "paused", "planned_ms"),
    [
        (None, False, 0),
        ("0", False, 0),
        (b"12345", False, 12345),
        ("p:123", True, 123),
        (b"p:123", True, 123),
    ],
)
def test_state_parsing(state: bytes | str | None, paused: bool, planned_ms: int) -> None:
    packed = every().pack()
    s = Schedule.unpack("reports", "nightly", packed, state)
    assert (s.paused, s.planned_ms) == (paused, planned_ms)
    assert (s.name, s.topic, s.misfire, s.max_catch_up) == ("nightly", "reports", "once", 10)


def test_next_run_ms() -> None:
    # the first run strictly after now, whatever has been planned already
    rule = recurrence(every_ms=1000, start_ms=0, end_ms=9_000)
    s = schedule(rule, cursor=5_000)
    nexts = [s.next_run_ms(now) for now in (3_000, 4_000, 7_500, 8_999, 9_000)]
    assert nexts == [4_000, 5_000, 8_000, 9_000, None]
    assert schedule(rule, cursor=5_000, paused=True).next_run_ms(3_000) is None


def test_unpack_revalidates_the_rule() -> None:
    bad = msgpack.unpackb(every().pack(), raw=False) | {"every_ms": 5}
    with pytest.raises(InvalidArgumentError) as caught:
        Schedule.unpack("reports", "nightly", msgpack.packb(bad, use_bin_type=True), None)
    assert caught.value.parameter == "every_ms"


# --- names and policies ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "x" * 100, "Nightly_report.v2:eu-west"])
def test_good_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 101, "a b", "a@b", "a/b", "a\n", "é", None, 5])
def test_bad_names(name: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        validate_name(name)
    assert caught.value.parameter == "name"


def test_misfire_validation() -> None:
    for policy in ("once", "all", "skip"):
        assert validate_misfire(policy, 1) == (policy, 1)
    assert validate_misfire("all", MAX_CATCH_UP) == ("all", MAX_CATCH_UP)
    for misfire, catch_up, parameter in [
        *[(bad, 1, "misfire") for bad in ("ONCE", None, "never", "")],
        *[("all", bad, "max_catch_up") for bad in (0, MAX_CATCH_UP + 1, True, 1.0, "3", None)],
    ]:
        with pytest.raises(InvalidArgumentError) as caught:
            validate_misfire(misfire, catch_up)
        assert caught.value.parameter == parameter


def test_run_id() -> None:
    assert run_id("nightly", 1_800_000_000_000) == "nightly@1800000000000"
