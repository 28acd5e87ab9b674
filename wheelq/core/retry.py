"""What happens to a job after its handler fails: retry with backoff, or dead-letter
(docs/architecture.md, invariant 13).
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

import msgpack

from wheelq.core.due import delay_ms, duration_ms
from wheelq.core.job import Job, envelope_fields
from wheelq.core.options import KINDS, STORED, stored_attributes
from wheelq.errors import InvalidArgumentError, ResultError

MAX_ERROR_CHARS = 8000


class Retry(Exception):
    """Raise from a handler to run the job again after `delay` seconds (None: backoff)."""

    def __init__(self, delay: float | timedelta | None = None, reason: str = "") -> None:
        self.delay_ms = None if delay is None else delay_ms(delay)
        super().__init__(reason or "retry requested")


class Defer(Retry):
    """Raise from a handler to run the job again after `delay` seconds, not counting an attempt."""

    def __init__(self, delay: float | timedelta, reason: str = "") -> None:
        super().__init__(delay, reason or "deferred")


class Fail(Exception):
    """Raise from a handler to dead-letter the job now; the message is the dead letter's error."""


class Reason(StrEnum):
    """Why a job ended in the dead-letter stream (its ``reason`` field)."""

    FAILED = "failed"
    """The handler raised (or timed out) on the job's last attempt."""
    DELIVERIES = "deliveries"
    """Delivered more than `max_deliveries` times without an ack: it keeps killing workers."""
    MALFORMED = "malformed"
    """The stream entry could not be decoded as a job."""


MAX_RETRY_BASE_MS = 86_400_000
"""The longest first retry delay (a day), as the worker's ``retry_base_ms`` allows."""
MAX_RETRY_MAX_MS = 30 * 86_400_000
"""The longest retry delay (30 days), as the worker's ``retry_max_ms`` allows."""


@dataclass(frozen=True, slots=True, init=False)
class RetryPolicy:
    """Retry delays: `base` doubling per attempt up to `max`, less up to `jitter_pct`.

    Args:
        base: The first retry's delay, seconds (int, float) or a timedelta, 0 to a day
            (default 1 s).
        max: The longest delay, seconds or a timedelta, 0 to 30 days (default 1 h); it
            caps `base` too.
        jitter_pct: Up to this percentage (0-100) is taken off each delay at random.
        base_ms: `base` in whole ms (an alias, as the ``retry_base_ms`` setting spells it).
        max_ms: `max` in whole ms (an alias, as ``retry_max_ms`` spells it).

    Each field takes one spelling: keyword arguments only, so no number given positionally
    is read in the other unit.

    Raises:
        InvalidArgumentError: A value out of range, or a field given in both spellings
            (naming both).
    """

    base_ms: int
    """The first retry's delay in ms (`base`)."""
    max_ms: int
    """The longest delay in ms (`max`)."""
    jitter_pct: int

    def __init__(
        self,
        *,
        base: float | timedelta | None = None,
        max: float | timedelta | None = None,
        jitter_pct: int = 20,
        base_ms: int | None = None,
        max_ms: int | None = None,
    ) -> None:
        first = duration_ms(
            base, base_ms, name="base", alias="base_ms", max_ms=MAX_RETRY_BASE_MS, default=1000
        )
        cap = duration_ms(
            max, max_ms, name="max", alias="max_ms", max_ms=MAX_RETRY_MAX_MS, default=3_600_000
        )
        bad = isinstance(jitter_pct, bool) or not isinstance(jitter_pct, int)
        if bad or not 0 <= jitter_pct <= 100:
            raise InvalidArgumentError(
                "jitter_pct", f"jitter_pct must be an int in [0, 100], got {jitter_pct!r:.40}"
            )
        object.__setattr__(self, "base_ms", first)
        object.__setattr__(self, "max_ms", cap)
        object.__setattr__(self, "jitter_pct", jitter_pct)

    def backoff_ms(self, attempt: int, rand: float) -> int:
        """Delay before attempt ``attempt + 1``; `rand` is uniform in [0, 1)."""
        exponent = min(max(attempt, 1) - 1, 62)
        full = min(self.max_ms, self.base_ms * (1 << exponent))
        return int(full - full * self.jitter_pct * rand / 100)


@dataclass(frozen=True, slots=True)
class Outcome:
    """After a failed run: retry after `delay_ms`, or (`delay_ms` None) dead-letter."""

    error: str
    delay_ms: int | None
    counts: bool = True
    """Whether the run counts as an attempt (False: `Defer`)."""

    @property
    def dead(self) -> bool:
        return self.delay_ms is None


def after_failure(
    attempt: int, max_attempts: int, exc: BaseException, policy: RetryPolicy, rand: float
) -> Outcome:
    """Decide a failed run's fate from the job's attempt and the exception it raised."""
    error = describe(exc)
    if isinstance(exc, Fail | ResultError):  # a result that cannot be kept: running the
        # handler again would repeat its work, to come to the same value
        return Outcome(f"attempt {attempt} of {max_attempts}, not retried: {error}", None)
    if isinstance(exc, Defer) and exc.delay_ms is not None:
        return Outcome(error, exc.delay_ms, counts=False)
    if attempt >= max_attempts:
        return Outcome(f"attempt {attempt} of {max_attempts}: {error}", None)
    if isinstance(exc, Retry) and exc.delay_ms is not None:
        return Outcome(error, exc.delay_ms)
    return Outcome(error, policy.backoff_ms(attempt, rand))


def describe(exc: BaseException) -> str:
    """A failed run's recorded error: `summary`, then the last 8,000 chars of its traceback."""
    line = summary(exc)
    if isinstance(exc, Retry | Fail):
        return line
    trace = "".join(traceback.format_exception(exc)).strip()
    room = MAX_ERROR_CHARS - len(line) - 1
    if len(trace) > room:
        trace = "...\n" + trace[-(room - 4) :]
    return f"{line}\n{trace}"


def summary(exc: BaseException) -> str:
    """`exc` in one line of at most 1,000 characters (never a module path)."""
    try:
        message = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    except Exception:  # a __str__ that raises: the type still says something
        message = ""
    name = type(exc).__qualname__
    if isinstance(exc, Retry | Fail):
        return (message or name)[:1000]
    return (f"{name}: {message}" if message else name)[:1000]


def error_line(text: str | None) -> str:
    """The first line of a recorded error (its `summary`); "" for none."""
    return (text or "").strip().partition("\n")[0].strip()


_ATTEMPT = re.compile(r"attempt \d+ of \d+(?:, not retried)?: ")
"""What `after_failure` puts before a last attempt's error (the dead letter's)."""


def error_summary(text: str | None) -> str:
    """A recorded error's `summary`: its line without the attempt a dead letter's error
    starts with (``attempt 1 of 1: ``), which a list says in a column of its own."""
    line = error_line(text)
    return line[found.end() :] if (found := _ATTEMPT.match(line)) else line


def error_detail(text: str | None) -> str | None:
    """A recorded error whole, when it says more than its line (a traceback); else None."""
    text = (text or "").strip()
    return text if "\n" in text else None


def retry_envelope(
    job: Job, payload: bytes, enqueued_ms: int, group: str, counts: bool = True
) -> bytes:
    """The envelope of `job`'s next attempt in `group` (the same one for a deferral)."""
    options: tuple[Any, ...] | list[Any] = _options_of(job)
    if options != _PLAIN:  # else each is unset, as `of_job` spells it
        options = [of_job(v) for of_job, v in zip(_OF_JOB, options, strict=True)]
    fields = envelope_fields(
        payload, job.attempt + counts, job.max_attempts, enqueued_ms, group, job.id, options
    )
    packed: bytes = msgpack.packb(fields, use_bin_type=False)
    return packed


_options_of = stored_attributes()
_OF_JOB = tuple(KINDS[o.kind].of_job for o in STORED if o.kind is not None)
_PLAIN = tuple(Job.__dataclass_fields__[o.name].default for o in STORED)
"""A `Job`'s stored options when none is set (its attributes' defaults)."""
