"""Job events: what a topic's events streams hold, and positions in them
(docs/architecture.md, "Job events").

Each shard of a topic with events on has a stream, ``{T:s}:events``, of one entry per event:
``k`` (the kind), and as they apply ``id`` (the job), ``g`` (the consumer group) and ``a``
(the attempt). The entry id is the Redis time it happened. A position names, for every
shard, the last entry read (``-``: none), joined by ``,``: reading after it yields exactly
the events after it that the streams still hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wheelq.errors import InvalidArgumentError

KINDS = ("fired", "started", "succeeded", "retrying", "dead", "cancelled", "paused", "resumed")
"""What an event says happened."""

MAX_LEN = (100, 10_000_000)
"""The range of `EventsConfig.max_len`, per shard."""
MAX_AGE_MS = (60_000, 365 * 86_400_000)
"""The range of `EventsConfig.max_age_ms`."""


@dataclass(frozen=True, slots=True)
class EventsConfig:
    """A topic's events setting, what `Client.set_events` writes and `events_config` reads."""

    enabled: bool = False
    max_len: int = 100_000
    """Events kept per shard (about: trimmed by whole nodes of the stream)."""
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


_ENTRY = re.compile(r"(0|[1-9][0-9]{0,15})-(0|[1-9][0-9]{0,15})")
_NONE = "-"
SINCE = ("now", "start")
"""`since` besides a position: only what happens from now on, or all the streams hold."""


def parse_position(text: object, shards: int) -> list[str]:
    """A position as the last entry id read per shard ("0-0": none).

    Raises:
        InvalidArgumentError: On ``since``: not a position of a topic of `shards` shards.
    """
    if not isinstance(text, str) or len(text) > shards * 34:
        raise _bad_position(text, shards)
    parts = text.split(",")
    if len(parts) != shards:
        raise _bad_position(text, shards)
    out = []
    for part in parts:
        if part == _NONE:
            out.append("0-0")
        elif _ENTRY.fullmatch(part):
            out.append(part)
        else:
            raise _bad_position(text, shards)
    return out


def format_position(position: list[str]) -> str:
    return ",".join(_NONE if entry == "0-0" else entry for entry in position)


def _bad_position(text: object, shards: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        "since",
        f"since must be 'now', 'start' or a position an event gave (for this topic: {shards} "
        f"parts joined by ',', each an entry id 'ms-seq' or '-'), got {text!r:.80}",
    )


def entry_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


def decode_event(entry_id: str, fields: dict[bytes, bytes], position: str) -> Event | None:
    """The event one entry holds; None for a malformed one (skipped, never a crash)."""
    kind = fields.get(b"k", b"").decode("utf-8", "replace")
    if kind not in KINDS:
        return None
    job_id = fields.get(b"id")
    group = fields.get(b"g")
    attempt = fields.get(b"a", b"")
    return Event(
        kind,
        None if job_id is None else job_id.decode("utf-8", "replace"),
        None if group is None else group.decode("utf-8", "replace"),
        int(attempt) if attempt.isdigit() else None,
        entry_ms(entry_id),
        position,
    )
