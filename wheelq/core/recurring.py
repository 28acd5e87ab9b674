"""Recurring schedules at rest, and the plan of which runs to write (docs/architecture.md,
"Schedules").

A schedule is stored in its home shard (``crc32(name) % shards``) as a msgpack map, with
its planning state (the ms its runs are planned up to, or paused) beside it. Each run is an
ordinary job with the id ``<name>@<occurrence ms>``, written ahead of time by the leader of
the home shard. `plan` decides which runs one planning round writes:

- runs in ``(cursor, horizon]`` that are not late are written as they are;
- runs already late by more than `GRACE_MS` when planned were missed (no scheduler ran, or
  the schedule was created with ``start`` in the past): ``misfire`` says what happens to
  them: ``"once"`` runs the latest of them now, ``"all"`` runs the latest
  ``max_catch_up`` of them now, in order, and ``"skip"`` runs none.

Example, ``every_ms=1000`` with cursor 10_000, and the node back at now=14_500 after an
outage, horizon 19_500: runs 11_000..13_000 are missed (before 13_500), 14_000..19_000 are
on time; ``"once"`` writes 13_000 and 14_000..19_000, ``"skip"`` only 14_000..19_000.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass
from itertools import islice, takewhile
from typing import Any, Literal

import msgpack

from wheelq.core.callback import Callback
from wheelq.core.checks import int_in
from wheelq.core.payload import decode_payload
from wheelq.core.recurrence import Recurrence, recurrence
from wheelq.errors import InvalidArgumentError

Misfire = Literal["once", "all", "skip"]
MISFIRE_POLICIES: tuple[Misfire, ...] = ("once", "all", "skip")
GRACE_MS = 1000
"""A run planned later than this after its time was missed (the misfire policy applies)."""
MAX_CATCH_UP = 10_000
MAX_NAME = 100
RECORD_VERSION = 1

_SHORT = reprlib.Repr()  # how much of a payload a schedule's repr shows
_SHORT.maxstring = _SHORT.maxother = 60

_NAME_RE = re.compile(rf"[A-Za-z0-9_.:\-]{{1,{MAX_NAME}}}")


def validate_name(name: object) -> str:
    """Return `name` if it can name a schedule (its runs' ids are ``name@ms``).

    Raises:
        InvalidArgumentError: Not 1-100 characters from [A-Za-z0-9_.:-].
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidArgumentError(
            "name", f"name must be 1-{MAX_NAME} characters from [A-Za-z0-9_.:-], got {name!r}"
        )
    return name


def validate_misfire(misfire: object, max_catch_up: object) -> tuple[Misfire, int]:
    """Check the misfire policy and its catch-up bound.

    Raises:
        InvalidArgumentError: `misfire` is not one of "once", "all", "skip", or
            `max_catch_up` is not an int in [1, 10000].
    """
    if misfire not in MISFIRE_POLICIES:
        raise InvalidArgumentError(
            "misfire", f"misfire must be one of 'once', 'all', 'skip', got {misfire!r}"
        )
    return misfire, int_in("max_catch_up", max_catch_up, 1, MAX_CATCH_UP)


def run_id(name: str, occurrence_ms: int) -> str:
    """The job id of a schedule's run at `occurrence_ms`."""
    return f"{name}@{occurrence_ms}"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring schedule as stored, with its state.

    Attributes:
        name: Unique within its topic; its runs are jobs ``name@<occurrence ms>``.
        topic: Where its runs are enqueued.
        rule: When it runs (cron in a zone, or every_ms; start and end).
        misfire: What happens to runs missed while no scheduler ran.
        max_catch_up: Most missed runs run late under ``misfire="all"``.
        payload: The msgpack payload each run carries.
        max_attempts: Attempts each run gets.
        callback: The packed callback each run carries (b"": none).
        updated_ms: When it was last defined (the defining client's clock, ms).
        paused: True between `pause_schedule` and `resume_schedule`.
        planned_ms: Runs up to this ms have been written as jobs (or skipped).
    """

    name: str
    topic: str
    rule: Recurrence
    misfire: Misfire
    max_catch_up: int
    payload: bytes
    max_attempts: int
    callback: bytes
    updated_ms: int
    paused: bool = False
    planned_ms: int = 0

    @property
    def data(self) -> Any:
        """The payload, decoded."""
        return decode_payload(self.payload)

    def __repr__(self) -> str:
        """The fields, with the payload decoded (shortened as `reprlib` does) instead of its
        msgpack bytes, and the callback's URL only (its headers may hold credentials)."""
        try:
            data = _SHORT.repr(self.data)
        except Exception:  # msgpack raises several unrelated types
            data = f"<{len(self.payload)} bytes, not a payload>"
        callback: str | None = None
        if self.callback:
            try:
                callback = Callback.unpack(self.callback).url
            except Exception:  # msgpack raises several unrelated types
                callback = f"<{len(self.callback)} bytes, not a callback>"
        return (
            f"Schedule(name={self.name!r}, topic={self.topic!r}, rule={self.rule!r}, "
            f"misfire={self.misfire!r}, max_catch_up={self.max_catch_up}, data={data}, "
            f"max_attempts={self.max_attempts}, callback={callback!r}, "
            f"updated_ms={self.updated_ms}, paused={self.paused}, planned_ms={self.planned_ms})"
        )

    def next_run_ms(self, now_ms: int) -> int | None:
        """The first run after `now_ms`; None while paused or once the schedule has ended."""
        if self.paused:
            return None
        return self.rule.next_after(now_ms)

    def pack(self) -> bytes:
        r = self.rule
        fields = {
            "v": RECORD_VERSION,
            "cron": r.cron,
            "every_ms": r.every_ms,
            "tz": r.tz,
            "anchor_ms": r.anchor_ms,
            "start_ms": r.start_ms,
            "end_ms": r.end_ms,
            "misfire": self.misfire,
            "max_catch_up": self.max_catch_up,
            "payload": self.payload,
            "max_attempts": self.max_attempts,
            "callback": self.callback,
            "updated_ms": self.updated_ms,
        }
        packed: bytes = msgpack.packb(fields, use_bin_type=True)
        return packed

    @classmethod
    def unpack(cls, topic: str, name: str, data: bytes, state: bytes | str | None) -> Schedule:
        """Decode a stored record and its state (None: a record written a moment ago)."""
        f = msgpack.unpackb(data, raw=False)
        rule = recurrence(
            cron=f["cron"],
            every_ms=f["every_ms"],
            tz=f["tz"],
            start_ms=f["start_ms"],
            end_ms=f["end_ms"],
            anchor_ms=f["anchor_ms"],
        )
        text = state.decode() if isinstance(state, bytes) else (state or "0")
        paused = text.startswith("p:")
        return cls(
            name,
            topic,
            rule,
            f["misfire"],
            f["max_catch_up"],
            f["payload"],
            f["max_attempts"],
            f["callback"],
            f["updated_ms"],
            paused,
            int(text[2:] if paused else text),
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """What one planning round writes for a schedule.

    Attributes:
        runs: Occurrence ms of the runs to write, ascending.
        planned_ms: The schedule's new cursor: every run up to here is decided.
        skipped: Missed runs not written (at least this many; counted up to 10,000).
    """

    runs: list[int]
    planned_ms: int
    skipped: int


def plan(schedule: Schedule, now_ms: int, horizon_ms: int, grace_ms: int = GRACE_MS) -> Plan:
    """The runs in ``(schedule.planned_ms, horizon_ms]`` to write now (see the module doc).

    Its cost is bounded whatever the outage: at most `max_catch_up` (or 1) missed runs
    are looked at, and on-time runs span at most ``horizon_ms - now_ms + grace_ms``.
    """
    cursor = schedule.planned_ms
    rule = schedule.rule
    if horizon_ms <= cursor:
        return Plan([], cursor, 0)
    late = min(now_ms - grace_ms, horizon_ms + 1)  # runs before this were missed
    caught: list[int] = []
    skipped = 0
    if cursor < late - 1:
        keep = {"skip": 0, "once": 1, "all": schedule.max_catch_up}[schedule.misfire]
        newer = takewhile(lambda t: t > cursor, rule.before(late - 1))
        missed = list(islice(newer, keep + MAX_CATCH_UP))
        caught = sorted(missed[:keep])
        skipped = len(missed) - len(caught)
    on_time = []
    for t in rule.after(max(cursor, late - 1)):
        if t > horizon_ms:
            break
        on_time.append(t)
    return Plan(caught + on_time, horizon_ms, skipped)
