"""Backpressure: a topic's limits on what it holds (docs/architecture.md, "Backpressure").

- ``max_pending``: most jobs waiting to fire. An enqueue past it raises `TopicFullError`
  and writes nothing of what was refused (a producer spool's replay and a schedule's runs
  are let through: both were accepted earlier).
- ``max_ready``: most fired jobs not yet acked by the slowest consumer group (read but
  unacked, plus not yet read). Past it due jobs are held back in the sorted set (a job
  enqueued, rescheduled or debounced to run now too; a replay replays what fits), and the
  scheduler emits more as workers ack: the stream never grows past what workers keep up
  with, and a held job fires late but is never dropped.

Both are enforced per shard, inside the scripts that write, so they are exact there: each
shard holds ``ceil(limit / shards)``. Job ids spread evenly over shards, so a topic fills
at about its limit, and never holds more than the limit rounded up to a multiple of its
shard count.
"""

from __future__ import annotations

from dataclasses import dataclass

from wheelq.errors import InvalidArgumentError

MAX_LIMIT = 2**40


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """A topic's limits (None: no limit)."""

    max_pending: int | None = None
    max_ready: int | None = None

    def fields(self, shards: int) -> dict[str, int | None]:
        """What ``{T:s}:limits`` holds: each shard's share ("pending", "ready", read by the
        scripts) and the limits as given (None: the field is removed)."""
        return {
            "pending": _share(self.max_pending, shards),
            "ready": _share(self.max_ready, shards),
            "max_pending": self.max_pending,
            "max_ready": self.max_ready,
        }

    @classmethod
    def from_fields(cls, raw: dict[bytes, bytes]) -> TopicLimits:
        pending, ready = raw.get(b"max_pending"), raw.get(b"max_ready")
        return cls(None if pending is None else int(pending), None if ready is None else int(ready))


def _share(limit: int | None, shards: int) -> int | None:
    return None if limit is None else -(-limit // shards)


def validate_limits(max_pending: object, max_ready: object) -> TopicLimits:
    """Raises:
    InvalidArgumentError: A limit that is neither None nor an int in [1, 2**40].
    """
    for name, value in (("max_pending", max_pending), ("max_ready", max_ready)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT
        ):
            raise InvalidArgumentError(
                name, f"{name} must be None (no limit) or an int in [1, {MAX_LIMIT}], got {value!r}"
            )
    return TopicLimits(max_pending, max_ready)  # type: ignore[arg-type]
