"""When a recurring schedule runs: a cron expression in a time zone, or a fixed interval.

Pure: it turns a rule into occurrence times (epoch ms) and never reads a clock.

Cron expressions are evaluated by cronsim in the schedule's IANA time zone, with
Debian cron's daylight-saving rules, checked by ``tests/unit/test_recurrence.py``:

- spring forward: a run whose local time does not exist that day runs at the next
  valid time (``30 2 * * *`` in Europe/Berlin on 2026-03-29 runs at 03:00 CEST);
- fall back: a run whose local time exists twice runs once, at the first
  (``30 2 * * *`` on 2026-10-25 runs at 02:30 CEST, not again at 02:30 CET);
  a rule with a wildcard hour (``*/30 * * * *``) runs in both hours, as wall-clock
  intervals should.

An interval schedule (``every_ms``) runs at ``anchor_ms + k * every_ms`` for k >= 0: pure
elapsed time, unaffected by time zones. Both kinds run only at or after ``start_ms`` and
at or before ``end_ms`` (when set).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from wheelq.core.checks import int_in
from wheelq.errors import InvalidArgumentError

MIN_EVERY_MS = 100
MAX_EVERY_MS = 366 * 86_400_000
MAX_MS = 2**53 - 1
DST_MARGIN_MS = 3 * 3_600_000
"""More than any daylight-saving shift (at most 2 h): a wall time this far from a repeated
hour is outside it."""
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The named schedules of cron, as the five fields they stand for."""


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A validated rule: exactly one of `cron` and `every_ms`, plus its bounds."""

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
            times: Iterator[int] = (self.anchor_ms + i * self.every_ms for i in _count(k))
        else:
            times = self._cron(after_ms, reverse=False)
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
        else:
            times = self._cron(at_ms + 1, reverse=True)
        for t in times:
            if t < self.start_ms:
                return
            yield t

    def next_after(self, after_ms: int) -> int | None:
        """The first occurrence after `after_ms`, None when the schedule has ended."""
        return next(self.after(after_ms), None)

    def _cron(self, from_ms: int, *, reverse: bool) -> Iterator[int]:
        """Cron times strictly after `from_ms` (before it, with `reverse`), in order.

        cronsim reads its start as a local wall time, so a start inside the second copy of a
        repeated hour would be taken for the first (and the run after it found too early).
        Iteration starts `DST_MARGIN_MS` further away, outside any repeated hour, and the
        times on the near side of `from_ms` are dropped."""
        assert self.cron is not None
        zone = ZoneInfo(self.tz)
        shift = DST_MARGIN_MS if reverse else -DST_MARGIN_MS
        start = datetime.fromtimestamp((from_ms + shift) // 1000, UTC).astimezone(zone)
        for dt in CronSim(self.cron, start, reverse=reverse):
            ms = int(dt.timestamp()) * 1000
            if ms > MAX_MS:
                return
            if (ms < from_ms) if reverse else (ms > from_ms):
                yield ms


def _count(start: int) -> Iterator[int]:
    i = start
    while True:
        yield i
        i += 1


def recurrence(
    *,
    cron: object = None,
    every_ms: object = None,
    tz: object = "UTC",
    start_ms: int,
    end_ms: int | None = None,
    anchor_ms: int | None = None,
) -> Recurrence:
    """Validate a rule.

    Args:
        cron: A five-field cron expression (minute hour day month weekday; cronsim's
            syntax, with ``L`` and ``#``), or one of `ALIASES` (``@daily``, ``@hourly``, ...).
        every_ms: An interval in ms, 100 ms to 366 days.
        tz: The IANA zone cron times are read in ("Europe/Berlin"); only "UTC" is
            accepted with `every_ms`, which does not depend on one.
        start_ms: No run before this (epoch ms).
        end_ms: No run after this (epoch ms), None for no end.
        anchor_ms: An interval schedule's first run (default `start_ms`).

    Raises:
        InvalidArgumentError: Both or neither of `cron` and `every_ms`, a cron expression
            cronsim refuses, an interval out of range, an unknown zone, or `end_ms`
            before `start_ms`.
    """
    if (cron is None) == (every_ms is None):
        raise InvalidArgumentError("cron", "pass exactly one of cron= and every_ms=")
    if not isinstance(tz, str) or not tz:
        raise InvalidArgumentError("tz", f"tz must be an IANA zone name like 'UTC', got {tz!r}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgumentError(
            "tz", f"tz must be an IANA zone name like 'Europe/Berlin', got {tz!r}"
        ) from exc
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
            "cron",
            f"cron must be five fields (minute hour day month weekday), got {cron!r}: {exc}",
        ) from exc
    return Recurrence(cron, None, tz, start_ms, start_ms, end_ms)
