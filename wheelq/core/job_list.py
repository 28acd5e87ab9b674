"""Lists of a topic's jobs by state (docs/architecture.md, "Job lists"): the states a list
can hold, one listed job (`ListedJob`), a page (`JobPage`), the filter, and the cursor.

A page goes on from a cursor by key, never by offset: each state's rows have a total order
(`SortKey`), and the cursor names the last row's key, so a page starts right after it
whatever fired, settled or was cancelled meanwhile. A cursor is opaque to callers: it holds
the topic and the state it was made for, and a cursor of another topic or state is an
`InvalidArgumentError` naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack

from wheelq.core.due import At, at_ms
from wheelq.core.history import JobState
from wheelq.core.keys import validate_group
from wheelq.core.options import KINDS, validate_key, validate_priority
from wheelq.core.retry import Reason
from wheelq.errors import InvalidArgumentError


class ListState(StrEnum):
    """The states a job list holds; the words are `JobState`'s where the state is one."""

    PENDING = JobState.PENDING.value
    """Waiting for its due time, first attempt; by due time, soonest first."""
    AWAITING = JobState.AWAITING.value
    """Awaiting the job it follows or a flow's children (no due time yet); by id (a
    generated id's order is its enqueue order)."""
    RETRYING = JobState.RETRYING.value
    """An attempt failed and the next waits for its due time; by due time, soonest first,
    with the error."""
    READY = JobState.READY.value
    """Fired, not delivered to a consumer group yet (a row per group); oldest first. Then the
    jobs waiting on the due line (`ListedJob.waiting`: due, not fired yet; a row each), in
    the order they will enter the stream."""
    RUNNING = JobState.RUNNING.value
    """Delivered to a worker of a group, not settled (a row per group): running, or read
    ahead by its worker (`ListedJob.read_ahead`); oldest first."""
    SUCCEEDED = JobState.SUCCEEDED.value
    """A run whose handler returned, while its stream entry is kept; newest first."""
    FAILED = "failed"
    """A run whose handler failed (what followed: a retry, or the dead letters), while its
    stream entry is kept and its group's record names it; newest first."""
    DEAD = JobState.DEAD.value
    """In the dead-letter streams (a row per dead letter); oldest first."""


LIST_STATES = tuple(s.value for s in ListState)
DUE_STATES = frozenset({ListState.PENDING, ListState.RETRYING})
"""The states whose rows `due_after` / `due_before` filter."""
GROUP_STATES = frozenset(ListState) - {ListState.PENDING, ListState.AWAITING}
"""The states whose rows belong to one consumer group (`group` filters them)."""
MAX_LIST_LIMIT = 1000
PREVIEW_CHARS = 120
"""A row's payload preview: its JSON text, cut to this many characters."""


def list_state(state: object) -> ListState:
    """`state` as a `ListState`, else InvalidArgumentError naming ``state``."""
    if isinstance(state, str) and state in LIST_STATES:
        return ListState(state)
    raise InvalidArgumentError(
        "state", f"state must be one of {', '.join(LIST_STATES)}, got {state!r:.60}"
    )


@dataclass(frozen=True, slots=True)
class ListedJob:
    """One row of a job list; fields that do not apply to its state are None."""

    id: str | None
    """None only for a dead letter too malformed to name its job."""
    topic: str
    state: ListState
    shard: int
    due_ms: int | None = None
    """When it is (pending, retrying) or was (fired) due, ms on the Redis clock."""
    attempt: int | None = None
    max_attempts: int | None = None
    enqueued_ms: int | None = None
    """When this attempt was written (writer's clock): its age is now minus this."""
    preview: str | None = None
    """The payload's first characters as JSON text (`PREVIEW_CHARS`); None when unknown."""
    payload_bytes: int | None = None
    """The stored payload's size."""
    group: str | None = None
    """The consumer group the row is about (a retry's, a delivery's, a dead letter's)."""
    entry_id: str | None = None
    """Fired: the stream entry (``ms-seq``: ms = when it fired)."""
    consumer: str | None = None
    """RUNNING: the worker holding it."""
    since_ms: int | None = None
    """RUNNING: since when it is delivered, or since its claim was last refreshed (a worker
    refreshes the claims it holds three times a ``visibility_timeout_ms``), Redis clock."""
    deliveries: int | None = None
    """RUNNING: how often the entry was delivered (> 1: taken over)."""
    started_ms: int | None = None
    """RUNNING: when its worker started the handler on it, Redis clock (as the worker's
    heartbeat says: within a beat); None: not started (`read_ahead`), or not known."""
    read_ahead: bool | None = None
    """RUNNING: True when its worker holds it without running it yet (read ahead of its
    slots, or waiting for a flow limit's turn or a paused group), False when it runs (since
    `started_ms`); None when not known: its worker has not beaten since it took the entry,
    or its consumer does not beat (a pull consumer)."""
    finished_ms: int | None = None
    """SUCCEEDED, FAILED, RETRYING, DEAD: when the attempt ended."""
    duration_ms: int | None = None
    """SUCCEEDED: how long the handler ran."""
    error: str | None = None
    """RETRYING, FAILED, DEAD: the attempt's error."""
    reason: str | None = None
    """DEAD: failed | deliveries | malformed."""
    ref: str | None = None
    """DEAD: ``"shard/entry-id"`` of the dead letter (what replay and purge take)."""
    lane: str | None = None
    """Fired: the stream it is in: ``ready``, or ``callbacks`` for a job with a callback."""
    priority: int | None = None
    """Its priority (0-9, higher first; 5 when it was given none); None when not known (a
    pending job whose envelope a list does not read, a field no writer spells)."""
    key: str | None = None
    """Its key (`Job.key`); None: none, or not known (an envelope a list does not read)."""
    waiting: bool = False
    """READY: due and waiting on its shard's due line for its turn to enter the stream
    (docs/architecture.md, "The due line"): not fired yet, so no `entry_id` or `group`."""


def stored_priority(raw: bytes | None) -> int | None:
    """A priority as an entry field (or an envelope slot) spells it (absent or empty: 5);
    None when it spells none."""
    try:
        return int(KINDS["priority"].read(raw or b""))
    except ValueError:
        return None


class JobPage(list[ListedJob]):
    """A page of a job list; `next` is the cursor of the page after it (None: the end).

    A page may hold fewer rows than its limit and still have a next one: it stopped where
    the rows it may read in one call ran out (rows that another state holds are read past)."""

    next: str | None = None


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which rows a list keeps: a due range (``due_after <= due < due_before``, pending and
    retrying), a consumer group, a dead letter's reason, a priority, a key (every state; a
    row whose priority or key is not known is left out; pending and retrying jobs of a key
    are read through the key index). None: any."""

    due_after_ms: int | None = None
    due_before_ms: int | None = None
    group: str | None = None
    reason: str | None = None
    priority: int | None = None
    key: str | None = None

    @classmethod
    def of(
        cls,
        due_after: At | None = None,
        due_before: At | None = None,
        group: object = None,
        reason: object = None,
        priority: object = None,
        key: object = None,
    ) -> JobFilter:
        """The filter `Admin.jobs` and `Admin.bulk` are given (due times in epoch seconds or
        aware datetimes), each part checked on its own; `check` checks it against a state.
        """
        low = None if due_after is None else at_ms(due_after, "due_after")
        high = None if due_before is None else at_ms(due_before, "due_before")
        if group is not None:
            validate_group(group)
        if reason is not None and reason not in set(Reason):
            accepted = ", ".join(r.value for r in Reason)
            raise InvalidArgumentError(
                "reason", f"reason must be one of {accepted} (or None), got {reason!r:.60}"
            )
        return cls(
            low,
            high,
            None if group is None else str(group),
            None if reason is None else str(reason),
            None if priority is None else validate_priority(priority),
            None if key is None else validate_key(key),
        )

    def check(self, state: ListState) -> None:
        """InvalidArgumentError naming the first part that `state`'s list cannot filter by."""
        for name, value in (("due_after", self.due_after_ms), ("due_before", self.due_before_ms)):
            if value is not None and state not in DUE_STATES:
                raise InvalidArgumentError(
                    name, f"{name} filters the states pending and retrying, not {state.value}"
                )
        if self.group is not None and state not in GROUP_STATES:
            raise InvalidArgumentError(
                "group", f"group filters every state but pending, not {state.value}"
            )
        if self.reason is not None and state is not ListState.DEAD:
            raise InvalidArgumentError(
                "reason", f"reason filters the state dead, not {state.value}"
            )

    def keeps(self, job: ListedJob) -> bool:
        """Whether a row read from its state's list is of the filter's priority and key (any:
        yes); the other parts are read where the rows are."""
        return (self.priority is None or job.priority == self.priority) and (
            self.key is None or job.key == self.key
        )

    def due_in(self, due_ms: int | None) -> bool:
        """Whether a row due at `due_ms` is in the due range."""
        if due_ms is None:
            return self.due_after_ms is None and self.due_before_ms is None
        return (self.due_after_ms is None or due_ms >= self.due_after_ms) and (
            self.due_before_ms is None or due_ms < self.due_before_ms
        )

    def empty(self) -> bool:
        """Whether the due range holds no time at all."""
        return (
            self.due_after_ms is not None
            and self.due_before_ms is not None
            and self.due_before_ms <= self.due_after_ms
        )


SortKey = tuple[Any, ...]
"""A row's place in its list: pending and retrying (due ms, member bytes); fired states
(entry ms, entry seq, shard, lane, group); a job on the due line (`LINE_MS`, its place on
its shard's line, shard, `LINE_LANE`, ""), after every entry; dead (the dead letter's ref)."""
LINE_MS = 2**53
"""A due-line row's first key part: past any entry's ms, so the line follows the streams."""
LINE_LANE = 2
"""A due-line row's lane part (the streams' are their places in `GROUP_LANES`: 0, 1)."""

_CURSOR_VERSION = 1


def encode_cursor(topic: str, state: ListState, key: SortKey) -> str:
    """The cursor of the page after the row at `key`."""
    packed = msgpack.packb([_CURSOR_VERSION, topic, state.value, list(key)], use_bin_type=True)
    return base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")


def decode_cursor(cursor: object, topic: str, state: ListState) -> SortKey:
    """The key a cursor names, else InvalidArgumentError naming ``cursor``: not one, or one
    of another topic or state."""
    if not isinstance(cursor, str) or not 0 < len(cursor) <= 4096:
        raise InvalidArgumentError(
            "cursor", f"cursor must be the `next` of an earlier page, got {cursor!r:.60}"
        )
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, of_topic, of_state, key = msgpack.unpackb(raw, raw=False, use_list=True)
    except (ValueError, TypeError, binascii.Error, msgpack.UnpackException):
        raise InvalidArgumentError(
            "cursor", f"cursor must be the `next` of an earlier page, got {cursor!r:.60}"
        ) from None
    if version != _CURSOR_VERSION or not isinstance(key, list):
        raise InvalidArgumentError("cursor", "cursor is not one this version wrote")
    if of_topic != topic or of_state != state.value:
        raise InvalidArgumentError(
            "cursor",
            f"cursor is a page of topic {of_topic!r:.60}, state {of_state!r:.20}; "
            f"this list is topic {topic!r:.60}, state {state.value!r}",
        )
    if not _key_ok(state, key):
        raise InvalidArgumentError("cursor", "cursor does not name a place in this list")
    return tuple(key)


def _key_ok(state: ListState, key: Sequence[Any]) -> bool:
    def ints(*values: Any) -> bool:
        return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)

    if state in (ListState.PENDING, ListState.AWAITING, ListState.RETRYING):
        return len(key) == 2 and ints(key[0]) and isinstance(key[1], bytes)
    if state is ListState.DEAD:
        return len(key) == 1 and isinstance(key[0], str) and len(key[0]) <= 100
    return (
        len(key) == 5
        and ints(key[0], key[1], key[2], key[3])
        and isinstance(key[4], str)
        and len(key[4]) <= 1000
    )
