"""The forecast: how many of a topic's jobs come due within the next few windows of time, and
the ready work, to autoscale workers on (docs/architecture.md, "The forecast").

One definition for `Admin.forecast`, ``GET /v1/topics/{t}/forecast``, ``wheelq topics
forecast``, the console and ``wheelq_jobs_due``: a window of `within` seconds counts the
topic's pending jobs due at or before the read's moment plus the window, on the Redis clock
(so overdue jobs, not fired yet, count in every window, and so do pending retries: they wait
in the same sorted set); ready is `wheelq.core.observe.ShardObservation.ready`, summed (the
jobs waiting on the due line included).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from wheelq.core.observe import ShardObservation
from wheelq.errors import InvalidArgumentError

WITHIN_S = (10, 60, 300)
"""The windows a forecast reads unless told (seconds): the ones the metrics export."""
MAX_WITHIN_S = 86_400
"""The longest window (a day)."""
MAX_WINDOWS = 10
"""The most windows one read asks for."""
ACCEPTED = (
    f"within must be 1 to {MAX_WINDOWS} windows, each a whole number of seconds in "
    f"[1, {MAX_WITHIN_S}]"
)


@dataclass(frozen=True, slots=True)
class Forecast:
    """What `Admin.forecast()` returns: the topic's jobs coming due, and its ready work."""

    topic: str
    at_ms: int
    """When it was read (Redis clock ms): each window starts here."""
    due_within: dict[int, int]
    """Window in seconds -> pending jobs due within it of `at_ms`: overdue ones not fired yet
    and pending retries included, so a longer window never counts fewer."""
    ready: int
    """Fired, not yet delivered to the consumer group furthest behind (every entry while no
    group reads the stream), and the jobs waiting on the due line, summed over shards:
    `TopicStats.ready`."""


def within_seconds(within: object) -> tuple[int, ...]:
    """`within` (an int, or a sequence of them) as sorted distinct seconds.

    Raises:
        InvalidArgumentError: On ``within``: not 1 to `MAX_WINDOWS` whole numbers of seconds
            in [1, `MAX_WITHIN_S`].
    """
    values = [within] if isinstance(within, int) else within
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise InvalidArgumentError("within", f"{ACCEPTED}, got {within!r}")
    _count(len(values))
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WITHIN_S:
            raise InvalidArgumentError("within", f"{ACCEPTED}, got {value!r}")
    return tuple(sorted(set(values)))


def within_text(parts: Iterable[str]) -> tuple[int, ...]:
    """`within_seconds` of windows given as text: a query's values, a flag's comma-separated
    list (a word that is not digits is named as given)."""
    words = [word.strip() for part in parts for word in part.split(",")]
    _count(len(words))
    for word in words:
        if not (word.isascii() and word.isdigit()):
            raise InvalidArgumentError("within", f"{ACCEPTED}, got {word or 'nothing'}")
    return within_seconds([int(word) for word in words])


def _count(windows: int) -> None:
    if not 1 <= windows <= MAX_WINDOWS:
        raise InvalidArgumentError("within", f"{ACCEPTED}, got {windows} windows")


def forecast_of(topic: str, at_ms: int, shards: Iterable[ShardObservation]) -> Forecast:
    """The `Forecast` of `topic` from its shards' observations, read at `at_ms` with windows
    (`ShardObservation.due_within`, in ms)."""
    due: dict[int, int] = {}
    ready = 0
    for o in shards:
        ready += o.ready
        for window_ms, n in o.due_within:
            due[window_ms // 1000] = due.get(window_ms // 1000, 0) + n
    return Forecast(topic, at_ms, dict(sorted(due.items())), ready)
