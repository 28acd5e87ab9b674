"""The reads behind the job lists (`wheelq.core.job_list`): a page of pending jobs or of
pending retries (`list_pending.lua`; `list_retrying_by_due.lua` by due time, and
`list_retrying.lua` by member for the bulk actions), a page of a shard's due line
(`list_held.lua`), stream entries either way, the entries a group holds in flight, and
groups' history records. Each is bounded by its count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wheelq.core.history import SEPARATOR
from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text
from wheelq.store.streams import Entry, parse_entries

ENVELOPE_MAX = 64 * 1024
"""The largest envelope a list row carries whole; a larger one comes back as its size."""
RETRIES_SORTED_MAX = 2000
"""The most pending retries of a shard `retrying_by_due` sorts in one call (6 ms of Redis
at 2,000 on a loaded 2-core machine); a shard with more is walked by due time with
`pending_page`."""


@dataclass(frozen=True, slots=True)
class StoredRow:
    """A pending job or retry as a list script read it."""

    member: bytes
    """Its member in the sorted set: the job id, or a retry's alias ``id<US>group<US>entry``."""
    due_ms: int | None
    """None: no longer pending (an index entry that outlived its retry)."""
    envelope: bytes | None
    """None when it was larger than `ENVELOPE_MAX` (see `size`) or is gone."""
    size: int | None = None
    retry: bool = False
    """In the index of pending retries (`list_pending.lua` says; a retries page's rows are
    all in it)."""
    stamp: str | None = None
    """Which write put its envelope there (`wq_stamp`), when the page was asked for stamps
    (a bulk action's selection records it)."""
    waiting: bool = False
    """Due and waiting on its shard's due line (`key_jobs` reads those too): ready, not
    pending."""


def _rows(flat: Sequence[Any], flagged: bool, stamps: bool) -> list[StoredRow]:
    """Rows of member, due, envelope or size, then its stamp (with `stamps`) and its retry
    flag (`flagged`: else every row is a retry)."""
    width = 3 + stamps + flagged
    out = []
    for i in range(0, len(flat), width):
        member, due, envelope = flat[i : i + 3]
        due_ms = None if due is None or due is False else int(float(due))
        retry = not flagged or bool(flat[i + width - 1])
        stamp = text(flat[i + 3]) if stamps and flat[i + 3] else None
        if isinstance(envelope, int):
            out.append(StoredRow(member, due_ms, None, envelope, retry, stamp))
        else:
            out.append(StoredRow(member, due_ms, envelope or None, None, retry, stamp))
    return out


@dataclass(frozen=True, slots=True)
class DuePage:
    """What a page by due time asks of one shard: up to `count` rows due in [low, high)
    (None: unbounded) after `after` (a page's `next`, or a row's (due, member); None: from
    the first), in (due, member) order, envelopes up to `envelope_max` bytes whole (0: none,
    their sizes only)."""

    low_ms: int | None
    high_ms: int | None
    after: tuple[int, bytes] | None
    count: int
    envelope_max: int = ENVELOPE_MAX

    def args(self, last: str | int) -> list[str | bytes | int]:
        """The page script's ARGV: the due range, the row it goes on after, how many rows,
        the largest envelope returned whole, then `last`."""
        after = self.after
        return [
            "-inf" if self.low_ms is None else self.low_ms,
            "+inf" if self.high_ms is None else self.high_ms,
            "" if after is None else after[0],
            b"" if after is None else after[1],
            self.count,
            self.envelope_max,
            last,
        ]


@dataclass(frozen=True, slots=True)
class PendingPage:
    """A page of one shard's pending jobs, the sorted set's and the far tier's merged."""

    rows: list[StoredRow]
    next: tuple[int, bytes] | None
    """Where the next page starts (after this (due, member)); None: the shard has no more in
    the range. Past the last row, with a member of ``b""``, when the far records one call
    reads ran out: the page is short, and every row due before it has been returned."""
    passed: int = 0
    """Far records read and not returned (dead ones among them)."""


def pending_page(keys: ShardKeys, page: DuePage, stamps: bool = False) -> Call[PendingPage]:
    """`page` of the pending jobs of `keys`' shard, wherever each is stored, and with
    `stamps` each row's stamp. A page may be short and still have a `next`
    (`list_pending.lua`)."""
    args = page.args("1" if stamps else "")

    def parse(reply: Any) -> PendingPage:
        r = check("list_pending", reply)
        following = (int(float(r[2])), bytes(r[3])) if r[1] else None
        return PendingPage(_rows(r[5:], True, stamps), following, int(r[4]))

    return script_call("list_pending", keys, args, parse)


def retrying_page(
    keys: ShardKeys,
    after: bytes | None,
    count: int,
    envelope_max: int = ENVELOPE_MAX,
    stamps: bool = False,
) -> Call[tuple[bool, list[StoredRow]]]:
    """Up to `count` members of the shard's index of pending retries after `after`, with their
    due time and envelope (and with `stamps` their stamp), and whether the index holds more."""

    def parse(reply: Any) -> tuple[bool, list[StoredRow]]:
        r = check("list_retrying", reply)
        return bool(r[1]), _rows(r[2:], False, stamps)

    args: list[str | bytes | int] = [
        b"" if after is None else after,
        count,
        envelope_max,
        "1" if stamps else "",
    ]
    return script_call("list_retrying", keys, args, parse)


def retrying_by_due(
    keys: ShardKeys, page: DuePage, sorted_max: int | None = None
) -> Call[PendingPage | None]:
    """`page` of the pending retries of `keys`' shard, when its index of pending retries
    holds at most `sorted_max` members (default `RETRIES_SORTED_MAX`); None when it holds
    more (`list_retrying_by_due.lua`)."""
    args = page.args(RETRIES_SORTED_MAX if sorted_max is None else sorted_max)

    def parse(reply: Any) -> PendingPage | None:
        r = check("list_retrying_by_due", reply)
        if r[1] == -1:
            return None
        rows = _rows(r[2:], False, False)
        last = rows[-1] if rows else None
        if r[1] and last is not None and last.due_ms is not None:
            return PendingPage(rows, (last.due_ms, last.member))
        return PendingPage(rows, None)

    return script_call("list_retrying_by_due", keys, args, parse)


KEY_SLICE = 2000
"""Entries of a key's list one `key_jobs.lua` call reads (a few ms of Redis at most)."""


@dataclass(frozen=True, slots=True)
class KeySlice:
    """One `key_jobs.lua` call's rows, and the list index to go on from (None: the end)."""

    rows: list[StoredRow]
    next: int | None


def key_jobs(
    keys: ShardKeys,
    key: str,
    start: int,
    stamps: bool = False,
    envelope_max: int = ENVELOPE_MAX,
) -> Call[KeySlice]:
    """The pending jobs and retries of `key` on the shard, and those due on its line, among
    `KEY_SLICE` entries of its list from `start` (the key index, `key_jobs.lua`), in no
    order; envelopes larger than `envelope_max` come as their size (0: every one)."""
    args: list[str | int] = [key, start, KEY_SLICE, envelope_max, "1" if stamps else ""]

    def parse(reply: Any) -> KeySlice:
        flat = check("key_jobs", reply)
        width = 5 if stamps else 4
        rows = []
        for i in range(2, len(flat), width):
            member, due, envelope = flat[i : i + 3]
            kind = text(flat[i + width - 1])
            stamp = text(flat[i + 3]) if stamps else None
            whole = None if isinstance(envelope, int) else envelope
            size = envelope if isinstance(envelope, int) else None
            rows.append(
                StoredRow(member, int(float(due)), whole, size, kind == "r", stamp, kind == "l")
            )
        return KeySlice(rows, None if int(flat[1]) < 0 else int(flat[1]))

    return script_call("key_jobs", keys, args, parse)


HELD_PLAYED_MAX = 10_000
"""The most places of a fair shard's due line one `held_page` plays out (its lanes' turns);
the rows past them are not listed (a line of one lane lists whole)."""


@dataclass(frozen=True, slots=True)
class HeldPage:
    """A page of one shard's due line, in the order its jobs will enter the stream."""

    rows: list[StoredRow]
    more: bool
    """The line holds more after these rows (ask from the place after the last)."""


def held_page(
    keys: ShardKeys, start: int, count: int, envelope_max: int = ENVELOPE_MAX
) -> Call[HeldPage]:
    """Up to `count` jobs of the shard's due line from its place `start` (0: the next to
    enter the stream), as `list_held.lua` reads them (docs/architecture.md, "The due line")."""

    def parse(reply: Any) -> HeldPage:
        r = check("list_held", reply)
        return HeldPage(_rows(r[2:], False, False), bool(r[1]))

    args: list[str | bytes | int] = [start, count, envelope_max, HELD_PLAYED_MAX]
    return script_call("list_held", keys, args, parse)


def entries_after(stream: str, start: str, count: int) -> Call[list[Entry]]:
    """Up to `count` entries of `stream` from `start` (``(id`` excludes it), oldest first."""
    return Call(command=("XRANGE", stream, start, "+", "COUNT", count), parse=parse_entries)


def entries_before(stream: str, start: str, count: int) -> Call[list[Entry]]:
    """Up to `count` entries of `stream` from `start` down (``(id`` excludes it), newest first."""
    return Call(command=("XREVRANGE", stream, start, "-", "COUNT", count), parse=parse_entries)


@dataclass(frozen=True, slots=True)
class InFlight:
    """An entry delivered to a consumer of a group and not acked (XPENDING's extended form)."""

    entry_id: str
    consumer: str
    idle_ms: int
    deliveries: int


def in_flight(stream: str, group: str, start: str, count: int) -> Call[list[InFlight]]:
    """Up to `count` entries in flight in `group` from `start`, oldest first."""

    def parse(reply: Any) -> list[InFlight]:
        return [
            InFlight(
                text(row["message_id"]),
                text(row["consumer"], "replace"),
                int(row["time_since_delivered"]),
                int(row["times_delivered"]),
            )
            for row in reply or ()
        ]

    return Call(
        command=("XPENDING", stream, group, start, "+", count),
        parse=parse,
        options={"parse_detail": True},
    )


def entries_by_id(stream: str, entry_ids: Sequence[str]) -> list[Call[list[Entry]]]:
    """One XRANGE per id (an entry trimmed meanwhile reads as an empty list)."""
    return [
        Call(command=("XRANGE", stream, entry_id, entry_id), parse=parse_entries)
        for entry_id in entry_ids
    ]


def records(keys: ShardKeys, pairs: Sequence[tuple[str, str]]) -> list[Call[list[Any]]]:
    """The history records of (job id, group) pairs: HMGET of the history, then of its
    previous generation (a record is in one of the two)."""
    fields = [job_id + SEPARATOR + group for job_id, group in pairs]
    return [
        Call(command=("HMGET", keys.history, *fields)),
        Call(command=("HMGET", keys.history_old, *fields)),
    ]
