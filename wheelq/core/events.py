"""Job events: what a topic's events streams hold, and positions in them
(docs/architecture.md, "Job events").

Each shard of a topic with events on has a stream, ``{T:s}:events``. An entry holds the
events of one kind and group that one script call wrote (a settler round's successes, a
firing round's jobs, one job's cancellation): ``k`` (the kind), ``g`` (the consumer group,
absent for none), ``j`` (msgpack: job id, attempt, job id, attempt, ...; absent for a
group's paused and resumed) and ``c`` (the shard's running count of events, for trimming).
The entry id is the Redis time they happened. A position names, for every shard, how far
it was read: the last entry read whole (``ms-seq``), the first `n` events of an entry
(``ms-seq.n``) or nothing (``-``), joined by ``,``; reading after it yields exactly the
events after it that the streams still hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgpack

from wheelq.errors import InvalidArgumentError

KINDS = (
    "fired",
    "started",
    "succeeded",
    "retrying",
    "dead",
    "cancelled",
    "expired",
    "paused",
    "resumed",
)
"""What an event says happened."""

MAX_LEN = (100, 10_000_000)
"""The range of `EventsConfig.max_len`, per shard."""
MAX_AGE_MS = (60_000, 365 * 86_400_000)
"""The range of `EventsConfig.max_age_ms`."""


@dataclass(frozen=True, slots=True)
class EventsConfig:
    """A topic's events setting, what `Admin.set_events` writes and `events_config` reads."""

    enabled: bool = False
    max_len: int = 100_000
    """Events kept per shard: the last this many, and up to one stream entry's more (the
    trimmer of the scheduler node leading the shard drops whole entries)."""
    max_age_ms: int = 86_400_000
    """Events older than this are trimmed by the scheduler node leading the shard."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise InvalidArgumentError("enabled", f"enabled must be a bool, got {self.enabled!r}")
        for name, (low, high) in (("max_len", MAX_LEN), ("max_age_ms", MAX_AGE_MS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgumentError(
                    name, f"{name} must be an int in [{low}, {high}], got {value!r:.40}"
                )

    def fields(self) -> dict[str, int | None]:
        """The fields of each shard's ``{T:s}:limits`` hash (None: remove it)."""
        return {
            "events": self.max_len if self.enabled else None,
            "events_age": self.max_age_ms if self.enabled else None,
        }

    @classmethod
    def from_fields(cls, raw: dict[bytes, bytes]) -> EventsConfig:
        """Read back `fields` (a stored value out of range reads as the default)."""
        got = {k.decode(): v for k, v in raw.items() if k in (b"events", b"events_age")}
        if "events" not in got:
            return cls()
        try:
            return cls(True, int(got["events"]), int(got.get("events_age", b"86400000")))
        except (ValueError, InvalidArgumentError):
            return cls(True)


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to a job (or a group: paused, resumed)."""

    kind: str
    """One of `KINDS`."""
    job_id: str | None
    """None for paused and resumed."""
    group: str | None
    """The consumer group (started, succeeded, retrying, dead, paused, resumed); None when
    it concerns every group (fired, cancelled, a topic paused as a whole)."""
    attempt: int | None
    at_ms: int
    """When it happened (Redis clock ms: the entry's id)."""
    position: str
    """Where to resume to read the events after this one (`events(since=...)`)."""


_PART = re.compile(r"((?:0|[1-9][0-9]{0,15})-(?:0|[1-9][0-9]{0,15}))(?:\.([1-9][0-9]{0,5}))?")
_NONE = "-"
PART_CHARS = 40
"""The longest part of a position, one shard's."""
SINCE = ("now", "start")
"""`since` besides a position: only what happens from now on, or all the streams hold."""

Mark = tuple[str, int]
"""How far one shard was read: an entry id ("0-0": none) and how many of that entry's events
(0: all of them)."""


def parse_position(text: object, shards: int) -> list[Mark]:
    """A position as how far each shard was read.

    Raises:
        InvalidArgumentError: On ``since``: not a position of a topic of `shards` shards.
    """
    if not isinstance(text, str) or len(text) > shards * (PART_CHARS + 1):
        raise _bad_position(text, shards)
    parts = text.split(",")
    if len(parts) != shards:
        raise _bad_position(text, shards)
    out: list[Mark] = []
    for part in parts:
        if part == _NONE:
            out.append(("0-0", 0))
        elif m := _PART.fullmatch(part):
            out.append((m[1], int(m[2] or 0)))
        else:
            raise _bad_position(text, shards)
    return out


def format_position(position: list[Mark]) -> str:
    return ",".join(_format_mark(mark) for mark in position)


def _format_mark(mark: Mark) -> str:
    entry, read = mark
    if entry == "0-0":
        return _NONE
    return f"{entry}.{read}" if read else entry


def _bad_position(text: object, shards: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        "since",
        f"since must be 'now', 'start' or a position an event gave (for this topic: {shards} "
        f"parts joined by ',', each an entry id 'ms-seq', 'ms-seq.n' or '-'), got {text!r:.80}",
    )


def entry_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


Happened = tuple[str, str | None, str | None, int | None]
"""One event as an entry holds it: kind, job id, group, attempt."""


def decode_entry(fields: dict[bytes, bytes]) -> list[Happened]:
    """The events one entry holds, in order; none for a malformed one (skipped, never a
    crash)."""
    kind = fields.get(b"k", b"").decode("utf-8", "replace")
    if kind not in KINDS:
        return []
    raw_group = fields.get(b"g")
    group = None if raw_group is None else raw_group.decode("utf-8", "replace")
    packed = fields.get(b"j")
    if packed is None:
        return [(kind, None, group, None)]
    try:
        jobs = msgpack.unpackb(packed, raw=False)
    except (ValueError, msgpack.UnpackException):
        return []
    if not isinstance(jobs, list):
        return []
    out: list[Happened] = []
    for job_id, attempt in zip(jobs[::2], jobs[1::2], strict=False):
        if not isinstance(job_id, str):
            continue
        known = isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 0
        out.append((kind, job_id, group, attempt if known else None))
    return out


def events_of(
    entry_id: str, fields: dict[bytes, bytes], position: list[Mark], shard: int, skip: int = 0
) -> list[Event]:
    """The events of one entry of `shard` past its first `skip`, each with the position
    after it; leaves `position` at the entry read whole."""
    happened = decode_entry(fields)
    out: list[Event] = []
    at = entry_ms(entry_id)
    for n, (kind, job_id, group, attempt) in enumerate(happened[skip:], start=skip + 1):
        position[shard] = (entry_id, 0 if n == len(happened) else n)
        out.append(Event(kind, job_id, group, attempt, at, format_position(position)))
    position[shard] = (entry_id, 0)
    return out
