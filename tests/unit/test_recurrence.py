"""core.recurring: cron in an IANA zone across DST (a northern and a southern zone), interval
rules, start/end bounds, millisecond edges of after()/before(), and the validation table.
Expected times come from zoneinfo wall times, never from the module under test."""

from __future__ import annotations

from datetime import date, datetime
from datetime import timedelta as td
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.recurring import MAX_EVERY_MS, Recurrence, recurrence
from wheelq.errors import InvalidArgumentError

BERLIN = "Europe/Berlin"
SYDNEY = "Australia/Sydney"
HALF_HOUR = 1_800_000


def wall(zone: str, y: int, mo: int, d: int, h: int = 0, mi: int = 0, fold: int = 0) -> int:
    """Epoch ms of a local wall time (fold=1: the second of a repeated hour)."""
    return int(datetime(y, mo, d, h, mi, tzinfo=ZoneInfo(zone), fold=fold).timestamp() * 1000)


def utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> int:
    return wall("UTC", y, mo, d, h, mi)


def forward(rule: Recurrence, lo: int, hi: int) -> list[int]:
    """Runs in (lo, hi]."""
    return list(takewhile(lambda t: t <= hi, rule.after(lo)))


def backward(rule: Recurrence, lo: int, hi: int) -> list[int]:
    """Runs in (lo, hi], descending."""
    return list(takewhile(lambda t: t > lo, rule.before(hi)))


def test_the_zone_data_has_the_transitions_these_tests_assume() -> None:
    assert wall(BERLIN, 2026, 3, 29, 3) == utc(2026, 3, 29, 1)  # 02:00 CET -> 03:00 CEST
    assert wall(BERLIN, 2026, 10, 25, 2, 30) == utc(2026, 10, 25, 0, 30)  # CEST
    assert wall(BERLIN, 2026, 10, 25, 2, 30, fold=1) == utc(2026, 10, 25, 1, 30)  # CET
    assert wall(SYDNEY, 2026, 4, 5, 2, 30) == utc(2026, 4, 4, 15, 30)  # AEDT
    assert wall(SYDNEY, 2026, 4, 5, 2, 30, fold=1) == utc(2026, 4, 4, 16, 30)  # AEST
    assert wall(SYDNEY, 2026, 10, 4, 3) == utc(2026, 10, 3, 16)  # 02:00 AEST -> 03:00 AEDT


def days_around(day: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """The local day before `day`, `day`, and the two after."""
    return [(d.year, d.month, d.day) for i in range(-1, 3) for d in [date(*day) + td(days=i)]]


@pytest.mark.parametrize(
    ("zone", "day", "at"),
    [
        (BERLIN, (2026, 3, 29), (3, 0)),  # spring forward: 02:30 does not exist
        (BERLIN, (2026, 10, 25), (2, 30)),  # fall back: the first (CEST) 02:30 only
        (SYDNEY, (2026, 4, 5), (2, 30)),  # fall back: the first (AEDT) 02:30 only
        (SYDNEY, (2026, 10, 4), (3, 0)),  # spring forward
    ],
)
def test_fixed_time_rule_runs_once_a_day_around_a_change(
    zone: str, day: tuple[int, int, int], at: tuple[int, int]
) -> None:
    rule = recurrence(cron="30 2 * * *", tz=zone, start_ms=0)
    before, change, after, later = days_around(day)
    lo, hi = wall(zone, *before) - 1, wall(zone, *later) - 1  # three local days
    expected = [wall(zone, *before, 2, 30), wall(zone, *change, *at), wall(zone, *after, 2, 30)]
    assert forward(rule, lo, hi) == expected
    assert backward(rule, lo, hi) == expected[::-1]


def test_after_inside_the_first_repeated_hour_skips_the_second_0230() -> None:
    rule = recurrence(cron="30 2 * * *", tz=BERLIN, start_ms=0)
    assert rule.next_after(wall(BERLIN, 2026, 10, 25, 2, 45)) == wall(BERLIN, 2026, 10, 26, 2, 30)
    assert rule.next_after(wall(BERLIN, 2026, 3, 29, 1, 59)) == utc(2026, 3, 29, 1)


@pytest.mark.parametrize(("zone", "day"), [(BERLIN, (2026, 10, 25)), (SYDNEY, (2026, 4, 5))])
@pytest.mark.parametrize("direction", ["after", "before"])
def test_from_inside_the_second_repeated_hour(
    zone: str, day: tuple[int, int, int], direction: str
) -> None:
    rule = recurrence(cron="30 2 * * *", tz=zone, start_ms=0)
    at = wall(zone, *day, 2, 10, fold=1)  # the day's only run (02:30, fold 0) is 40 min past
    if direction == "after":
        assert rule.next_after(at) == wall(zone, *days_around(day)[2], 2, 30)
    else:
        assert next(rule.before(at)) == wall(zone, *day, 2, 30)


@pytest.mark.parametrize(
    ("zone", "day", "runs"),
    [
        (BERLIN, (2026, 3, 29), 46),
        (BERLIN, (2026, 10, 25), 50),
        (SYDNEY, (2026, 4, 5), 50),
        (SYDNEY, (2026, 10, 4), 46),
    ],
)
def test_wildcard_hour_runs_every_real_half_hour_on_a_change_day(
    zone: str, day: tuple[int, int, int], runs: int
) -> None:
    # both zones are whole hours off UTC, so local :00/:30 is exactly the UTC half-hour grid
    rule = recurrence(cron="*/30 * * * *", tz=zone, start_ms=0)
    midnight, next_midnight = wall(zone, *day), wall(zone, *days_around(day)[2])
    expected = list(range(midnight, next_midnight, HALF_HOUR))
    assert len(expected) == runs
    assert forward(rule, midnight - 1, next_midnight - 1) == expected
    assert backward(rule, midnight - 1, next_midnight - 1) == expected[::-1]


@pytest.mark.parametrize(("zone", "day"), [(BERLIN, (2026, 10, 25)), (SYDNEY, (2026, 4, 5))])
def test_wildcard_hour_runs_in_both_repeated_hours(zone: str, day: tuple[int, int, int]) -> None:
    rule = recurrence(cron="*/30 * * * *", tz=zone, start_ms=0)
    lo, hi = wall(zone, *day, 1, 59), wall(zone, *day, 3, 1, fold=1)
    expected = [wall(zone, *day, 2, m, fold=f) for f in (0, 1) for m in (0, 30)]
    expected.append(wall(zone, *day, 3))
    assert [b - a for a, b in pairwise(expected)] == [HALF_HOUR] * 4
    assert forward(rule, lo, hi) == expected
    assert backward(rule, lo, hi) == expected[::-1]


@pytest.mark.parametrize(("zone", "day"), [(BERLIN, (2026, 3, 29)), (SYDNEY, (2026, 10, 4))])
def test_wildcard_hour_skips_the_missing_hour(zone: str, day: tuple[int, int, int]) -> None:
    rule = recurrence(cron="*/30 * * * *", tz=zone, start_ms=0)
    lo, hi = wall(zone, *day, 1, 0), wall(zone, *day, 4, 0)
    expected = [wall(zone, *day, h, m) for h in (1, 3) for m in (0, 30)] + [hi]
    assert forward(rule, lo - 1, hi) == expected
    assert backward(rule, lo - 1, hi) == expected[::-1]
    hours = {datetime.fromtimestamp(t / 1000, ZoneInfo(zone)).hour for t in expected}
    assert 2 not in hours


# --- bounds and millisecond edges ---------------------------------------------------------------


def test_cron_after_and_before_at_millisecond_edges() -> None:
    rule = recurrence(cron="0 * * * *", start_ms=0)
    ten = utc(2026, 1, 1, 10)
    assert rule.next_after(ten - 1) == ten
    assert rule.next_after(ten) == ten + 3_600_000
    assert rule.next_after(ten + 500) == ten + 3_600_000
    assert next(rule.before(ten)) == ten
    assert next(rule.before(ten + 999)) == ten
    assert next(rule.before(ten - 1)) == ten - 3_600_000


def test_cron_honours_start_and_inclusive_end() -> None:
    ten, twelve = utc(2026, 1, 1, 10), utc(2026, 1, 1, 12)
    rule = recurrence(cron="0 * * * *", start_ms=ten, end_ms=twelve)
    assert list(rule.after(0)) == [ten, ten + 3_600_000, twelve]
    assert list(rule.before(twelve + 86_400_000)) == [twelve, ten + 3_600_000, ten]
    assert rule.next_after(twelve) is None
    late_start = recurrence(cron="0 * * * *", start_ms=ten + 1)
    assert late_start.next_after(0) == ten + 3_600_000
    assert next(late_start.before(ten + 3_600_000 - 1), None) is None


def test_interval_runs_on_the_anchor_grid_strictly_after() -> None:
    rule = recurrence(every_ms=1000, start_ms=10_000)
    assert list(islice(rule.after(-5), 3)) == [10_000, 11_000, 12_000]
    assert rule.next_after(9_999) == 10_000
    assert rule.next_after(10_000) == 11_000
    assert rule.next_after(10_500) == 11_000
    assert list(rule.before(12_999)) == [12_000, 11_000, 10_000]
    assert list(rule.before(9_999)) == []


def test_interval_anchor_apart_from_start() -> None:
    before_start = recurrence(every_ms=1000, start_ms=10_500, anchor_ms=10_000)
    assert list(islice(before_start.after(0), 2)) == [11_000, 12_000]
    assert list(before_start.before(12_000)) == [12_000, 11_000]
    after_start = recurrence(every_ms=1000, start_ms=10_000, anchor_ms=12_250)
    assert after_start.next_after(0) == 12_250
    assert list(after_start.before(14_000)) == [13_250, 12_250]


def test_interval_end_is_inclusive() -> None:
    rule = recurrence(every_ms=1000, start_ms=10_000, end_ms=13_000)
    assert list(rule.after(0)) == [10_000, 11_000, 12_000, 13_000]
    assert list(rule.before(99_000)) == [13_000, 12_000, 11_000, 10_000]
    assert rule.next_after(13_000) is None
    assert list(recurrence(every_ms=1000, start_ms=10_000, end_ms=12_999).after(0))[-1] == 12_000


@settings(max_examples=300, deadline=None)
@given(
    every=st.integers(100, 3000),
    anchor=st.integers(0, 10_000),
    start=st.integers(0, 10_000),
    span=st.none() | st.integers(0, 30_000),
    at=st.integers(-1000, 50_000),
)
def test_interval_matches_brute_force(
    every: int, anchor: int, start: int, span: int | None, at: int
) -> None:
    end = None if span is None else start + span
    rule = recurrence(every_ms=every, start_ms=start, end_ms=end, anchor_ms=anchor)
    valid = [t for t in range(anchor, 100_000, every) if t >= start and (end is None or t <= end)]
    assert list(islice(rule.after(at), 5)) == [t for t in valid if t > at][:5]
    assert list(rule.before(at)) == [t for t in valid if t <= at][::-1]


# --- validation ---------------------------------------------------------------------------------

BAD = [
    ({}, "cron"),
    ({"cron": "* * * * *", "every_ms": 1000}, "cron"),
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "not a cron"}, "cron"),
    ({"cron": "0 0 31 2 *"}, "cron"),
    ({"cron": "*/10 * * * * *"}, "cron"),
    ({"cron": 5}, "cron"),
    ({"every_ms": 99}, "every_ms"),
    ({"every_ms": 0}, "every_ms"),
    ({"every_ms": -1000}, "every_ms"),
    ({"every_ms": MAX_EVERY_MS + 1}, "every_ms"),
    ({"every_ms": True}, "every_ms"),
    ({"every_ms": 1000.0}, "every_ms"),
    ({"every_ms": "1000"}, "every_ms"),
    ({"cron": "0 * * * *", "tz": "Mars/Olympus_Mons"}, "tz"),
    ({"cron": "0 * * * *", "tz": ""}, "tz"),
    ({"cron": "0 * * * *", "tz": "America"}, "tz"),  # a directory of zones, not a zone
    ({"cron": "0 * * * *", "tz": "../../etc/passwd"}, "tz"),
    ({"cron": "0 * * * *", "tz": None}, "tz"),
    ({"every_ms": 1000, "tz": BERLIN}, "tz"),
    ({"every_ms": 1000, "start_ms": 1000, "end_ms": 999}, "end"),
    ({"cron": "0 * * * *", "start_ms": 1000, "end_ms": 999}, "end"),
    # a stored record's times, read back (an older wheelq, or one written by hand)
    ({"cron": "0 * * * *", "start_ms": "1000"}, "start_ms"),
    ({"cron": "0 * * * *", "start_ms": -1}, "start_ms"),
    ({"every_ms": 1000, "start_ms": 2**53}, "start_ms"),
    ({"cron": "0 * * * *", "end_ms": 1.5}, "end_ms"),
    ({"every_ms": 1000, "anchor_ms": 2**60}, "anchor_ms"),
]


@pytest.mark.parametrize(("kwargs", "parameter"), BAD)
def test_invalid_rules_name_the_parameter(kwargs: dict[str, object], parameter: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        recurrence(**{"start_ms": 0, **kwargs})  # type: ignore[arg-type]
    assert caught.value.parameter == parameter
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"every_ms": 100},
        {"every_ms": MAX_EVERY_MS},
        {"every_ms": 1000, "start_ms": 5, "end_ms": 5},
        {"cron": "0 0 L * *", "tz": SYDNEY},
        {"cron": "0 9 * * MON#1", "tz": SYDNEY},
        {"cron": "0 9 * * MON-FRI", "tz": BERLIN, "end_ms": 0},
    ],
)
def test_valid_edges_are_accepted(kwargs: dict[str, object]) -> None:
    rule = recurrence(**{"start_ms": 0, **kwargs})  # type: ignore[arg-type]
    assert (rule.cron, rule.every_ms) == (kwargs.get("cron"), kwargs.get("every_ms"))
    assert rule.anchor_ms == rule.start_ms


@pytest.mark.parametrize("cron", ["@daily", "@hourly"])
def test_at_names_are_accepted_as_documented(cron: str) -> None:
    expected = "0 0 * * *" if cron == "@daily" else "0 * * * *"
    rule = recurrence(cron=cron, start_ms=0)
    plain = recurrence(cron=expected, start_ms=0)
    assert list(islice(rule.after(0), 3)) == list(islice(plain.after(0), 3))


YEAR_9999_END = utc(9999, 12, 31, 23, 59) + 59_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cron": "* * * * *"},
        {"cron": "0 0 1 1 *", "tz": SYDNEY},  # the next one: year 10000
        {"cron": "0 0 29 2 *", "tz": BERLIN},  # leap days: 9996, then 10000
        {"cron": "0 3 * * SUN", "tz": "America/New_York"},
    ],
)
def test_a_cron_rule_near_year_9999_ends_there_instead_of_overflowing(
    kwargs: dict[str, object],
) -> None:
    """A start at 9999-12-31T23:59:59Z (stored by an older wheelq) raised OverflowError in
    every planning round and every listing; past year 9999 there is no occurrence."""
    rule = recurrence(**kwargs, start_ms=YEAR_9999_END)  # type: ignore[arg-type]
    assert rule.next_after(utc(2027, 1, 1)) is None
    assert list(rule.after(YEAR_9999_END + 3_600_000)) == []
    assert list(islice(rule.before(YEAR_9999_END + 10**12), 3)) == []
    late = recurrence(**kwargs, start_ms=utc(9999, 1, 1))  # type: ignore[arg-type]
    runs = list(late.after(utc(9999, 12, 1)))  # the last ones, then the end of datetime
    assert runs == sorted(runs) and all(utc(9999, 12, 1) < t < YEAR_9999_END + 60_000 for t in runs)
