"""Flow control, pure: a group's rate and key limits (`Flow`), a job's key and its order,
and a topic's backpressure limits (`TopicLimits`); docs/architecture.md, "Flow control".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wheelq.errors import InvalidArgumentError, int_in

if TYPE_CHECKING:
    from wheelq.core.job import Job

PERIODS_MS = {"s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_RATE_RE = re.compile(r"\s*([0-9]+)\s*/\s*([a-z]+)\s*")


@dataclass(frozen=True, slots=True)
class Rate:
    """`count` starts per `period_ms`."""

    count: int
    period_ms: int

    @property
    def interval_us(self) -> int:
        return -(-self.period_ms * 1000 // self.count)


def parse_rate(name: str, text: object) -> Rate:
    """ "100/s", "20/min", "1000/h" (a count in [1, 1_000_000]) as a `Rate`."""
    m = _RATE_RE.fullmatch(text) if isinstance(text, str) else None
    if m is None or m.group(2) not in PERIODS_MS or not 1 <= int(m.group(1)) <= 1_000_000:
        raise InvalidArgumentError(
            name, f"{name} must be '<count>/s', '/min' or '/h', count 1-1000000, got {text!r}"
        )
    return Rate(int(m.group(1)), PERIODS_MS[m.group(2)])


@dataclass(frozen=True, slots=True)
class Flow:
    """A consumer group's flow limits, held across all its workers (None: no such limit)."""

    rate: str | None = None
    """Starts per period for the whole group: "100/s", "20/min", "1000/h"."""
    key: Callable[[Job], object] | None = None
    """A job's key for the limits (None from it: no key limit); default `Job.key`."""
    key_rate: str | None = None
    """Starts per period for each key."""
    key_concurrency: int | None = None
    """Most jobs of one key running at once, 1-10,000."""
    burst: int = 1
    """Starts allowed back to back after a quiet spell, 1-10,000."""
    max_wait_ms: int = 1000
    """Longest wait for a rate token in the worker (0-60,000); a longer one defers the job."""
    retry_ms: int = 50
    """How long a job deferred by ``key_concurrency`` waits (1-60,000)."""

    def __post_init__(self) -> None:
        for name in ("rate", "key_rate"):
            if getattr(self, name) is not None:
                parse_rate(name, getattr(self, name))
        if self.key_concurrency is not None:
            int_in("key_concurrency", self.key_concurrency, 1, 10_000)
        if self.key is not None and not callable(self.key):
            raise InvalidArgumentError("key", f"key must be a function of a Job, got {self.key!r}")
        int_in("burst", self.burst, 1, 10_000)
        int_in("max_wait_ms", self.max_wait_ms, 0, 60_000)
        int_in("retry_ms", self.retry_ms, 1, 60_000)

    @property
    def group_rate(self) -> Rate | None:
        return None if self.rate is None else parse_rate("rate", self.rate)

    @property
    def per_key_rate(self) -> Rate | None:
        return None if self.key_rate is None else parse_rate("key_rate", self.key_rate)


def flow_key(topic: str, group: str, kind: str, key: str | None) -> str:
    """The Redis key of one bucket or semaphore: its own slot, named by a digest."""
    digest = hashlib.blake2b(f"{group}\x1f{key or ''}".encode(), digest_size=10).hexdigest()
    return f"wheelq:flow:{{{topic}:{digest}}}:{kind}"


ORDER_GRACE_MS = 10_000
"""A job registered in its key's order but unknown this long after due was never written."""


def order_keys(topic: str, key: str) -> tuple[str, str]:
    """The Redis keys of one key's order (one slot): its jobs by due, each group's last done."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=10).hexdigest()
    tag = f"wheelq:order:{{{topic}:{digest}}}"
    return f"{tag}:jobs", f"{tag}:done"


MAX_LIMIT = 2**40


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """A topic's backpressure limits, enforced per shard by the scripts (None: no limit)."""

    max_pending: int | None = None
    """Most jobs waiting to fire: past it an enqueue raises `TopicFullError`."""
    max_ready: int | None = None
    """Most fired jobs not yet acked by the slowest group: past it due jobs are held back."""

    def fields(self, shards: int) -> dict[str, int | None]:
        """What ``{T:s}:limits`` holds: each shard's share, and the limits (None: removed)."""
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
    """A `TopicLimits`, each limit None or an int in [1, 2**40]."""
    for name, value in (("max_pending", max_pending), ("max_ready", max_ready)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT
        ):
            raise InvalidArgumentError(
                name, f"{name} must be None (no limit) or an int in [1, {MAX_LIMIT}], got {value!r}"
            )
    return TopicLimits(max_pending, max_ready)  # type: ignore[arg-type]
