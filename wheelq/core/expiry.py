"""A job's expiry (``expires=``): until when it may start. Checked here into the `Envelope`
value the envelope stores (epoch ms; `ExpiresIn` while it is still relative to the call),
and the one test of whether a job has expired (docs/guides/producing.md, "Expiry"). Where
it is decided: at fire (``store/lua/includes/fire.lua``'s ``wq_expired``) and at the start
of a run (`wheelq.worker.in_flight`, the pull consumers); nothing here reads a clock.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from wheelq.core.due import MAX_DELAY_S, at_ms, delay_ms
from wheelq.errors import InvalidDelayError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EXPIRED_REASON = "expired"
"""What `JobInfo`, `result()`'s error and the events call a job dropped at its expiry."""


class ExpiresIn(int):
    """An expiry given relative to the call (seconds or a timedelta), in ms from the call's
    ``now_ms``: `absolute` makes it the epoch ms the envelope stores."""

    __slots__ = ()


def validate_expires(expires: object) -> int:
    """`expires` as its `Envelope` value: an aware datetime as its epoch ms (rounded up; a
    past one is taken, and the job ends expired), seconds (int, float) or a timedelta, 0 to
    ten years, as `ExpiresIn`; else InvalidDelayError naming ``expires``."""
    if isinstance(expires, datetime):
        return at_ms(expires, "expires")
    if isinstance(expires, timedelta) or (
        isinstance(expires, int | float) and not isinstance(expires, bool)
    ):
        try:
            return ExpiresIn(delay_ms(expires))
        except InvalidDelayError:
            seconds = expires.total_seconds() if isinstance(expires, timedelta) else expires
            nan = isinstance(seconds, float) and math.isnan(seconds)
            raise InvalidDelayError(
                "expires",
                f"expires must be a finite number of seconds >= 0 and <= {MAX_DELAY_S} "
                f"(or a timedelta), got {expires!r}" + (" (NaN)" if nan else ""),
            ) from None
    raise InvalidDelayError(
        "expires",
        "expires must be seconds from now (int, float), a timedelta or an aware datetime, "
        f"got {expires!r}",
    )


def absolute(stored: tuple[Any, ...], at: int, now_ms: int) -> tuple[Any, ...]:
    """`stored` (`Envelope` values) with the expiry at place `at` in epoch ms: one given
    relative to the call counts from `now_ms` (the clock the call's due times read)."""
    value = stored[at]
    if type(value) is not ExpiresIn:
        return stored
    return (*stored[:at], now_ms + int(value), *stored[at + 1 :])


def expired(expires_ms: int | None, now_ms: int) -> bool:
    """Whether a job of expiry `expires_ms` (0 or None: none) may no longer start at
    `now_ms`: the one test, which ``wq_expired`` spells in Lua."""
    return expires_ms is not None and 0 < expires_ms < now_ms


def expires_datetime(expires_ms: int) -> datetime:
    """An expiry's epoch ms as an aware UTC datetime (what `validate_expires` takes back)."""
    if expires_ms <= 0:
        raise ValueError(f"an expiry is a positive epoch ms, got {expires_ms}")
    return _EPOCH + timedelta(milliseconds=expires_ms)
