"""Flow control, pure: a group's rate and key limits (`Flow`), a job's key and its order,
and a topic's settings of the flow into its streams (`TopicLimits`: backpressure limits and
the due line's priority credit and fair shares); docs/architecture.md, "Flow control",
"Backpressure" and "The due line".
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wheelq.core.options import MAX_KEY_BYTES, validate_key
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

DEFAULT_CREDIT_MS = 1000
"""A topic's priority credit when none is set: each priority step is worth a second."""
MAX_CREDIT_MS = 86_400_000
"""The largest priority credit: a day a step."""
MAX_WEIGHT = 1000
"""The largest fair weight of a key (the smallest is 1, the weight of a key not named)."""
MAX_FAIR_WEIGHTS = 10_000
"""The most keys `fair_weights` names."""


class Unchanged(enum.Enum):
    """The default of a setting `Admin.set_limits` leaves as it is (`UNCHANGED`)."""

    UNCHANGED = "unchanged"

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged.UNCHANGED


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """A topic's settings of the flow into its streams, enforced per shard by the scripts:
    backpressure limits (None: no limit) and the due line's order (docs/architecture.md,
    "Backpressure" and "The due line")."""

    max_pending: int | None = None
    """Most jobs waiting to fire: past it an enqueue raises `TopicFullError`."""
    max_ready: int | None = None
    """Most fired jobs not yet acked by the slowest group: past it due jobs are held back."""
    priority_credit_ms: int = DEFAULT_CREDIT_MS
    """What a priority step is worth at the due line: a due job of priority p is ordered as
    if due ``p * priority_credit_ms`` earlier."""
    fair: bool = False
    """Whether due jobs with a key start in weighted round robin across keys."""
    fair_weights: dict[str, int] = field(default_factory=dict)
    """A key's share of the turns when `fair` (a key not named: 1)."""

    @classmethod
    def from_fields(cls, raw: dict[bytes, bytes], weights: dict[bytes, bytes]) -> TopicLimits:
        """What a shard's ``{T:s}:limits`` and ``{T:s}:weights`` hashes hold."""
        pending, ready = raw.get(b"max_pending"), raw.get(b"max_ready")
        credit = raw.get(b"credit")
        return cls(
            None if pending is None else int(pending),
            None if ready is None else int(ready),
            DEFAULT_CREDIT_MS if credit is None else int(credit),
            b"fair" in raw,
            {key.decode(): int(weight) for key, weight in weights.items()},
        )


@dataclass(frozen=True, slots=True)
class LimitsChange:
    """What one `set_limits` call changes, validated: only the settings it names."""

    limits: dict[str, int | None]
    """``max_pending`` / ``max_ready`` -> the limit (None: removed)."""
    due_line: dict[str, int | None]
    """``{T:s}:limits`` fields of the due line -> their value (None: removed)."""
    weights: dict[str, int] | None
    """The fair weights that replace the topic's (None: left as they are)."""

    def fields(self, shards: int) -> dict[str, int | None]:
        """The ``{T:s}:limits`` fields each of `shards` shards gets (None: removed): a limit's
        share, ``ceil(limit / shards)``, beside the limit, and the due line's fields."""
        out: dict[str, int | None] = {}
        for name, share in (("max_pending", "pending"), ("max_ready", "ready")):
            if name in self.limits:
                out[share] = _share(self.limits[name], shards)
                out[name] = self.limits[name]
        return out | self.due_line


def _share(limit: int | None, shards: int) -> int | None:
    return None if limit is None else -(-limit // shards)


def validate_limits(
    max_pending: object = UNCHANGED,
    max_ready: object = UNCHANGED,
    priority_credit_ms: object = None,
    fair: object = None,
    fair_weights: object = None,
) -> LimitsChange:
    """The change a `set_limits` call asks for, every value checked before any is written.

    Raises:
        InvalidArgumentError: A value is out of its range (naming it and the range).
    """
    limits: dict[str, int | None] = {}
    for name, value in (("max_pending", max_pending), ("max_ready", max_ready)):
        if value is UNCHANGED:
            continue
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT
        ):
            raise InvalidArgumentError(
                name, f"{name} must be None (no limit) or an int in [1, {MAX_LIMIT}], got {value!r}"
            )
        limits[name] = value
    due_line: dict[str, int | None] = {}
    if priority_credit_ms is not None:
        due_line["credit"] = int_in("priority_credit_ms", priority_credit_ms, 0, MAX_CREDIT_MS)
    if fair is not None:
        if not isinstance(fair, bool):
            raise InvalidArgumentError(
                "fair", f"fair must be True, False or None (unchanged), got {fair!r:.60}"
            )
        # Fair on orders the shard's due jobs ("ordered", never cleared: docs/architecture.md).
        due_line |= {"fair": 1, "ordered": 1} if fair else {"fair": None}
    weights = None if fair_weights is None else validate_weights(fair_weights)
    return LimitsChange(limits, due_line, weights)


def validate_weights(fair_weights: object) -> dict[str, int]:
    """`fair_weights` as a dict: at most `MAX_FAIR_WEIGHTS` job keys, each weighing an int in
    [1, `MAX_WEIGHT`]; InvalidArgumentError naming ``fair_weights`` otherwise."""
    if not isinstance(fair_weights, Mapping):
        raise InvalidArgumentError(
            "fair_weights",
            f"fair_weights must be a mapping of job key -> weight, got {fair_weights!r:.60}",
        )
    if len(fair_weights) > MAX_FAIR_WEIGHTS:
        raise InvalidArgumentError(
            "fair_weights",
            f"fair_weights must name at most {MAX_FAIR_WEIGHTS:,} keys, got {len(fair_weights):,}",
        )
    out: dict[str, int] = {}
    for key, weight in fair_weights.items():
        try:
            validate_key(key)
        except InvalidArgumentError:
            raise InvalidArgumentError(
                "fair_weights",
                f"fair_weights keys must be job keys, printable str of 1-{MAX_KEY_BYTES} UTF-8 "
                f"bytes, got {key!r:.80}",
            ) from None
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
            raise InvalidArgumentError(
                "fair_weights",
                f"fair_weights[{key!r:.80}] must be an int in [1, {MAX_WEIGHT}], "
                f"got {weight!r:.60}",
            )
        out[key] = weight
    return out
