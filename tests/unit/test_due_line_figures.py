"""How loadtest/due_line.py reads its figures from handler starts: the order rule of the
starvation scenario (`passed_by_later`) and each key's share of the starts by its weight
(`shares`), on hand-made starts."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from due_line import passed_by_later, shares


def test_a_priority_0_job_started_after_work_due_past_its_bound_counts_the_wait() -> None:
    span = 900  # 9 x a credit of 100 ms
    # priority-9 jobs (due, start), by due: the first is due within the span of the priority-0
    # jobs due at 1,000 (before 1,900), the second after it
    p9 = [(1_500, 2_000.0), (2_500, 4_000.0)]
    p0 = [
        (1_000, 5_000.0),  # started 1,000 ms after the job due at 2,500 did: passed by it
        (1_000, 3_000.0),  # started before it: only passed by the one due within its span
        (3_000, 9_000.0),  # no priority-9 job is due past its span: never passed
    ]
    assert passed_by_later(p0, p9, span) == [1_000.0, 0.0, 0.0]


def test_shares_count_only_while_every_key_takes_turns() -> None:
    # "a" (weight 2) starts three jobs alone before "b" is in rotation (a burst held in a few
    # calls), then they take turns a, a, b ten times, then "a" runs on alone.
    starts = [(float(t), "a") for t in range(3)]
    for i in range(10):
        starts += [(10.0 + 3 * i, "a"), (11.0 + 3 * i, "a"), (12.0 + 3 * i, "b")]
    starts += [(40.0 + t, "a") for t in range(10)]
    got = shares(starts, {"a": 2, "b": 1})
    assert got["share_deviation_by_key"] == {"a": 0.0, "b": 0.0}
    assert got["starts_in_window"] == 27  # from b's first start to its last (not counted)
    assert got["window_from_first_start_s"] == 0.012


def test_a_key_short_of_its_weight_shows_how_far() -> None:
    # "a" (weight 2) gets one turn for each of "b"'s (half the starts, not two thirds; "b"
    # half, not a third), then runs on alone once "b" has none.
    starts: list[tuple[float, str]] = []
    for i in range(10):
        starts += [(2.0 * i, "a"), (2.0 * i + 1, "b")]
    starts += [(20.0 + t, "a") for t in range(5)]
    got = shares(starts, {"a": 2, "b": 1})
    assert got["share_deviation_by_key"] == {"a": -0.25, "b": 0.5}
    assert got["share_deviation_max"] == 0.5
