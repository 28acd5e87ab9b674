"""Settings: frozen, each field's `Range` in its annotation, built by `from_kwargs`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Annotated, Any, Self, get_type_hints

from wheelq.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class Range:
    """The inclusive range of an integer setting, declared in its field's annotation."""

    low: int
    high: int

    def check(self, name: str, value: object) -> None:
        """Accept an int (not a bool) in [low, high]; else `InvalidArgumentError` on `name`."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, value)
        if not self.low <= value <= self.high:
            raise self.error(name, value)

    def error(self, name: str, value: object) -> InvalidArgumentError:
        """The error `check` raises for `value`."""
        return InvalidArgumentError(
            name, f"{name} must be an int in [{self.low}, {self.high}], got {value!r}"
        )


_RANGES: dict[type, Mapping[str, Range]] = {}  # read once per class: annotations are strings


def setting_ranges(cls: type) -> Mapping[str, Range]:
    """Each field of `cls`, in order, with its `Range` (TypeError if one has none)."""
    if cls in _RANGES:
        return _RANGES[cls]
    hints = get_type_hints(cls, include_extras=True)
    out: dict[str, Range] = {}
    for f in fields(cls):
        found = [m for m in getattr(hints[f.name], "__metadata__", ()) if isinstance(m, Range)]
        if len(found) != 1:
            raise TypeError(f"{cls.__name__}.{f.name} must be Annotated[int, Range(low, high)]")
        out[f.name] = found[0]
    _RANGES[cls] = out
    return out


class _Validated:
    """Range checks from each field's `Range`, plus `from_kwargs`, shared by the settings."""

    def __post_init__(self) -> None:
        for name, bounds in setting_ranges(type(self)).items():
            bounds.check(name, getattr(self, name))

    @classmethod
    def from_kwargs(cls, settings: Mapping[str, Any]) -> Self:
        """Build from keyword settings; `InvalidArgumentError` on an unknown name or a bad value."""
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(settings) - known)
        if unknown:
            raise InvalidArgumentError(
                unknown[0],
                f"unknown setting {unknown[0]!r} for {cls.__name__}; "
                f"known: {', '.join(sorted(known))}",
            )
        return cls(**settings)


@dataclass(frozen=True, slots=True)
class ClientSettings(_Validated):
    """Producer-side settings."""

    default_shards: Annotated[int, Range(1, 1024)] = 4
    """Shards of a topic created on first use. Fixed for the topic's life."""
    max_payload_bytes: Annotated[int, Range(1, 512 * 1024 * 1024)] = 1024 * 1024
    """Largest msgpack-encoded payload accepted (1 MiB)."""
    default_max_attempts: Annotated[int, Range(1, 1000)] = 5
    """Attempts a job gets when `enqueue(max_attempts=None)`."""
    batch_size: Annotated[int, Range(1, 10_000)] = 500
    """Jobs per script call in `enqueue_many` (bounds how long one call holds Redis)."""
    breaker_open_ms: Annotated[int, Range(0, 600_000)] = 1000
    """After a connection failure, calls fail fast (or spool) this long, then probe. 0: off."""
    spool_record_ms: Annotated[int, Range(60_000, 30 * 86_400_000)] = 86_400_000
    """How long a shard remembers an applied spooled write, so a replay writes no job twice."""
    spool_call_record_ms: Annotated[int, Range(0, 86_400_000)] = 300_000
    """With a spool: how long a direct enqueue call is remembered. 0: not (it can fire twice)."""
    ack_replicas: Annotated[int, Range(0, 100)] = 1
    """Replicas confirming ``ack="replicated"`` (min 1) or ``"persisted"`` (0: primary only)."""
    ack_timeout_ms: Annotated[int, Range(1, 600_000)] = 2000
    """How long an acked write waits for its confirmations before `DurabilityError` (at most
    half the connections' socket timeout: 2500 with the default 5 s)."""


@dataclass(frozen=True)
class RoleSettings(_Validated):
    """The settings a scheduler node and a worker share (after the role's own fields)."""

    start_timeout_ms: Annotated[int, Range(0, 3_600_000)] = 60_000
    """How long `start()` retries a Redis not up yet, or refusing calls (OOM, READONLY,
    LOADING, BUSY, MASTERDOWN). 0: fail at once."""
    stop_timeout_ms: Annotated[int, Range(0, 600_000)] = 5000
    """How long `stop()` may wait for Redis after the grace. 0: do not wait."""
    failure_pause_max_ms: Annotated[int, Range(10, 600_000)] = 2000
    """Longest pause of a part between failed steps (from 100 ms, doubling, with jitter)."""
    process_beat_ms: Annotated[int, Range(1000, 60_000)] = 1000
    """How often the process beats its record into the process list (one call a beat, for
    every role of the process; the first role to start sets it)."""
    process_expiry_beats: Annotated[int, Range(2, 60)] = 3
    """A process whose beats stop (it died) leaves the list this many beats after its last."""

    @property
    def process_ttl_ms(self) -> int:
        """How long a process's record outlives its last beat."""
        return self.process_beat_ms * self.process_expiry_beats


@dataclass(frozen=True)
class _SchedulerFields:
    """The scheduler node's own settings (`SchedulerSettings`)."""

    lease_ttl_ms: Annotated[int, Range(500, 600_000)] = 5000
    """A shard's lease lifetime; a dead node's shards move on after at most this."""
    window_ms: Annotated[int, Range(10, 3_600_000)] = 5000
    """Jobs due within this much of now are preloaded into the in-memory wheel."""
    preload_interval_ms: Annotated[int, Range(10, 600_000)] = 500
    """How often a busy or unfollowed led shard's window is topped up."""
    idle_preload_interval_ms: Annotated[int, Range(10, 3_600_000)] = 10_000
    """Longest time between reads of a followed idle shard (at least preload_interval_ms)."""
    schedule_interval_ms: Annotated[int, Range(10, 600_000)] = 500
    """How often led shards' schedules write their runs due within window_ms as jobs."""
    preload_batch: Annotated[int, Range(1, 100_000)] = 250
    """Jobs read per preload call."""
    emit_batch: Annotated[int, Range(1, 10_000)] = 500
    """Job ids moved into the stream per emit call."""
    emit_batch_bytes: Annotated[int, Range(1, 1024 * 1024 * 1024)] = 1024 * 1024
    """Envelope bytes moved per emit call (at least one job per call, however large)."""
    sweep_grace_ms: Annotated[int, Range(0, 600_000)] = 1000
    """The safety sweep emits jobs overdue by more than this that the wheel missed."""
    sweep_batch: Annotated[int, Range(1, 10_000)] = 200
    """Overdue jobs emitted per sweep call, so a backlog never starves on-time jobs."""
    tick_ms: Annotated[int, Range(1, 1000)] = 1
    """Resolution of the timing wheel."""
    wheel_size: Annotated[int, Range(2, 65_536)] = 8192
    """Buckets per wheel level; keep wheel_size x tick_ms >= window_ms (no overflow cascades)."""
    check_interval_ms: Annotated[int, Range(10, 600_000)] = 250
    """How often the node heartbeats, looks for new topics and nodes, and re-balances."""
    fast_failover: Annotated[int, Range(0, 1)] = 1
    """1: take a node's shards over once Redis has dropped its liveness connection (its wake
    subscription) for failover_grace_ms and none of its other connections is left, as when
    its process dies; 0: only once its leases expire (lease_ttl_ms)."""
    failover_grace_ms: Annotated[int, Range(10, 60_000)] = 100
    """How long a leader's liveness connection must stay gone (Redis clock, from when another
    node first sees it gone) before its leases are freed, if its process has no connection
    left then (a live one keeps them, however long it takes to register again). Other nodes
    count those connections every min(check_interval_ms, this)."""
    clock_sync_interval_ms: Annotated[int, Range(100, 3_600_000)] = 5000
    """How often the offset to the Redis clock is re-measured."""
    retention_ms: Annotated[int, Range(0, 365 * 86_400_000)] = 3 * 86_400_000
    """Acked ready-stream entries are trimmed once older than this; unacked ones never."""
    history_max_bytes: Annotated[int, Range(0, 1 << 40)] = 256 << 20
    """Byte budget of a topic's history (0: none); over it, the oldest acked go first."""
    trim_interval_ms: Annotated[int, Range(100, 86_400_000)] = 60_000
    """How often the leader of a shard trims its ready stream and history."""
    trim_batch: Annotated[int, Range(1, 100_000)] = 1000
    """Most entries removed per trim call (the call is repeated while more are due)."""
    far_promote_interval_ms: Annotated[int, Range(100, 3_600_000)] = 10_000
    """Longest time between looks at led shards' far tiers (sooner when a leaf is due)."""
    unled_check_ms: Annotated[int, Range(100, 3_600_000)] = 10_000
    """How often the topics this node does not serve are checked for unled shards (jobs due
    within a minute and no node leading them): ``wheelq_shards_unled`` and a warning."""


@dataclass(frozen=True, slots=True)
class SchedulerSettings(RoleSettings, _SchedulerFields):
    """Scheduler-node settings. Defaults suit one Redis on a LAN."""

    @property
    def renew_interval_ms(self) -> int:
        """Leases are renewed three times per TTL."""
        return max(100, self.lease_ttl_ms // 3)


@dataclass(frozen=True)
class _WorkerFields:
    """The worker's own settings (`WorkerSettings`)."""

    concurrency: Annotated[int, Range(1, 10_000)] = 10
    """Handlers running at once (threads for sync handlers, tasks for async ones)."""
    block_ms: Annotated[int, Range(10, 60_000)] = 2000
    """Longest wait of one blocking read (stop() does not wait for it); cut to half the
    connections' socket timeout (2500 with the default 5 s)."""
    read_ahead_ms: Annotated[int, Range(0, 60_000)] = 10
    """How long at their pace the slots' read-ahead lasts (at most 1,000 entries; at most 2 ms
    while a topic read has a due line, docs/architecture.md "The due line"). 0: none."""
    visibility_timeout_ms: Annotated[int, Range(100, 86_400_000)] = 30_000
    """An entry unacked and untouched this long is taken over by another worker."""
    claim_interval_ms: Annotated[int, Range(10, 600_000)] = 5000
    """How often a worker looks for entries to take over."""
    max_deliveries: Annotated[int, Range(1, 1000)] = 5
    """An entry delivered more often than this is dead-lettered instead of run again."""
    retry_base_ms: Annotated[int, Range(0, 86_400_000)] = 1000
    """First retry delay; it doubles with each attempt."""
    retry_max_ms: Annotated[int, Range(0, 30 * 86_400_000)] = 3_600_000
    """Longest retry delay (1 h); it caps retry_base_ms too."""
    retry_jitter_pct: Annotated[int, Range(0, 100)] = 20
    """Each retry delay is shortened by a random 0 to this percent."""
    handler_timeout_ms: Annotated[int, Range(0, 86_400_000)] = 0
    """A run longer than this counts as failed (0: no limit); a sync one runs on, *wedged*."""
    shutdown_grace_ms: Annotated[int, Range(0, 3_600_000)] = 20_000
    """On stop, running handlers get this long to finish; the rest is left for others."""
    default_shards: Annotated[int, Range(1, 1024)] = 4
    """Shards of the topic if the worker is the first to use it."""
    result_max_bytes: Annotated[int, Range(0, 16 * 1024 * 1024)] = 64 * 1024
    """Largest handler result kept (msgpack); one larger fails the run. 0: results ignored."""
    pause_poll_ms: Annotated[int, Range(100, 3_600_000)] = 10_000
    """While running, how often the pause state is read anyway (a pause whose message was
    lost); a pause reaches workers at once through pub/sub."""
    paused_poll_ms: Annotated[int, Range(100, 3_600_000)] = 1000
    """While paused, how often the pause state is read anyway (a resume whose message was
    lost)."""


@dataclass(frozen=True, slots=True)
class WorkerSettings(RoleSettings, _WorkerFields):
    """Worker settings; a crashed worker's jobs wait the visibility timeout to be taken over."""

    @property
    def keepalive_interval_ms(self) -> int:
        """Claims of held entries are refreshed three times per visibility timeout."""
        return max(30, self.visibility_timeout_ms // 3)


@dataclass(frozen=True, slots=True)
class CallbackSettings(_Validated):
    """Callback delivery settings; retries are the `WorkerSettings`."""

    concurrency: Annotated[int, Range(1, 10_000)] = 256
    """Callbacks in flight at once over all hosts (the deliverer worker's concurrency)."""
    per_host_concurrency: Annotated[int, Range(1, 10_000)] = 32
    """Callbacks in flight at once to one host; past that, jobs wait briefly or are deferred."""
    breaker_failures: Annotated[int, Range(1, 10_000)] = 5
    """Consecutive failures (5xx, timeouts, connection errors) that open a host's breaker."""
    breaker_open_ms: Annotated[int, Range(10, 3_600_000)] = 10_000
    """How long a breaker stays open before one job probes the host."""
    max_retry_after_ms: Annotated[int, Range(0, 86_400_000)] = 3_600_000
    """The longest ``Retry-After`` honoured (a 429 or 503 asking for more waits this)."""


@dataclass(frozen=True, slots=True)
class RelaySettings(_Validated):
    """The outbox relay's settings (`wheelq relay`, or ``[relay]`` beside a scheduler)."""

    batch_size: Annotated[int, Range(1, 10_000)] = 1000
    """Rows a relay takes (and places in Redis) per step."""
    sweep_ms: Annotated[int, Range(10, 3_600_000)] = 1000
    """Look for rows this often without a notification: the most a lost one costs."""
    record_ms: Annotated[int, Range(60_000, 30 * 86_400_000)] = 7 * 86_400_000
    """How long a shard remembers a relayed row whose delete was not seen (a relay that
    died mid-batch), so another relay places no job twice within it."""
    done_retention_ms: Annotated[int, Range(0, 3650 * 86_400_000)] = 7 * 86_400_000
    """How long ``once()`` records are kept (a redelivery after it applies effects again).
    0: kept for good."""
    idle_in_transaction_ms: Annotated[int, Range(1000, 3_600_000)] = 60_000
    """A relay's transaction idle this long (a relay frozen mid-batch) is ended by
    PostgreSQL, so its rows go to another relay."""
    fence_ms: Annotated[int, Range(1000, 600_000)] = 15_000
    """A relay's write that reaches Redis this long after its step began is refused (the
    step is retried), so a relay frozen mid-batch never places rows another relay placed
    since; a placed row's token is kept twice this long after its delete is committed."""
    connect_timeout_ms: Annotated[int, Range(100, 600_000)] = 5000
    """How long a connection to PostgreSQL may take before the step fails (and retries)."""


@dataclass(frozen=True, slots=True)
class ServeSettings(_Validated):
    """HTTP service settings (`wheelq serve`); pulls use the `WorkerSettings`."""

    port: Annotated[int, Range(0, 65535)] = 8080
    """TCP port (0: any free one)."""
    max_body_bytes: Annotated[int, Range(1024, 1024**3)] = 8 * 1024 * 1024
    """Largest request body accepted (413 past it), before it is read whole."""
    max_batch: Annotated[int, Range(1, 100_000)] = 10_000
    """Most jobs in one batch request."""
    page_limit: Annotated[int, Range(1, 10_000)] = 100
    """Default page size of lists (topics, dead letters); a request may ask for up to 1000."""
    start_timeout_ms: Annotated[int, Range(0, 3_600_000)] = 60_000
    """How long the service waits for a Redis not up yet, or refusing calls (OOM, READONLY,
    LOADING, BUSY, MASTERDOWN), before it exits. 0: fail at once."""
    header_timeout_ms: Annotated[int, Range(100, 600_000)] = 10_000
    """How long a request's headers may take to arrive before the connection is closed."""
    body_timeout_ms: Annotated[int, Range(100, 3_600_000)] = 30_000
    """How long a request's body may take to arrive before the connection is closed."""
    keep_alive_timeout_ms: Annotated[int, Range(100, 600_000)] = 5000
    """How long an idle connection is kept open between requests."""
    max_connections: Annotated[int, Range(1, 1_000_000)] = 1000
    """Most connections open at once; one more is answered 503 (Retry-After) and closed."""
    pull_connections: Annotated[int, Range(1, 1000)] = 32
    """Connections of pulls' own pool (per node on a cluster), and as many for result waits."""
    pull_max_bytes: Annotated[int, Range(1, 1024**3)] = 8 * 1024 * 1024
    """Stored bytes of the jobs one pull hands out (at least one job per pull, however large)."""
    max_groups_per_topic: Annotated[int, Range(1, 10_000)] = 64
    """Most consumer groups a topic may have: creating one more is refused (409)."""
    pull_creates_groups: Annotated[int, Range(0, 1)] = 0
    """1: a pull with ``create: true`` creates its missing group; 0: an unknown group is 404."""
    unled_check_ms: Annotated[int, Range(100, 3_600_000)] = 10_000
    """How often every registered topic is checked for unled shards (jobs due within a
    minute and no node leading them): the ``wheelq_shards_unled`` gauge and a warning."""
