"""Due times: `delay=` / `at=` (and a debounce) validated and converted to ms; nothing here
reads a clock (docs/architecture.md, invariant 6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from wheelq.errors import InvalidArgumentError, InvalidDelayError

MAX_DELAY_S = 10 * 365 * 86_400  # ten years
MAX_DELAY_MS = MAX_DELAY_S * 1000
MAX_AT_MS = 2**53 - 1  # exact in a sorted-set score (a double)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Delay = float | int | timedelta
At = float | int | datetime


_WIRE = {"delay": "d", "at": "a", "shift": "s"}


@dataclass(frozen=True, slots=True)
class DueSpec:
    """When a job is due: `value_ms` after the script's ``TIME``, at `value_ms`, or (a
    ``shift``, which only `reschedule.lua` takes) `value_ms` from its own due time."""

    kind: Literal["delay", "at", "shift"]
    value_ms: int
    wire: tuple[str, int] = field(init=False, repr=False, compare=False)
    """``("d", ms)``, ``("a", ms)`` or ``("s", ms)`` as the scripts take them; made once
    per batch."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire", (_WIRE[self.kind], self.value_ms))


NOW = DueSpec("delay", 0)


def due_spec(delay: Delay | None = None, at: At | None = None, *, now_ms: int) -> DueSpec:
    """`delay` (0 to ten years) or `at` (at most ten years ahead) as a `DueSpec`."""
    if delay is not None and at is not None:
        raise InvalidDelayError("delay", "pass delay or at, not both")
    if at is not None:
        return DueSpec("at", at_ms(at, latest_ms=latest_at_ms(now_ms)))
    if delay is None:
        return NOW
    return DueSpec("delay", delay_ms(delay))


def latest_at_ms(now_ms: int) -> int:
    """The latest due time an `at` may name at `now_ms` (catches ms given for seconds)."""
    return min(now_ms + MAX_DELAY_MS, MAX_AT_MS)


def _ceil_ms(seconds: float) -> int:
    """Seconds to whole ms, rounded up (never early) but for float noise."""
    product = seconds * 1000
    nearest = round(product)
    if nearest / 1000 == seconds:
        return nearest
    return math.ceil(round(product, 6))


def _finite_float(value: float) -> float:
    """float(value), with ints too large for a float as inf (the range check rejects it)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def delay_ms(delay: object, name: str = "delay", max_ms: int = MAX_DELAY_MS) -> int:
    """`delay` (seconds: int, float or timedelta, 0 to `max_ms`, ten years unless given) as
    whole ms, rounded up: every duration of the Python face goes through here; errors name
    `name`.

    Raises:
        InvalidDelayError: Not a finite number of seconds (nor a timedelta) in range.
    """
    if isinstance(delay, timedelta):
        seconds: float = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = _finite_float(delay)
    else:
        raise InvalidDelayError(
            name, f"{name} must be seconds (int, float) or a timedelta, got {delay!r}"
        )
    if not math.isfinite(seconds) or not 0 <= seconds <= max_ms / 1000:
        raise InvalidDelayError(
            name,
            f"{name} must be a finite number of seconds >= 0 and <= {_seconds(max_ms)}, "
            f"got {delay!r}",
        )
    if isinstance(delay, timedelta):
        return -(-(delay // timedelta(microseconds=1)) // 1000)  # exact, rounded up
    return _ceil_ms(seconds)


def _seconds(ms: int) -> str:
    """`ms` in seconds, as text without a needless ``.0``."""
    return str(ms // 1000) if ms % 1000 == 0 else str(ms / 1000)


def duration_ms(
    seconds: object,
    ms: object,
    *,
    name: str,
    alias: str,
    max_ms: int = MAX_DELAY_MS,
    min_ms: int = 0,
    default: int | None = None,
) -> int | None:
    """One duration given as `name` (seconds or a timedelta, `delay_ms`) or as its
    documented alias `alias` (whole ms, as the config keys and the wire spell it), in ms;
    `default` when neither is given (None for "not given").

    Raises:
        InvalidArgumentError: Both were given (naming both), or the one given is out of
            [`min_ms`, `max_ms`] (`InvalidDelayError` for `name`); it names the one given.
    """
    if seconds is not None and ms is not None:
        raise InvalidArgumentError(
            name, f"pass {name} (seconds or a timedelta) or {alias} (ms), not both"
        )
    if seconds is not None:
        value = delay_ms(seconds, name, max_ms)
        if value < min_ms:
            raise InvalidDelayError(
                name, f"{name} must be at least {_seconds(min_ms)} s, got {seconds!r:.60}"
            )
        return value
    if ms is None:
        return default
    if isinstance(ms, bool) or not isinstance(ms, int) or not min_ms <= ms <= max_ms:
        raise InvalidArgumentError(
            alias, f"{alias} must be an int of ms in [{min_ms}, {max_ms}], got {ms!r:.60}"
        )
    return ms


def at_ms(at: object, name: str = "at", latest_ms: int = MAX_AT_MS) -> int:
    """Epoch ms (rounded up) of `at`, at most `latest_ms`; errors name `name`."""
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise InvalidDelayError(
                name, f"{name} must be an aware datetime (with tzinfo), got naive {at!r}"
            )
        micros = (at - _EPOCH) // timedelta(microseconds=1)  # exact: no float detour
        if not 0 <= micros <= latest_ms * 1000:
            raise _out_of_range(name, at, None, latest_ms)
        return -(-micros // 1000)
    elif isinstance(at, int | float) and not isinstance(at, bool):
        seconds = _finite_float(at)
    else:
        raise InvalidDelayError(
            name, f"{name} must be epoch seconds (int, float) or an aware datetime, got {at!r}"
        )
    if not math.isfinite(seconds) or not 0 <= seconds * 1000 <= latest_ms:
        raise _out_of_range(name, at, seconds, latest_ms)
    return _ceil_ms(seconds)


def _out_of_range(
    name: str, at: object, seconds: float | None, latest_ms: int
) -> InvalidDelayError:
    latest_s = latest_ms // 1000
    until = "" if latest_ms == MAX_AT_MS else f" ({utc_text(latest_s * 1000)}: ten years on)"
    hint = ""
    if seconds is not None and 0 <= seconds / 1000 <= latest_s:
        hint = f"; {at!r} looks like milliseconds: {name} takes seconds"
    return InvalidDelayError(
        name, f"{name} must be finite epoch seconds in [0, {latest_s}]{until}, got {at!r}{hint}"
    )


def utc_text(ms: int | None, none: str = "-") -> str:
    """Epoch ms as UTC ISO 8601; an int beyond the years 1-9999 reads as its ms."""
    if ms is None:
        return none
    try:
        when = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        beyond = "beyond year 9999" if ms > 0 else "before year 1"
        return f"{ms} ms since the epoch ({beyond})"
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


MAX_DEBOUNCE_MS = MAX_DELAY_MS


def _ms_in(value: object, low: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_DEBOUNCE_MS:
        return value
    return None


def debounce_spec(debounce_ms: object, max_wait_ms: object) -> tuple[int, int]:
    """(debounce, max wait or 0), in ms; else InvalidDelayError."""
    debounce = _ms_in(debounce_ms, 1)
    if debounce is None:
        raise InvalidDelayError(
            "debounce_ms",
            f"debounce_ms must be an int in [1, {MAX_DEBOUNCE_MS}], got {debounce_ms!r}",
        )
    if max_wait_ms is None:
        return debounce, 0
    wait = _ms_in(max_wait_ms, debounce)
    if wait is None:
        raise InvalidDelayError(
            "max_wait_ms",
            f"max_wait_ms must be None or an int in [debounce_ms={debounce}, "
            f"{MAX_DEBOUNCE_MS}], got {max_wait_ms!r}",
        )
    return debounce, wait


MAX_SHIFT_MS = 10 * 365 * 24 * 3600 * 1000
"""The longest a shift moves a job (ten years), either way."""


def shift_of(
    shift: object, shift_ms: int | None, name: str = "shift", alias: str = "shift_ms"
) -> int | None:
    """A shift in ms: `shift` (seconds or a timedelta, either sign) or its alias `shift_ms`,
    one of them (`duration_ms`; a bulk action checks the range with the action), each named
    as the caller calls it."""
    if shift is None:
        return shift_ms
    back = False
    if isinstance(shift, timedelta):
        back, shift = shift < timedelta(0), abs(shift)
    elif isinstance(shift, int | float) and not isinstance(shift, bool):
        back, shift = shift < 0, abs(shift)
    ms = duration_ms(shift, shift_ms, name=name, alias=alias, max_ms=MAX_SHIFT_MS)
    return None if ms is None else -ms if back else ms
