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

from wheelq.core.due import delay_ms
from wheelq.core.job import Job, envelope_fields
from wheelq.core.options import KINDS, STORED, stored_attributes
from wheelq.errors import ResultError

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


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry delays: `base_ms` doubling per attempt up to `max_ms`, less up to `jitter_pct`."""

    base_ms: int = 1000
    max_ms: int = 3_600_000
    jitter_pct: int = 20

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
    if any(options):  # else each is unset, as `of_job` spells it
        options = [of_job(v) for of_job, v in zip(_OF_JOB, options, strict=True)]
    fields = envelope_fields(
        payload, job.attempt + counts, job.max_attempts, enqueued_ms, group, job.id, options
    )
    packed: bytes = msgpack.packb(fields, use_bin_type=False)
    return packed


_options_of = stored_attributes()
_OF_JOB = tuple(KINDS[o.kind].of_job for o in STORED if o.kind is not None)
