"""Recurring schedules, pure: the rule (cron in a zone, or an interval), the stored record,
and `plan`, a planning round's writes (docs/architecture.md, "Schedules"). Cron follows
Debian cron across daylight-saving shifts.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import count, islice, takewhile
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgpack
from cronsim import CronSim, CronSimError

from wheelq.core.due import duration_ms
from wheelq.core.options import (
    RUN,
    STORED,
    from_named_slots,
    named_slots,
    stored_unset,
    view,
)
from wheelq.core.payload import read_payload
from wheelq.errors import InvalidArgumentError, int_in

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))
MIN_EVERY_MS = 100
MAX_EVERY_MS = 366 * 86_400_000
MAX_MS = 2**53 - 1
DST_MARGIN_MS = 3 * 3_600_000  # more than any daylight-saving shift (at most 2 h)
_BEYOND_DATETIME = (OverflowError, ValueError, OSError)  # a time outside the years 1-9999
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A validated rule: exactly one of `cron` and `every_ms`, plus its bounds (neither: the
    stand-in of a record that cannot be read, which never runs)."""

    cron: str | None
    every_ms: int | None
    tz: str
    anchor_ms: int
    """The first run of an interval schedule (unused by cron)."""
    start_ms: int
    end_ms: int | None

    def after(self, after_ms: int) -> Iterator[int]:
        """Occurrences strictly after `after_ms`, ascending, up to `end_ms`."""
        after_ms = max(after_ms, self.start_ms - 1)
        if self.every_ms is not None:
            k = max(0, (after_ms - self.anchor_ms) // self.every_ms + 1)
            times: Iterator[int] = (self.anchor_ms + i * self.every_ms for i in count(k))
        elif self.cron is not None:
            times = self._cron(after_ms, reverse=False)
        else:  # an unreadable record's stand-in: it never runs
            return
        for t in times:
            if self.end_ms is not None and t > self.end_ms:
                return
            yield t

    def before(self, at_ms: int) -> Iterator[int]:
        """Occurrences at or before `at_ms`, descending, down to `start_ms`."""
        if self.end_ms is not None:
            at_ms = min(at_ms, self.end_ms)
        if self.every_ms is not None:
            k = (at_ms - self.anchor_ms) // self.every_ms
            times: Iterator[int] = (self.anchor_ms + i * self.every_ms for i in range(k, -1, -1))
        elif self.cron is not None:
            times = self._cron(at_ms + 1, reverse=True)
        else:
            return
        for t in times:
            if t < self.start_ms:
                return
            yield t

    def describe(self, *, tz: bool = True) -> str:
        """The rule as people read it: ``cron 30 2 * * * (Europe/Berlin)``, ``every 5m``."""
        if self.cron is not None:
            return f"cron {self.cron}" + (f" ({self.tz})" if tz else "")
        if self.every_ms is None:
            return "unreadable"
        every = self.every_ms or 0
        unit = next(((u, n) for u, n in _UNITS if every % n == 0), ("ms", 1))
        return f"every {every // unit[1]}{unit[0]}"

    def next_after(self, after_ms: int) -> int | None:
        """The first occurrence after `after_ms`, None when the schedule has ended."""
        return next(self.after(after_ms), None)

    def _cron(self, from_ms: int, *, reverse: bool) -> Iterator[int]:
        """Cron times strictly after `from_ms` (before it with `reverse`), in order.

        cronsim reads its start as wall time, so a start in a repeated hour's second copy would
        read as the first: start `DST_MARGIN_MS` away and drop the near side. Times past the
        years a datetime holds (1-9999) have no occurrence: the iteration ends there.
        """
        assert self.cron is not None
        zone = ZoneInfo(self.tz)
        shift = DST_MARGIN_MS if reverse else -DST_MARGIN_MS
        try:
            start = datetime.fromtimestamp((from_ms + shift) // 1000, UTC).astimezone(zone)
            times = iter(CronSim(self.cron, start, reverse=reverse))
        except _BEYOND_DATETIME:
            return
        while True:
            try:
                dt = next(times)
            except (StopIteration, *_BEYOND_DATETIME):
                return
            ms = int(dt.timestamp()) * 1000
            if ms > MAX_MS:
                return
            if (ms < from_ms) if reverse else (ms > from_ms):
                yield ms


def recurrence(
    *,
    cron: object = None,
    every_ms: object = None,
    tz: object = "UTC",
    start_ms: int,
    end_ms: int | None = None,
    anchor_ms: int | None = None,
) -> Recurrence:
    """Validate a rule: five-field `cron` in zone `tz`, or `every_ms` (UTC) from `anchor_ms`."""
    if (cron is None) == (every_ms is None):
        raise InvalidArgumentError("cron", "pass exactly one of cron= and every_ms=")
    if not isinstance(tz, str) or not tz:
        raise InvalidArgumentError("tz", f"tz must be an IANA zone name like 'UTC', got {tz!r}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # "America": a directory
        raise InvalidArgumentError(
            "tz", f"tz must be an IANA zone name like 'Europe/Berlin', got {tz!r}"
        ) from exc
    start_ms = int_in("start_ms", start_ms, 0, MAX_MS)  # a stored record's, read back
    if end_ms is not None:
        end_ms = int_in("end_ms", end_ms, 0, MAX_MS)
    if anchor_ms is not None:
        anchor_ms = int_in("anchor_ms", anchor_ms, 0, MAX_MS)
    if end_ms is not None and end_ms < start_ms:
        raise InvalidArgumentError(
            "end", f"end must not be before start, got {end_ms} < {start_ms}"
        )
    if every_ms is not None:
        every_ms = int_in("every_ms", every_ms, MIN_EVERY_MS, MAX_EVERY_MS)
        if tz != "UTC":
            raise InvalidArgumentError(
                "tz", f"an every_ms schedule counts elapsed time; tz must be 'UTC', got {tz!r}"
            )
        anchor = start_ms if anchor_ms is None else anchor_ms
        return Recurrence(None, every_ms, tz, anchor, start_ms, end_ms)
    if not isinstance(cron, str):
        raise InvalidArgumentError("cron", f"cron must be a str like '30 2 * * *', got {cron!r}")
    cron = ALIASES.get(cron.strip().lower(), cron)
    if len(cron.split()) == 6:
        raise InvalidArgumentError(
            "cron", f"cron must be five fields; use every_ms for sub-minute runs, got {cron!r}"
        )
    try:
        next(CronSim(cron, datetime.fromtimestamp(0, UTC)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise InvalidArgumentError(
            "cron", f"cron must be five fields (minute hour day month weekday), got {cron!r}: {exc}"
        ) from exc
    return Recurrence(cron, None, tz, start_ms, start_ms, end_ms)


def interval_ms(every: object, every_ms: object) -> Any:
    """An interval given as `every` (seconds: int, float or a timedelta) or as `every_ms`
    (its alias in ms), as ms for `recurrence` (None when neither is given; `every_ms` is
    checked there).

    Raises:
        InvalidArgumentError: Both given, or `every` not seconds from 0.1 to 366 days.
    """
    if every is None:
        return every_ms
    return duration_ms(
        every, every_ms, name="every", alias="every_ms", min_ms=MIN_EVERY_MS, max_ms=MAX_EVERY_MS
    )


Misfire = Literal["once", "all", "skip"]
MISFIRE_POLICIES: tuple[Misfire, ...] = ("once", "all", "skip")
GRACE_MS = 1000
"""A run planned later than this after its time was missed (the misfire policy applies)."""
MAX_CATCH_UP = 10_000
MAX_NAME = 100
RECORD_VERSION = 3
"""3: ``declared``, the task that declared it in code (`App.periodic`); 2: the runs' options
by name (``options``); 1 had their callback alone (``callback``). A version reads the
records of the versions before it."""
_RULE_FIELDS = ("cron", "every_ms", "tz", "anchor_ms", "start_ms", "end_ms")
_RECORD_FIELDS = ("misfire", "max_catch_up", "payload", "max_attempts", "updated_ms")
"""A stored record's fields after its version, in the order written: the rule's, these, then
``callback`` (what version 1 reads) and ``options``."""

_NIL = msgpack.packb(None)  # the payload of an unreadable record's stand-in
_SHORT = reprlib.Repr()  # how much of a payload a schedule's repr shows
_SHORT.maxstring = _SHORT.maxother = 60

_AT = {o.name: i for i, o in enumerate(STORED)}
_NAME_RE = re.compile(rf"[A-Za-z0-9_.:\-]{{1,{MAX_NAME}}}")


def validate_name(name: object) -> str:
    """`name` if it is 1-100 characters from [A-Za-z0-9_.:-] (runs are ``name@ms``)."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidArgumentError(
            "name", f"name must be 1-{MAX_NAME} characters from [A-Za-z0-9_.:-], got {name!r}"
        )
    return name


def validate_misfire(misfire: object, max_catch_up: object) -> tuple[Misfire, int]:
    """Check the misfire policy ("once", "all", "skip") and `max_catch_up` (1-10000)."""
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
    """A recurring schedule as stored, with its state; each run is a job ``name@<ms>``."""

    name: str
    topic: str
    rule: Recurrence
    misfire: Misfire
    """What happens to runs missed while no scheduler ran."""
    max_catch_up: int
    payload: bytes
    max_attempts: int
    options: tuple[Any, ...]
    """The `Envelope` value of each stored option (`core.options.STORED` order): each run
    carries the ones of `core.options.RUN` (the others are unset)."""
    updated_ms: int
    """When it was last defined (the defining client's clock, ms)."""
    paused: bool = False
    planned_ms: int = 0
    """Runs up to this ms have been written as jobs (or skipped)."""
    error: str | None = None
    """Why the stored record cannot be read (None: it can); such a schedule never runs and
    is listed with this reason (`Schedule.stored`)."""
    declared: str = ""
    """The task that declared it in code (`App.periodic`): ``wheelq run`` keeps such a
    schedule matching the declarations and removes it once no longer declared; "" for one
    made with `Admin.schedule` (or the HTTP API, the CLI), which code never removes."""

    @property
    def data(self) -> Any:
        return read_payload(self.payload)

    @property
    def callback(self) -> bytes:
        """The packed callback each run carries (b"": none)."""
        return self.run_option("callback")  # type: ignore[no-any-return]

    def run_option(self, name: str) -> Any:
        """The `Envelope` value of the stored option `name` its runs carry."""
        return self.options[_AT[name]]

    @property
    def run_options(self) -> dict[str, Any]:
        """Each option of `core.options.RUN` by name, as `get()` shows a run's
        (`JobInfo.options`: a callback by its URL only)."""
        return view(self.options, RUN)

    def __repr__(self) -> str:
        """The fields, payload shortened, the callback's URL only (headers may hold credentials)."""
        try:
            data = _SHORT.repr(self.data)
        except Exception:  # msgpack raises several unrelated types
            data = f"<{len(self.payload)} bytes, not a payload>"
        options = "".join(f"{n}={v!r}, " for n, v in self.run_options.items())
        return (
            f"Schedule(name={self.name!r}, topic={self.topic!r}, rule={self.rule!r}, "
            f"misfire={self.misfire!r}, max_catch_up={self.max_catch_up}, data={data}, "
            f"max_attempts={self.max_attempts}, {options}"
            f"updated_ms={self.updated_ms}, paused={self.paused}, planned_ms={self.planned_ms}"
            + ("" if self.error is None else f", error={self.error!r}")
            + (f", declared={self.declared!r}" if self.declared else "")
            + ")"
        )

    def next_run_ms(self, now_ms: int) -> int | None:
        """The first run after `now_ms`; None while paused, once the schedule has ended, or
        when its record cannot be read."""
        if self.paused or self.error is not None:
            return None
        return self.rule.next_after(now_ms)

    def pack(self) -> bytes:
        fields = {
            "v": RECORD_VERSION,
            **{k: getattr(self.rule, k) for k in _RULE_FIELDS},
            **{k: getattr(self, k) for k in _RECORD_FIELDS},
            "callback": self.callback,
            "options": named_slots(self.options),
            "declared": self.declared,
        }
        packed: bytes = msgpack.packb(fields, use_bin_type=True)
        return packed

    @classmethod
    def unpack(cls, topic: str, name: str, data: bytes, state: bytes | str | None) -> Schedule:
        """Decode a stored record and its state (None: a record written a moment ago)."""
        f = msgpack.unpackb(data, raw=False)
        rule = recurrence(**{k: f[k] for k in _RULE_FIELDS})
        text = state.decode() if isinstance(state, bytes) else (state or "0")
        paused = text.startswith("p:")
        planned_ms = int(text[2:] if paused else text)
        own = {k: f[k] for k in _RECORD_FIELDS}
        options = from_named_slots(f["options"] if "options" in f else {"callback": f["callback"]})
        declared = f.get("declared", "")  # versions 1 and 2: made with Admin.schedule
        if not isinstance(declared, str):
            raise TypeError(f"declared must be a str, got {declared!r:.40}")
        return cls(
            name, topic, rule, **own, options=options, paused=paused, planned_ms=planned_ms,
            declared=declared,
        )  # fmt: skip

    def same_definition(self, other: Schedule) -> bool:
        """Whether `other` defines the same runs, its marker included (its state and when it
        was defined aside): what a sync leaves as it is."""
        return self.error is None and other.error is None and _defining(self) == _defining(other)

    @classmethod
    def stored(cls, topic: str, name: str, data: bytes, state: bytes | str | None) -> Schedule:
        """`unpack`, or, for a record it cannot read (written by hand, or by an older wheelq
        that took a value now refused), a stand-in that never runs and names the reason in
        `error`: one bad record never hides the others of a listing."""
        try:
            return cls.unpack(topic, name, data, state)
        except Exception as exc:  # msgpack and the checks raise several unrelated types
            error = f"{type(exc).__name__}: {exc}"[:500]
        text = state.decode(errors="replace") if isinstance(state, bytes) else (state or "")
        never = Recurrence(None, None, "UTC", 0, 0, None)
        unset = stored_unset()
        return cls(
            name, topic, never, "skip", 1, _NIL, 1, unset, 0, text.startswith("p:"), 0, error
        )


def _defining(s: Schedule) -> tuple[Any, ...]:
    return (s.name, s.topic, s.rule, s.misfire, s.max_catch_up, s.payload, s.max_attempts,
            s.options, s.declared)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plan:
    """What one planning round writes for a schedule."""

    runs: list[int]
    """Occurrence ms of the runs to write, ascending."""
    planned_ms: int
    """The new cursor: every run up to here is decided."""
    skipped: int
    """Missed runs not written (at least this many; counted up to 10,000)."""


def plan(schedule: Schedule, now_ms: int, horizon_ms: int, grace_ms: int = GRACE_MS) -> Plan:
    """The runs in ``(schedule.planned_ms, horizon_ms]`` to write now; late ones follow `misfire`.

    Bounded whatever the outage: at most `max_catch_up` + 10,000 missed runs.
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
