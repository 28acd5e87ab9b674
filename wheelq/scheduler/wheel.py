"""Hierarchical timing wheel: the in-memory index of jobs due soon."""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

from sortedcontainers import SortedList

K = TypeVar("K", bound=Hashable)

__all__ = ["TimingWheel"]


class _Bucket(Generic[K]):
    """One slot of one level: the entries whose due time falls in one span of that level's tick."""

    __slots__ = ("cascaded", "items", "key_ms", "uid")

    def __init__(self, uid: int) -> None:
        self.items: dict[K, tuple[int, int]] = {}  # key -> (due_ms, insertion seq)
        self.key_ms: int | None = None  # sort key while in the index, None while not indexed
        self.uid = uid  # unique tie-breaker so the index never compares buckets
        self.cascaded = False  # holds entries cascaded from a coarser level (not in seq order)


class TimingWheel(Generic[K]):
    """A hierarchical timing wheel (Kafka's ``TimingWheel``) that never reads a clock.

    Algorithm:
        Level 0 has ``wheel_size`` buckets of ``tick_ms`` each and covers
        ``[t0, t0 + tick_ms * wheel_size)``, where ``t0`` is the wheel's time rounded down to
        ``tick_ms``. An entry due beyond that goes to an overflow wheel whose tick is the whole
        span of the level below; overflow levels are created lazily, so the number of levels is
        ``ceil(log_wheel_size(horizon / tick_ms))``. A bucket of level ``i`` holds the entries
        due in ``[v * tick_i, (v + 1) * tick_i)`` for one virtual id ``v``; its slot is
        ``v % wheel_size``. Every non-empty bucket sits in one ordered index (a ``SortedList``)
        keyed by its expiration: ``v * tick_i`` for an overflow bucket, the earliest due time in it
        for a level-0 bucket. ``advance_to(now_ms)`` pops buckets from the index while their key is
        ``<= now_ms``, moves the levels' clocks to that key, then returns each entry that is due
        and re-inserts the rest, which cascade to a finer level (Kafka's reinsert). The driver
        sleeps until ``next_expiry_ms()`` instead of ticking empty slots.

    Costs:
        ``add``, ``cancel`` and ``due_of`` are O(1) dict operations, plus an O(log B) index
        insertion when ``add`` makes a bucket non-empty (B = indexed buckets, at most
        ``wheel_size`` per level). ``advance_to`` is O(log B) per bucket popped, O(1) per entry
        expired or cascaded (an entry cascades at most once per level), and a sort of the
        returned batch, which is nearly ordered already. A far-off bucket cascades all at once
        when it comes due, so one call may re-insert many entries. ``cancel`` leaves an emptied
        bucket in the index; ``next_expiry_ms`` and ``advance_to`` drop it when they reach it.
        With ``tick_ms > 1`` a level-0 bucket whose entries are only partly due is rescanned on
        each later advance that reaches its earliest due time (at most ``tick_ms`` rescans).

    Example:
        ``tick_ms=1, wheel_size=4, start_ms=0``: level 0 covers [0, 4) in 1 ms buckets, level 1
        [0, 16) in 4 ms buckets, level 2 [0, 64) in 16 ms buckets.
        ``add("a", 2)`` goes to level 0 (bucket key 2), ``add("b", 9)`` to level 1 (virtual id
        9 // 4 = 2, bucket key 8), ``add("c", 40)`` to level 2 (40 // 16 = 2, bucket key 32).
        ``next_expiry_ms()`` is 2 and ``advance_to(2)`` returns ``[("a", 2)]``. Then
        ``next_expiry_ms()`` is 8, one bucket span early: ``advance_to(8)`` returns ``[]`` but
        cascades ``b`` into level 0, which now covers [8, 12), under key 9. ``advance_to(9)``
        returns ``[("b", 9)]``; ``advance_to(100)`` pops bucket 32 and returns ``[("c", 40)]``.

    Concurrency:
        Not thread-safe. One owner (the wheel driver task) makes every call; no method blocks
        or awaits, so within one asyncio thread each call is atomic. All times are integer
        milliseconds on the caller's one clock; ``now_ms`` never moves backwards.
    """

    __slots__ = (
        "_clock_ms",
        "_index",
        "_interval0_ms",
        "_level_now_ms",
        "_next_seq",
        "_next_uid",
        "_now_ms",
        "_ready",
        "_slots",
        "_tick_ms",
        "_ticks_ms",
        "_wheel_size",
        "_where",
    )

    def __init__(self, *, tick_ms: int = 1, wheel_size: int = 512, start_ms: int = 0) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be an integer >= 1, got {tick_ms!r}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be an integer >= 2, got {wheel_size!r}")
        self._tick_ms = tick_ms
        self._wheel_size = wheel_size
        self._interval0_ms = tick_ms * wheel_size
        self._now_ms = start_ms  # last time passed to advance_to
        self._clock_ms = start_ms  # levels' clock; behind _now_ms only inside advance_to
        self._ticks_ms: list[int] = [tick_ms]
        self._level_now_ms: list[int] = [start_ms - start_ms % tick_ms]
        self._slots: list[list[_Bucket[K] | None]] = [[None] * wheel_size]
        self._index: Any = SortedList()  # (key_ms, uid, bucket) of every non-empty bucket
        self._ready: _Bucket[K] = _Bucket(0)  # added already due; key_ms = min due
        self._where: dict[K, _Bucket[K]] = {}
        self._next_seq = 0
        self._next_uid = 0

    @property
    def now_ms(self) -> int:
        """The wheel's current time: the largest ``now_ms`` passed to ``advance_to``, or start."""
        return self._now_ms

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def due_of(self, key: K) -> int | None:
        bucket = self._where.get(key)
        return None if bucket is None else bucket.items[key][0]

    def add(self, key: K, due_ms: int) -> None:
        """Schedule ``key`` at ``due_ms``, replacing any entry it already has."""
        where = self._where
        old = where.get(key)
        if old is not None:
            del old.items[key]
        self._next_seq += 1
        item = (due_ms, self._next_seq)
        if due_ms > self._now_ms:
            where[key] = self._insert(key, item)
            return
        ready = self._ready
        ready.items[key] = item
        if ready.key_ms is None or due_ms < ready.key_ms:
            ready.key_ms = due_ms
        where[key] = ready

    def cancel(self, key: K) -> bool:
        """Remove ``key`` in O(1). Returns True if it was held."""
        bucket = self._where.pop(key, None)
        if bucket is None:
            return False
        del bucket.items[key]
        return True

    def next_expiry_ms(self) -> int | None:
        """When to call ``advance_to`` next (up to a bucket span early), or None when empty."""
        if not self._where:
            return None
        index = self._index
        while index and not index[0][2].items:  # emptied by cancel: drop it now
            index.pop(0)[2].key_ms = None
        best: int | None = index[0][0] if index else None
        ready = self._ready
        if ready.items and ready.key_ms is not None and (best is None or ready.key_ms < best):
            best = ready.key_ms
        return best

    def advance_to(self, now_ms: int, limit: int | None = None) -> list[tuple[K, int]]:
        """Move the time to ``now_ms`` (never backwards) and return and remove every held
        ``(key, due_ms)`` due by then, sorted by due time then insertion order, across calls too.

        With `limit`, a crowded 1 ms bucket (the only one due at its millisecond, none cascaded
        into it) is handed out in slices of up to `limit`; the rest come first next call.
        """
        if now_ms < self._now_ms:
            return []
        self._now_ms = now_ms
        where = self._where
        out: list[tuple[int, int, K]] = []
        ready = self._ready
        if ready.items:
            for key, (due, seq) in ready.items.items():
                out.append((due, seq, key))
                del where[key]
            ready.items.clear()
        ready.key_ms = None
        index = self._index
        while index and index[0][0] <= now_ms:
            key_ms, _, bucket = index.pop(0)
            bucket.key_ms = None
            items = bucket.items
            if not items:
                continue
            if (
                limit is not None
                and len(out) + len(items) > limit
                # a coarser bucket keyed at this ms may have handed out later entries
                and all(due <= key_ms for due, _, _ in out)
                and self._slice(bucket, key_ms)
            ):
                for key in list(itertools.islice(items, max(0, limit - len(out)))):
                    due, seq = items.pop(key)
                    out.append((due, seq, key))
                    del where[key]
                self._set_clock(key_ms)
                break
            bucket.items = {}
            bucket.cascaded = False
            self._set_clock(key_ms)
            for key, item in items.items():
                if item[0] <= now_ms:
                    out.append((item[0], item[1], key))
                    del where[key]
                else:  # cascade to a finer level (or, at level 0, back into a fresh bucket)
                    target = where[key] = self._insert(key, item)
                    target.cascaded = True
        self._set_clock(now_ms)
        out.sort()  # seq is unique, so keys are never compared
        return [(key, due) for due, _, key in out]

    def _slice(self, bucket: _Bucket[K], key_ms: int) -> bool:
        """Hand out `bucket` in slices when it is a 1 ms level-0 bucket, the only one due."""
        slots = self._slots[0]
        slot = key_ms % self._wheel_size
        if self._tick_ms != 1 or bucket.cascaded or slots[slot] is not bucket:
            return False
        if self._index and self._index[0][0] <= key_ms:  # another bucket due at it
            return False
        slots[slot] = None  # a fresh bucket takes the slot when it is next needed
        bucket.key_ms = key_ms
        self._ready = bucket
        return True

    def _set_clock(self, clock_ms: int) -> None:
        if clock_ms > self._clock_ms:
            self._clock_ms = clock_ms
            level_now = self._level_now_ms
            for level, tick in enumerate(self._ticks_ms):
                level_now[level] = clock_ms - clock_ms % tick

    def _bucket(self, level: int, slot: int) -> _Bucket[K]:
        bucket = self._slots[level][slot]
        if bucket is None:
            self._next_uid += 1
            bucket = self._slots[level][slot] = _Bucket(self._next_uid)
        return bucket

    def _insert(self, key: K, item: tuple[int, int]) -> _Bucket[K]:
        """Put an entry due after the levels' clock in its bucket; return the bucket."""
        due = item[0]
        if due < self._level_now_ms[0] + self._interval0_ms:
            slot = due // self._tick_ms % self._wheel_size
            bucket = self._slots[0][slot] or self._bucket(0, slot)
            bucket.items[key] = item
            old_key = bucket.key_ms
            if old_key is None or due < old_key:  # level 0 is keyed by its earliest due time
                if old_key is not None:
                    self._index.remove((old_key, bucket.uid, bucket))
                bucket.key_ms = due
                self._index.add((due, bucket.uid, bucket))
            return bucket
        size = self._wheel_size
        level = 1
        while True:
            if level == len(self._ticks_ms):  # lazily create the next overflow wheel
                tick = self._ticks_ms[-1] * size
                self._ticks_ms.append(tick)
                self._level_now_ms.append(self._clock_ms - self._clock_ms % tick)
                self._slots.append([None] * size)
            tick = self._ticks_ms[level]
            if due < self._level_now_ms[level] + tick * size:
                vid = due // tick
                bucket = self._bucket(level, vid % size)
                bucket.items[key] = item
                if bucket.key_ms is None:
                    bucket.key_ms = vid * tick
                    self._index.add((bucket.key_ms, bucket.uid, bucket))
                return bucket
            level += 1
