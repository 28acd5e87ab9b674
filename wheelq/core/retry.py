"""What happens to a job after its handler: retry with backoff, or dead-letter.

Pure policy, no I/O. A handler that raises is retried after an exponential
backoff with jitter (``retry_base_ms * 2**(attempt-1)``, capped at
``retry_max_ms``, each delay shortened by up to ``retry_jitter_pct`` so
failures of many jobs at once do not retry in lockstep). A handler may
raise `Retry(delay=...)` to choose the delay itself. Either way the retry
is an attempt: after attempt `max_attempts` the job is dead-lettered with
the error text, so no job loops forever. Two exceptions say otherwise:
`Fail` dead-letters the job at once (it can never succeed), and `Defer` puts it
back without counting an attempt (it waited for something, it did not fail).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from wheelq.core.due import delay_ms
from wheelq.core.job import Envelope, Job

MAX_ERROR_CHARS = 8000


class Retry(Exception):
    """Raise from a handler to run the job again after `delay` seconds (int, float or
    timedelta; None: the usual backoff). It counts as an attempt.

    Raises:
        InvalidDelayError: `delay` is not a finite number of seconds >= 0.
    """

    def __init__(self, delay: float | timedelta | None = None, reason: str = "") -> None:
        self.delay_ms = None if delay is None else delay_ms(delay)
        super().__init__(reason or "retry requested")


class Defer(Retry):
    """Raise from a handler to run the job again after `delay` seconds without counting an
    attempt: it waited for something (a busy endpoint, a rate limit) and did not fail. A
    handler that defers a job forever runs it forever: defer only while something else
    makes progress.

    Raises:
        InvalidDelayError: `delay` is not a finite number of seconds >= 0.
    """

    def __init__(self, delay: float | timedelta, reason: str = "") -> None:
        super().__init__(delay, reason or "deferred")


class Fail(Exception):
    """Raise from a handler to dead-letter the job now, whatever attempts it has left: it
    can never succeed (a request its endpoint refuses for good). The message is the dead
    letter's error."""


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
    if isinstance(exc, Fail):
        return Outcome(f"attempt {attempt} of {max_attempts}, not retried: {error}", None)
    if isinstance(exc, Defer) and exc.delay_ms is not None:
        return Outcome(error, exc.delay_ms, counts=False)
    if attempt >= max_attempts:
        return Outcome(f"attempt {attempt} of {max_attempts}: {error}", None)
    if isinstance(exc, Retry) and exc.delay_ms is not None:
        return Outcome(error, exc.delay_ms)
    return Outcome(error, policy.backoff_ms(attempt, rand))


def describe(exc: BaseException) -> str:
    """The error a failed run records (a history record's, a dead letter's): its one-line
    `summary`, then its traceback; `Retry`, `Defer` and `Fail` are said on purpose, so their
    summary alone (formatting a traceback costs more than delivering a callback).

    At most 8,000 characters: the summary and the innermost frames are kept. `error_line`
    and `error_detail` read the two parts back.
    """
    line = summary(exc)
    if isinstance(exc, Retry | Fail):
        return line
    trace = "".join(traceback.format_exception(exc)).strip()
    room = MAX_ERROR_CHARS - len(line) - 1
    if len(trace) > room:
        trace = "...\n" + trace[-(room - 4) :]
    return f"{line}\n{trace}"


def summary(exc: BaseException) -> str:
    """`exc` in one line of at most 1,000 characters: the message of a `Retry`, `Defer` or
    `Fail` (a handler's own words: "https://x/hook answered HTTP 503: ..."), else the type's
    name and the message ("ValueError: boom"); never a module path."""
    try:
        message = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    except Exception:  # a __str__ that raises: the type still says something
        message = ""
    name = type(exc).__qualname__
    if isinstance(exc, Retry | Fail):
        return (message or name)[:1000]
    return (f"{name}: {message}" if message else name)[:1000]


def error_line(text: str | None) -> str:
    """The one-line summary of a recorded error (as `describe` writes it: its first line);
    "" for none."""
    return (text or "").strip().partition("\n")[0].strip()


def error_detail(text: str | None) -> str | None:
    """A recorded error whole, when it says more than its line (a traceback); else None."""
    text = (text or "").strip()
    return text if "\n" in text else None


def retry_envelope(
    job: Job, payload: bytes, enqueued_ms: int, group: str, counts: bool = True
) -> bytes:
    """The envelope of `job`'s next attempt in `group` (the same attempt when not
    `counts`: a deferral), keeping its traceparent, callback and key; `payload` as encoded."""
    return Envelope(
        payload,
        job.attempt + counts,
        job.max_attempts,
        enqueued_ms,
        group,
        job.id,
        job.traceparent or "",
        b"" if job.callback is None else job.callback.pack(),
        job.key or "",
        job.ordered,
    ).pack()
