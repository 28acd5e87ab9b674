"""TimingWheel: table tests on a tiny wheel (overflow levels in every test) and Hypothesis
properties against a plain dict + sort reference model. No clock, no sleeps."""

from __future__ import annotations

import heapq
import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from wheelq.scheduler.wheel import TimingWheel


def tiny(**kwargs: int) -> TimingWheel[str]:
    """Four 1 ms slots: level 0 spans 4 ms, level 1 16 ms, level 2 64 ms, ..."""
    return TimingWheel(tick_ms=1, wheel_size=4, **kwargs)


def drain(wheel: TimingWheel[str]) -> list[tuple[int, str, int]]:
    """Run the driver loop; return (now_ms of the call, key, due_ms) for every expiry."""
    fired: list[tuple[int, str, int]] = []
    while (wake_ms := wheel.next_expiry_ms()) is not None:
        now_ms = max(wake_ms, wheel.now_ms)
        fired += [(now_ms, key, due) for key, due in wheel.advance_to(now_ms)]
    return fired


# --- construction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"tick_ms": 0}, "tick_ms"),
        ({"tick_ms": -5}, "tick_ms"),
        ({"wheel_size": 1}, "wheel_size"),
        ({"wheel_size": 0}, "wheel_size"),
    ],
)
def test_rejects_out_of_range_parameters(kwargs: dict[str, int], param: str) -> None:
    with pytest.raises(ValueError, match=rf"{param} must be an integer >= \d, got -?\d"):
        TimingWheel(**kwargs)


def test_start_ms_sets_time() -> None:
    wheel = tiny(start_ms=1_000)
    assert wheel.now_ms == 1_000
    wheel.add("a", 1_003)
    assert wheel.advance_to(1_002) == []
    assert wheel.advance_to(1_003) == [("a", 1_003)]


# --- add / advance boundaries ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("due_ms", "not_yet_ms", "due_now_ms"),
    [
        (1, 0, 1),  # next slot of level 0
        (3, 2, 3),  # last slot of level 0
        (4, 3, 4),  # first instant of level 1
        (17, 16, 17),  # level 2
        (1_000_003, 1_000_002, 1_000_003),  # ~10 levels up
        (10**15 + 7, 10**15 + 6, 10**15 + 7),  # ~25 levels up
        (5, 4, 100),  # a large jump still returns it, once
    ],
)
def test_expires_at_due_never_before(due_ms: int, not_yet_ms: int, due_now_ms: int) -> None:
    wheel = tiny()
    wheel.add("a", due_ms)
    assert wheel.advance_to(not_yet_ms) == []
    assert "a" in wheel
    assert wheel.advance_to(due_now_ms) == [("a", due_ms)]
    assert "a" not in wheel
    assert wheel.advance_to(due_now_ms + 10**6) == []


@pytest.mark.parametrize("due_ms", [10, 9, 0, -50])
def test_due_now_or_in_the_past_expires_on_next_advance(due_ms: int) -> None:
    wheel = tiny()
    wheel.advance_to(10)
    wheel.add("a", due_ms)
    wake_ms = wheel.next_expiry_ms()
    assert wake_ms is not None
    assert wake_ms <= min(due_ms, wheel.now_ms)
    assert wheel.advance_to(10) == [("a", due_ms)]  # same now_ms: still delivered
    assert len(wheel) == 0


def test_batch_sorted_by_due_then_insertion_order() -> None:
    wheel = tiny()
    for key, due in [("x", 30), ("y", 7), ("z", 30), ("w", 7), ("v", 2)]:
        wheel.add(key, due)
    wheel.advance_to(5)  # cascades the 30s through levels before they are due
    wheel.add("u", 30)
    wheel.add("t", 1)  # already due: comes first
    assert wheel.advance_to(40) == [
        ("t", 1),
        ("y", 7),
        ("w", 7),
        ("x", 30),
        ("z", 30),
        ("u", 30),
    ]


def test_cascaded_entry_keeps_its_place_before_a_later_direct_insert() -> None:
    wheel = tiny()
    wheel.add("early", 29)  # level 2 now; cascades to level 1 at 16, to level 0 at 28
    wheel.advance_to(27)
    wheel.add("late", 29)  # level 0 spans [27, 31): straight into the bucket for 29
    assert wheel.advance_to(28) == []  # "early" joins that bucket, after "late"
    assert wheel.advance_to(29) == [("early", 29), ("late", 29)]


def test_tick_larger_than_1_never_fires_inside_a_partly_elapsed_tick() -> None:
    wheel: TimingWheel[str] = TimingWheel(tick_ms=10, wheel_size=4)
    for key, due in [("a", 15), ("b", 12), ("c", 19), ("d", 95)]:
        wheel.add(key, due)
    assert wheel.next_expiry_ms() == 12
    assert wheel.advance_to(14) == [("b", 12)]
    assert wheel.next_expiry_ms() == 15  # not 10: the driver must not spin on a half-due bucket
    assert wheel.advance_to(18) == [("a", 15)]
    assert wheel.advance_to(19) == [("c", 19)]
    assert wheel.advance_to(94) == []
    assert wheel.advance_to(95) == [("d", 95)]


# --- replace and cancel ---------------------------------------------------------------------


@pytest.mark.parametrize(("first_ms", "second_ms"), [(5, 50), (50, 5), (3, 1_000), (1_000, 3)])
def test_add_again_rekeys(first_ms: int, second_ms: int) -> None:
    wheel = tiny()
    wheel.add("a", first_ms)
    wheel.add("a", second_ms)
    assert len(wheel) == 1
    assert wheel.due_of("a") == second_ms
    assert wheel.advance_to(min(first_ms, second_ms) - 1) == []
    fired = wheel.advance_to(max(first_ms, second_ms))
    assert fired == [("a", second_ms)]


def test_replace_counts_as_new_insertion() -> None:
    wheel = tiny()
    wheel.add("a", 5)
    wheel.add("b", 5)
    wheel.add("a", 5)
    assert wheel.advance_to(5) == [("b", 5), ("a", 5)]


@pytest.mark.parametrize("advance_first_ms", [0, 8, 60])  # entry in level 3, level 1, level 0
def test_cancel_removes_from_any_level(advance_first_ms: int) -> None:
    wheel = tiny()
    wheel.add("a", 63)
    wheel.add("b", 63)
    assert wheel.advance_to(advance_first_ms) == []
    assert wheel.cancel("a") is True
    assert wheel.cancel("a") is False
    assert "a" not in wheel
    assert wheel.due_of("a") is None
    assert wheel.advance_to(10_000) == [("b", 63)]
    assert wheel.next_expiry_ms() is None


def test_cancel_unknown_and_cancel_already_due() -> None:
    wheel = tiny()
    assert wheel.cancel("nope") is False
    wheel.advance_to(10)
    wheel.add("late", 3)
    assert wheel.cancel("late") is True
    assert wheel.advance_to(10) == []
    assert wheel.next_expiry_ms() is None


def test_cancelled_bucket_does_not_wake_the_driver() -> None:
    wheel = tiny()
    wheel.add("a", 5)
    wheel.add("b", 100)
    wheel.cancel("a")
    wake_ms = wheel.next_expiry_ms()
    assert wake_ms is not None
    assert 5 < wake_ms <= 100


# --- time and next_expiry_ms ----------------------------------------------------------------


def test_advance_never_moves_backwards() -> None:
    wheel = tiny()
    wheel.add("a", 12)
    assert wheel.advance_to(10) == []
    assert wheel.advance_to(3) == []
    assert wheel.now_ms == 10
    wheel.add("late", 7)
    assert wheel.advance_to(5) == []  # a no-op, even with something due
    assert wheel.now_ms == 10
    assert wheel.advance_to(12) == [("late", 7), ("a", 12)]


def test_next_expiry_none_when_empty() -> None:
    wheel = tiny()
    assert wheel.next_expiry_ms() is None
    wheel.add("a", 40)
    assert wheel.next_expiry_ms() is not None
    wheel.advance_to(40)
    assert wheel.next_expiry_ms() is None


@pytest.mark.parametrize("dues_ms", [[1], [3, 2], [4], [15, 16, 17], [63, 64, 65], [10**9, 7]])
def test_next_expiry_never_after_earliest_due(dues_ms: list[int]) -> None:
    wheel = tiny()
    for i, due in enumerate(dues_ms):
        wheel.add(str(i), due)
    wake_ms = wheel.next_expiry_ms()
    assert wake_ms is not None
    assert wake_ms <= min(dues_ms)
    assert wake_ms > wheel.now_ms  # and never in the past when nothing is due


def test_driver_loop_fires_each_entry_exactly_at_its_due_with_tick_1() -> None:
    wheel = tiny()
    rng = random.Random(7)
    dues = {f"k{i}": rng.randrange(1, 5_000) for i in range(500)}
    for key, due in dues.items():
        wheel.add(key, due)
    fired = drain(wheel)
    assert sorted(key for _, key, _ in fired) == sorted(dues)
    assert all(now == due == dues[key] for now, key, due in fired)
    assert [due for _, _, due in fired] == sorted(due for _, _, due in fired)


def test_len_contains_due_of() -> None:
    wheel = tiny()
    assert len(wheel) == 0
    wheel.add("a", 2)
    wheel.add("b", 200)
    wheel.add("b", 300)
    assert len(wheel) == 2
    assert "a" in wheel
    assert "c" not in wheel
    assert (wheel.due_of("a"), wheel.due_of("b"), wheel.due_of("c")) == (2, 300, None)
    wheel.advance_to(2)
    assert len(wheel) == 1
    assert wheel.due_of("a") is None


def test_default_size_matches_heap() -> None:
    wheel: TimingWheel[int] = TimingWheel()
    rng = random.Random(11)
    heap: list[tuple[int, int]] = []
    for key in range(20_000):
        due = rng.choice(
            [rng.randrange(0, 600), rng.randrange(0, 300_000), rng.randrange(0, 10**9)]
        )
        wheel.add(key, due)
        heapq.heappush(heap, (due, key))
    now = 0
    while heap:
        now += rng.choice([1, 17, 511, 512, 100_000, 10**7])
        expected = []
        while heap and heap[0][0] <= now:
            due, key = heapq.heappop(heap)
            expected.append((key, due))
        assert wheel.advance_to(now) == expected  # keys were inserted in ascending order
    assert len(wheel) == 0


def test_a_crowded_millisecond_is_handed_out_in_slices_in_order() -> None:
    wheel: TimingWheel[int] = TimingWheel(tick_ms=1, wheel_size=8192)
    for key in range(1000):
        wheel.add(key, 500)
    wheel.add(1000, 501)
    wheel.add(-1, 499)

    head = wheel.advance_to(501, limit=100)
    assert head == [(-1, 499), *((key, 500) for key in range(99))], "the earliest, to the limit"
    assert wheel.next_expiry_ms() == 500, "the rest is still due"
    wheel.cancel(500)
    wheel.add(2000, 400)  # added already due: after the slice, before the rest
    assert wheel.advance_to(501) == [
        (2000, 400),
        *((key, 500) for key in range(99, 1000) if key != 500),
        (1000, 501),
    ]
    assert len(wheel) == 0
    wheel.add(7, 500 + 8192)  # the slot sliced out is usable again
    assert wheel.advance_to(500 + 8192) == [(7, 500 + 8192)]


def test_no_slices_of_a_bucket_an_earlier_entry_cascaded_into() -> None:
    wheel = tiny()
    wheel.add("early", 10)  # level 1 (bucket from 8)
    wheel.advance_to(7)  # level 0 now spans [7, 11)
    wheel.add("late-1", 10)  # straight into level 0
    wheel.add("late-2", 10)
    wheel.advance_to(8)  # "early" cascades into the same bucket, after them
    batches = wheel.advance_to(10, limit=1) + wheel.advance_to(10)
    assert batches == [("early", 10), ("late-1", 10), ("late-2", 10)]


def test_no_slices_while_another_bucket_is_due_at_the_same_millisecond() -> None:
    wheel = tiny(start_ms=-5)
    wheel.add("first", -4)  # makes the level-0 bucket of slot 0 (older than the next one)
    assert wheel.advance_to(-4) == [("first", -4)]
    wheel.add("early", 8)  # level 1, bucket from 8
    wheel.advance_to(5)  # level 0 now spans [5, 9)
    wheel.add("late-1", 8)  # level 0, slot 0: the older bucket, popped first
    wheel.add("late-2", 8)
    batches = wheel.advance_to(8, limit=1) + wheel.advance_to(8)
    assert batches == [("early", 8), ("late-1", 8), ("late-2", 8)]


def test_no_slices_after_a_coarser_bucket_of_that_millisecond_handed_out_later_entries() -> None:
    """Found by the model below: a level-1 bucket keyed at 40 handed out its entry due 41
    first, so a slice of the level-0 bucket at 40 would have left its entry behind it."""
    wheel = TimingWheel[str](tick_ms=1, wheel_size=4, start_ms=0)
    wheel.add("later", 41)  # level 1: the bucket from 40, older than the next one
    wheel.advance_to(38)
    wheel.add("earlier", 40)  # level 0, at 40 too
    batches = wheel.advance_to(41, limit=0) + wheel.advance_to(41)
    assert batches == [("earlier", 40), ("later", 41)]


# --- properties against a reference model ---------------------------------------------------

KEYS = st.integers(0, 15)
OFFSETS_MS = st.one_of(st.integers(-20, 20), st.integers(0, 300), st.integers(0, 10**7))
STEPS_MS = st.one_of(st.integers(-10, 10), st.integers(0, 300), st.integers(0, 10**7))


class WheelVsModel(RuleBasedStateMachine):
    """Random add/replace/cancel/advance_to against a dict of key -> (due_ms, insertion seq)."""

    def __init__(self) -> None:
        super().__init__()
        self.wheel: TimingWheel[int] = TimingWheel()
        self.model: dict[int, tuple[int, int]] = {}
        self.seq = 0
        self.late: set[int] = set()  # keys added already due: exempt from cross-batch order
        self.prev_now = 0

    @initialize(
        tick_ms=st.sampled_from([1, 1, 1, 3, 10]),
        wheel_size=st.sampled_from([2, 4, 8]),
        start_ms=st.integers(-1_000, 1_000),
    )
    def make(self, tick_ms: int, wheel_size: int, start_ms: int) -> None:
        self.wheel = TimingWheel(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=start_ms)
        self.prev_now = start_ms

    @rule(key=KEYS, offset_ms=OFFSETS_MS)
    def add(self, key: int, offset_ms: int) -> None:
        due = self.wheel.now_ms + offset_ms
        self.wheel.add(key, due)
        self.seq += 1
        self.model[key] = (due, self.seq)
        if due <= self.wheel.now_ms:
            self.late.add(key)
        else:
            self.late.discard(key)

    @precondition(lambda self: len(self.model) > 0)
    @rule(key=KEYS, pick=st.integers(0, 15))
    def add_tied(self, key: int, pick: int) -> None:
        """Reuse a held due time, so insertion order decides between entries."""
        dues = sorted(due for due, _ in self.model.values())
        self.add(key, dues[pick % len(dues)] - self.wheel.now_ms)

    @rule(key=KEYS)
    def cancel(self, key: int) -> None:
        assert self.wheel.cancel(key) is (key in self.model)
        self.model.pop(key, None)
        self.late.discard(key)
        assert key not in self.wheel

    @rule(step_ms=STEPS_MS)
    def advance(self, step_ms: int) -> None:
        self.check_advance(self.wheel.now_ms + step_ms)

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def advance_as_driver(self) -> None:
        wake_ms = self.wheel.next_expiry_ms()
        assert wake_ms is not None
        self.check_advance(max(wake_ms, self.wheel.now_ms))

    @rule(step_ms=STEPS_MS, limit=st.integers(0, 6))
    def advance_in_slices(self, step_ms: int, limit: int) -> None:
        """A limited call, then the rest at the same time: together, exactly one full call."""
        self.check_advance(self.wheel.now_ms + step_ms, limit)

    def check_advance(self, now_ms: int, limit: int | None = None) -> None:
        before_ms = self.wheel.now_ms
        fired = self.wheel.advance_to(now_ms, limit)
        if limit is not None and now_ms >= before_ms:
            fired += self.wheel.advance_to(now_ms)
        if now_ms < before_ms:
            assert fired == []
            assert self.wheel.now_ms == before_ms
            return
        expected = sorted(
            (due, seq, key) for key, (due, seq) in self.model.items() if due <= now_ms
        )
        assert fired == [(key, due) for due, _, key in expected]
        for key, due in fired:
            if key not in self.late:  # scheduled in the future: strictly after the last batch
                assert due > self.prev_now
            del self.model[key]
            self.late.discard(key)
        assert self.wheel.now_ms == now_ms
        self.prev_now = now_ms

    @invariant()
    def mirrors_model(self) -> None:
        assert len(self.wheel) == len(self.model)
        for key in range(16):
            assert (key in self.wheel) is (key in self.model)
            assert self.wheel.due_of(key) == (self.model[key][0] if key in self.model else None)

    @invariant()
    def next_expiry_is_safe(self) -> None:
        wake_ms = self.wheel.next_expiry_ms()
        if not self.model:
            assert wake_ms is None
            return
        earliest = min(due for due, _ in self.model.values())
        assert wake_ms is not None
        assert wake_ms <= earliest
        if earliest <= self.wheel.now_ms:
            assert wake_ms <= self.wheel.now_ms

    def teardown(self) -> None:
        if self.model:  # nothing is lost: a far jump returns every remaining entry
            last_due_ms = max(due for due, _ in self.model.values())
            self.check_advance(max(last_due_ms, self.wheel.now_ms))
        assert len(self.wheel) == 0
        assert self.wheel.next_expiry_ms() is None


WheelVsModel.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestWheelVsModel = WheelVsModel.TestCase
