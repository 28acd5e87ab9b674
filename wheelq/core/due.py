"""Turning the caller's `delay=` / `at=` into a due time the scripts understand.

Scripts compute due times on the Redis clock: a relative delay is added to
``TIME`` inside the script, an absolute time is used as given. So this
module only validates and converts units; it never reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from wheelq.errors import InvalidDelayError

MAX_DELAY_S = 10 * 365 * 86_400  # ten years
MAX_DELAY_MS = MAX_DELAY_S * 1000
MAX_AT_MS = 2**53 - 1  # exact in a sorted-set score (a double)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Delay = float | int | timedelta
At = float | int | datetime


@dataclass(frozen=True, slots=True)
class DueSpec:
    """When a job is due: `value_ms` after the script's ``TIME``, or at `value_ms`."""

    kind: Literal["delay", "at"]
    value_ms: int
    wire: tuple[str, int] = field(init=False, repr=False, compare=False)
    """(mode, value) as the scripts take them: ``("d", ms)`` or ``("a", ms)`` (the int is
    written by the client's packer, in C); made once, read once per job of a batch."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire", ("d" if self.kind == "delay" else "a", self.value_ms))


NOW = DueSpec("delay", 0)


def due_spec(delay: Delay | None = None, at: At | None = None, *, now_ms: int) -> DueSpec:
    """Validate `delay` / `at` and convert them to a `DueSpec`.

    Args:
        delay: Seconds from now (int, float or timedelta), 0 to ten years.
        at: Absolute due time: epoch seconds (int or float) or an aware datetime, at most
            ten years after `now_ms` (as a delay). A time in the past means "now".
        now_ms: The caller's clock (epoch ms): what bounds `at`.

    Raises:
        InvalidDelayError: Both given, a wrong type, NaN, infinite, negative
            or too large.
    """
    if delay is not None and at is not None:
        raise InvalidDelayError("delay", "pass delay or at, not both")
    if at is not None:
        return DueSpec("at", at_ms(at, latest_ms=latest_at_ms(now_ms)))
    if delay is None:
        return NOW
    return DueSpec("delay", delay_ms(delay))


def latest_at_ms(now_ms: int) -> int:
    """The latest due time an `at` may name at `now_ms`: as far ahead as the longest delay.

    The one bound of an absolute time, whatever its unit in the interface (epoch seconds in
    Python and the CLI, epoch ms over HTTP): a value in the wrong unit lands far beyond it.
    """
    return min(now_ms + MAX_DELAY_MS, MAX_AT_MS)


def _ceil_ms(seconds: float) -> int:
    """Seconds to whole ms, rounded up (never early), float noise aside: the float nearest to
    a whole number of ms means that many ms (0.3 s is 300 ms, and 270491049.679 s is
    270491049679 ms, though its float product with 1000 is 270491049679.00003); any other
    value is rounded up after dropping noise below 1 ns."""
    product = seconds * 1000
    nearest = round(product)
    if nearest / 1000 == seconds:
        return nearest
    return math.ceil(round(product, 6))


def _finite_float(value: float) -> float:
    """float(value), with ints too large for a float mapped to inf (rejected by the range check)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def delay_ms(delay: object) -> int:
    """`delay` (seconds: int, float or timedelta) as whole ms, rounded up.

    Raises:
        InvalidDelayError: A wrong type, NaN, infinite, negative or over ten years.
    """
    if isinstance(delay, timedelta):
        seconds: float = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = _finite_float(delay)
    else:
        raise InvalidDelayError(
            "delay", f"delay must be seconds (int, float) or a timedelta, got {delay!r}"
        )
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_DELAY_S:
        raise InvalidDelayError(
            "delay",
            f"delay must be a finite number of seconds >= 0 and <= {MAX_DELAY_S}, got {delay!r}",
        )
    if isinstance(delay, timedelta):
        return -(-(delay // timedelta(microseconds=1)) // 1000)  # exact, rounded up
    return _ceil_ms(seconds)


def at_ms(at: object, name: str = "at", latest_ms: int = MAX_AT_MS) -> int:
    """Epoch ms (rounded up) of `at`: epoch seconds or an aware datetime, at most `latest_ms`
    (`latest_at_ms` for a job's due time); errors name `name`."""
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
    """Epoch ms as UTC ISO 8601 to the ms (``2030-01-01T09:00:00.250Z``), for people; any int
    renders, so a stored time beyond what a datetime holds (years 1-9999) reads as its ms,
    never as an error."""
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
    """Validate a debounce (`enqueue(..., debounce_ms=, max_wait_ms=)`): (debounce, max wait
    or 0 for none), in ms.

    Raises:
        InvalidDelayError: `debounce_ms` not an int in [1, ten years], or `max_wait_ms` neither
            None nor an int in [debounce_ms, ten years].
    """
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
