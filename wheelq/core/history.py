"""A job's whole life by id: the states `get()` reports, from one `lookup.lua` read
(docs/architecture.md, "Job history"). Record kinds: ``F`` fired for one group, ``S``
succeeded, ``R`` failed and put back, ``D`` dead-lettered, ``C`` its retry cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import msgpack

from wheelq.core.expiry import EXPIRED_REASON
from wheelq.core.follow import WAIT_DUE_MS, JobRef
from wheelq.core.job import Envelope, Field, entry_ms, entry_order
from wheelq.core.options import KINDS, STORED, view
from wheelq.core.pause import PauseState
from wheelq.core.payload import read_payload
from wheelq.core.process import Held, start_of
from wheelq.errors import MalformedJobError

SEPARATOR = "\x1f"  # between job id and group in a history field: no job id holds it


class JobState(StrEnum):
    """Where a job is in its life (`JobInfo.state`)."""

    PENDING = "pending"  # waiting for its due time, first attempt
    AWAITING = "awaiting"  # waiting on another job's outcome (after=): no due time yet
    READY = "ready"  # due: in the stream (or on the due line), not delivered to a group yet
    RUNNING = "running"  # delivered to a worker, not settled yet
    RETRYING = "retrying"  # an attempt failed; the next one waits for its due time
    SUCCEEDED = "succeeded"  # every group's handler returned (for this firing)
    DEAD = "dead"  # out of attempts or deliveries, or malformed: in the dead-letter stream
    CANCELLED = "cancelled"  # cancelled while pending (a group: its retry was cancelled)
    EXPIRED = "expired"  # not started by its expiry (`expires=`): dropped, never run
    UNKNOWN = "unknown"  # never seen, or past the history's retention


_PRECEDENCE = (
    JobState.RUNNING,
    JobState.READY,
    JobState.RETRYING,
    JobState.DEAD,
    JobState.EXPIRED,
    JobState.CANCELLED,
)
"""A fired job's state is the first of these any group is in, else SUCCEEDED."""


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One consumer group's view of a job's latest firing for it."""

    group: str
    state: JobState
    entry_id: str
    """The stream entry the group runs (``ms-seq``, ms = when it fired)."""
    consumer: str | None = None
    """RUNNING: the worker holding it."""
    since_ms: int | None = None
    """RUNNING: when it was last delivered (or its claim last refreshed), Redis clock."""
    deliveries: int = 0
    """RUNNING: how often the entry was delivered to the group (> 1: taken over)."""
    finished_ms: int | None = None
    """When the last attempt ended (SUCCEEDED, DEAD, RETRYING) or its retry was cancelled."""
    duration_ms: int | None = None
    """SUCCEEDED: how long the handler ran."""
    error: str | None = None
    """DEAD: why; EXPIRED: ``"expired"`` (and the last attempt's error, if any); RETRYING,
    CANCELLED, a later attempt RUNNING: the last attempt's error."""
    reason: str | None = None
    """DEAD: failed | deliveries | malformed."""
    dead_entry_id: str | None = None
    """DEAD: the dead-letter entry (for `replay_dead`)."""
    result: Any = None
    """SUCCEEDED: what the handler returned (msgpack-decoded; None when it returned None, or
    once a result kept for its task's ``result_ttl`` expired: `result_ttl_ms`)."""
    paused_since_ms: int | None = None
    """READY: since when the group has been paused, so the job waits (Redis clock); None:
    the group is not paused."""
    started_ms: int | None = None
    """RUNNING: when its worker started the handler on it, Redis clock (as the worker's
    heartbeat says: within a beat); None: not started (`read_ahead`), or not known."""
    read_ahead: bool | None = None
    """RUNNING: True when its worker holds it without running it yet (read ahead of its
    slots, or waiting for a flow limit's turn or a paused group), False when it runs (since
    `started_ms`); None when not known: its worker has not beaten since it took the entry,
    or its consumer does not beat (a pull consumer)."""
    result_ttl_ms: int | None = None
    """SUCCEEDED: the result is kept apart for this long after the run was settled, its
    task's ``result_ttl`` (`get()` and `result()` read it there); None: it is kept with the
    record."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job's state as `get()` reports it; fields that do not apply to it are None.

    A job cancelled after it fired (its retry, cancelled) keeps what its latest firing
    said: `attempt` is then the attempts made. One cancelled before it fired has only
    `cancelled_ms`: a cancel deletes the pending job."""

    id: str
    topic: str
    state: JobState
    due_ms: int | None = None
    """PENDING/RETRYING: when it is due next; fired: when its latest firing was due."""
    attempt: int | None = None
    max_attempts: int | None = None
    enqueued_ms: int | None = None
    """When the attempt shown was written (writer's clock); None once its entry is trimmed."""
    payload: Any = None
    """Pending, or fired while its entry is in the stream; None when not kept (see
    `payload_kept`)."""
    entry_id: str | None = None
    """Fired: its latest stream entry."""
    fired_ms: int | None = None
    """Fired: when its latest entry went into the stream (Redis clock)."""
    cancelled_ms: int | None = None
    expired_ms: int | None = None
    """EXPIRED: when it was dropped at its expiry (Redis clock): at its due time, or when a
    worker read it; None otherwise."""
    last_error: str | None = None
    """The failed attempt's error (RETRYING, a later attempt RUNNING, a cancelled retry)."""
    groups: tuple[GroupInfo, ...] = field(default=())
    payload_kept: bool = False
    """Whether `payload` is the job's: False when it is not known (cancelled before it
    fired, its stream entry trimmed, unknown), and `payload` None says nothing."""
    options: dict[str, Any] = field(default_factory=dict)
    """The options it was enqueued with that are stored with it (`core.options.STORED`:
    ``traceparent``, ``callback`` by its URL, ``key``, ``ordered``, ...), each by name; empty
    when not known (as `payload`)."""
    waiting: bool = False
    """READY on its shard's due line: due (at `due_ms`), waiting its turn to enter the stream
    (docs/architecture.md, "The due line"); not fired yet, so it has no entry or groups and
    can still be cancelled and rescheduled. False for every other job."""
    parent: JobRef | None = None
    """A flow's child: the join's parent awaiting it, while it awaits (`Client.children`
    lists a parent's children)."""
    continuations: tuple[JobRef, ...] = ()
    """The jobs awaiting this one's outcome (``after=``), while they await."""
    after: JobRef | None = None
    """AWAITING, a continuation: the job it follows."""
    children: int = 0
    """A flow's parent: how many children it has (known while it awaits and three days
    after); 0 for any other job."""


def payload_gone(info: JobInfo) -> str:
    """Why a job's payload is not known (`payload_kept` False), said alike in every face."""
    if info.entry_id is None and info.state is JobState.CANCELLED:
        return "not kept: the job was cancelled before it fired"
    if info.entry_id is not None:
        return "not kept: its stream entry was trimmed"
    return "unknown"


@dataclass(frozen=True, slots=True)
class GroupLookup:
    """What `lookup.lua` read for one consumer group."""

    name: str
    last_delivered: str
    record: bytes | None
    latest: str | None
    fields: dict[bytes, bytes] | None
    """The fields of `latest` when it is not the job's all-groups entry."""
    pending: tuple[str, int, int] | None
    """(consumer, idle ms, deliveries) while `latest` is pending in the group."""


@dataclass(frozen=True, slots=True)
class Lookup:
    """What `lookup.lua` read for one job id."""

    now_ms: int
    due_ms: int | None
    envelope: bytes | None
    cancelled_ms: int | None
    entry: str | None
    fields: dict[bytes, bytes] | None
    groups: Sequence[GroupLookup] = ()
    expired_ms: int | None = None
    """When a first attempt of it was last dropped at its expiry at fire, never fired."""
    waiting: bool = False
    """`due_ms` and `envelope` are a job's on its shard's due line (due, not fired yet)."""


@dataclass(frozen=True, slots=True)
class Record:
    """A group's history record, decoded: the one layout, written by ``wq_record``
    (``store/lua/includes/history.lua``) and by `pack_success`, read by `read_record`."""

    kind: str
    entry: str
    at_ms: int
    duration_ms: int
    error: str
    reason: str
    dead_entry: str
    result: bytes | None = None
    """``S`` only: the handler's return value as msgpack; absent (not written) for None."""
    result_ttl_ms: int = 0
    """``S`` only: the return value is kept apart (`wheelq.core.keys.result_key`) for this
    long, its task's ``result_ttl`` (the ninth element); 0: with the record, or none."""


# As wq_record writes them: every string, the result's bytes too, as a msgpack str. The
# scripts read records with cmsgpack, which reads no bin: a record holding one would be
# unreadable there, and the scripts would take the job for one never settled.
_pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=False).pack


def pack_success(
    entry: str, at_ms: int, duration_ms: int, result: bytes | None, result_ttl_ms: int = 0
) -> bytes:
    """An ``S`` record (`Record`'s layout; `result` a trailing element only when given; with
    `result_ttl_ms`, the result is kept apart: the record names its TTL instead)."""
    if result is None:
        return _pack(("S", entry, at_ms, duration_ms, "", "", ""))
    if result_ttl_ms:
        return _pack(("S", entry, at_ms, duration_ms, "", "", "", "", result_ttl_ms))
    return _pack(("S", entry, at_ms, duration_ms, "", "", "", result))


def pack_expired(entry: str, at_ms: int, error: str = "") -> bytes:
    """An ``X`` record: the entry dropped at its expiry at `at_ms`, never run (`Record`'s
    layout; `error`: its last attempt's, for a retry)."""
    return _pack(("X", entry, at_ms, 0, error, EXPIRED_REASON, ""))


def unpack_record(raw: bytes) -> list[Any]:
    """A record's elements: its text as str, its result (the eighth element) as bytes.

    Raises:
        ValueError: `raw` is not a record (msgpack's own errors are ValueErrors too).
    """
    r = msgpack.unpackb(raw, raw=True)
    if not isinstance(r, list):
        raise ValueError(f"a record is a msgpack array, got {type(r).__name__}")
    # A result written as bin (by earlier versions) reads as bytes too.
    return [
        v.decode("utf-8", "replace") if isinstance(v, bytes) and i != 7 else v
        for i, v in enumerate(r)
    ]


def read_record(raw: bytes | None) -> Record | None:
    """A history record as written by ``wq_record``; None when absent or unreadable."""
    if raw is None:
        return None
    try:
        r = unpack_record(raw)
        result = r[7] if len(r) > 7 and isinstance(r[7], bytes) else None
        ttl_ms = r[8] if len(r) > 8 and isinstance(r[8], int) and r[8] > 0 else 0
        if ttl_ms:
            result = None
        return Record(
            str(r[0]),
            str(r[1]),
            int(r[2]),
            int(r[3]),
            str(r[4]),
            str(r[5]),
            str(r[6]),
            result,
            ttl_ms,
        )
    except (ValueError, TypeError, IndexError, msgpack.UnpackException):
        return None


def decode_result(data: bytes | None) -> Any:
    """A kept result decoded as `read_payload` reads it (None when there is none, or it
    does not decode)."""
    if data is None:
        return None
    try:
        return read_payload(data)
    except Exception:  # msgpack raises several unrelated types
        return None


def _group(g: GroupLookup, now_ms: int) -> GroupInfo | None:
    if g.latest is None:
        return None
    rec = read_record(g.record)
    if rec is not None and rec.entry != g.latest:
        rec = None  # it names an older firing
    if g.pending is not None:
        consumer, idle_ms, deliveries = g.pending
        error = rec.error or None if rec is not None and rec.kind == "F" else None
        # now and idle are whole ms: never report a delivery before the entry was added
        since_ms = max(now_ms - idle_ms, entry_ms(g.latest))
        return GroupInfo(
            g.name, JobState.RUNNING, g.latest, consumer, since_ms, deliveries, error=error
        )
    if entry_order(g.latest) > entry_order(g.last_delivered):
        return GroupInfo(g.name, JobState.READY, g.latest)
    if rec is None or rec.kind == "F":
        return GroupInfo(g.name, JobState.SUCCEEDED, g.latest)  # acked with no record
    if rec.kind == "S":
        return GroupInfo(
            g.name,
            JobState.SUCCEEDED,
            g.latest,
            finished_ms=rec.at_ms,
            duration_ms=rec.duration_ms,
            result=decode_result(rec.result),
            result_ttl_ms=rec.result_ttl_ms or None,
        )
    if rec.kind == "D":
        return GroupInfo(
            g.name,
            JobState.DEAD,
            g.latest,
            finished_ms=rec.at_ms,
            error=rec.error,
            reason=rec.reason,
            dead_entry_id=rec.dead_entry or None,
        )
    if rec.kind == "C":
        return GroupInfo(
            g.name, JobState.CANCELLED, g.latest, finished_ms=rec.at_ms, error=rec.error or None
        )
    if rec.kind == "X":
        error = EXPIRED_REASON + (f": {rec.error}" if rec.error else "")
        return GroupInfo(g.name, JobState.EXPIRED, g.latest, finished_ms=rec.at_ms, error=error)
    return GroupInfo(g.name, JobState.RETRYING, g.latest, finished_ms=rec.at_ms, error=rec.error)


def _pending(topic: str, job_id: str, raw: Lookup) -> JobInfo:
    assert raw.envelope is not None and raw.due_ms is not None
    try:
        env = Envelope.unpack(raw.envelope)
        payload = read_payload(env.payload)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MalformedJobError(topic, job_id, str(exc)) from exc
    groups: list[GroupInfo] = []
    last_error = None
    for g in raw.groups:
        rec = read_record(g.record)
        if env.group and g.name == env.group:
            last_error = rec.error if rec is not None and rec.kind == "R" else None
            groups.append(
                GroupInfo(
                    g.name,
                    JobState.RETRYING,
                    rec.entry if rec is not None else "",
                    finished_ms=rec.at_ms if rec is not None else None,
                    error=last_error,
                )
            )
    state = JobState.RETRYING if env.attempt > 1 else JobState.PENDING
    if raw.due_ms == WAIT_DUE_MS:  # it follows a job that has not ended (core/follow.py)
        state = JobState.AWAITING
    elif raw.waiting:  # due: ready, on the due line until the stream has room
        state = JobState.READY
        groups = [replace(g, state=JobState.READY) for g in groups]
    return JobInfo(
        job_id,
        topic,
        state,
        raw.due_ms,
        env.attempt,
        env.max_attempts,
        env.enqueued_ms,
        payload,
        last_error=last_error,
        groups=tuple(groups),
        payload_kept=True,
        options=view(env.options),
        waiting=raw.waiting,
    )


def with_pauses(info: JobInfo, paused: PauseState) -> JobInfo:
    """`info` with each READY group's pause, if it is paused (`PauseState` of its topic)."""
    if not any(g.state is JobState.READY and paused.group_paused(g.group) for g in info.groups):
        return info
    groups = tuple(
        replace(g, paused_since_ms=paused.group_since_ms(g.group))
        if g.state is JobState.READY
        else g
        for g in info.groups
    )
    return replace(info, groups=groups)


def with_starts(info: JobInfo, shard: int, held: Held) -> JobInfo:
    """`info` with each RUNNING group's start as its worker's last beat says (`held`: the
    live workers' held entries; `shard`: the job's)."""
    groups = []
    for g in info.groups:
        start = None
        if g.state is JobState.RUNNING and g.consumer is not None:
            start = start_of(held, (g.consumer, g.group, info.topic, shard, g.entry_id))
        if start is None:
            groups.append(g)
        else:
            groups.append(replace(g, started_ms=start.started_ms, read_ahead=start.read_ahead))
    return replace(info, groups=tuple(groups))


def job_info(topic: str, job_id: str, raw: Lookup) -> JobInfo:
    """The `JobInfo` that `raw` shows; MalformedJobError for a pending undecodable one."""
    if raw.due_ms is not None and raw.envelope is not None:
        return _pending(topic, job_id, raw)
    fired = [(g.latest, g.fields if g.latest != raw.entry else raw.fields) for g in raw.groups]
    if raw.entry is not None:
        fired.append((raw.entry, raw.fields))
    known = [(entry, fields) for entry, fields in fired if entry is not None]
    if not known:
        if raw.expired_ms is not None and (raw.cancelled_ms or 0) <= raw.expired_ms:
            return _expired_unfired(topic, job_id, raw)
        state = JobState.UNKNOWN if raw.cancelled_ms is None else JobState.CANCELLED
        return JobInfo(job_id, topic, state, cancelled_ms=raw.cancelled_ms)
    entry, fields = max(known, key=lambda k: entry_order(k[0]))
    if raw.expired_ms is not None and raw.expired_ms >= entry_ms(entry):
        # enqueued again under its id after a firing, and dropped at its expiry: expired
        return _expired_unfired(topic, job_id, raw)
    groups = tuple(g for g in (_group(g, raw.now_ms) for g in raw.groups) if g is not None)
    states = {g.state for g in groups}
    state = next((s for s in _PRECEDENCE if s in states), JobState.SUCCEEDED)
    if not groups:
        state = JobState.READY  # no consumer group reads the topic yet
    if raw.cancelled_ms is not None and raw.cancelled_ms >= entry_ms(entry):
        # Cancelled after its last firing (its retry): cancelled, with what that firing
        # said (the attempts made) and each group's part.
        state = JobState.CANCELLED
    errors = [g.error for g in groups if g.error and g.state in (state, JobState.RUNNING)]
    expired = [g.finished_ms or 0 for g in groups if g.state is JobState.EXPIRED]
    due_ms, attempt, most, enqueued_ms, payload, kept = _entry_facts(fields)
    return JobInfo(
        job_id,
        topic,
        state,
        due_ms,
        attempt,
        most,
        enqueued_ms,
        payload,
        entry_id=entry,
        fired_ms=entry_ms(entry) or None,  # 0-0: dead-lettered unfired (a failed join's parent)
        cancelled_ms=raw.cancelled_ms,
        expired_ms=max(expired) if state is JobState.EXPIRED and expired else None,
        last_error=errors[0] if errors else None,
        groups=groups,
        payload_kept=kept,
        options=entry_options(fields) if fields else {},
    )


def _expired_unfired(topic: str, job_id: str, raw: Lookup) -> JobInfo:
    """A job whose latest attempt was dropped at its expiry when it came due, never fired."""
    return JobInfo(
        job_id,
        topic,
        JobState.EXPIRED,
        cancelled_ms=raw.cancelled_ms,
        expired_ms=raw.expired_ms,
        last_error=EXPIRED_REASON,
    )


def entry_options(fields: dict[bytes, bytes]) -> dict[str, Any]:
    """`JobInfo.options` of a ready-stream entry (an unreadable field: as if not set)."""
    values = []
    for o in STORED:
        raw = fields.get(o.entry or b"", b"")
        try:
            values.append(KINDS[o.kind or ""].read(raw))
        except (ValueError, UnicodeDecodeError):
            values.append(KINDS[o.kind or ""].unset)
    return view(tuple(values))


def _entry_facts(
    fields: dict[bytes, bytes] | None,
) -> tuple[int | None, int | None, int | None, int | None, Any, bool]:
    """(due_ms, attempt, max_attempts, enqueued_ms, payload, payload kept) of an entry, as
    far as readable."""
    if not fields:
        return (None, None, None, None, None, False)
    kept = True
    try:
        payload = read_payload(fields[Field.PAYLOAD])
    except Exception:  # a malformed payload is reported by the worker, not by a lookup
        payload, kept = None, False
    try:
        enqueued_ms = int(fields.get(Field.ENQUEUED, b"0")) or None
    except ValueError:
        enqueued_ms = None
    try:
        due, attempt, most = (
            int(fields[k]) for k in (Field.DUE, Field.ATTEMPT, Field.MAX_ATTEMPTS)
        )
    except (KeyError, ValueError):
        return (None, None, None, enqueued_ms, payload, kept)
    return (due, attempt, most, enqueued_ms, payload, kept)


_FINAL = (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED, JobState.EXPIRED)


def outcome(info: JobInfo, group: str) -> GroupInfo | None:
    """`group`'s final outcome of the job's latest run, as `result()` waits for it: the
    group's `GroupInfo` once SUCCEEDED, DEAD, CANCELLED or EXPIRED (one for the whole job
    when it was cancelled, or dropped at its expiry, before it fired); None while it may
    still run (or nothing is known of it)."""
    if info.state is JobState.CANCELLED and not info.groups:
        return GroupInfo(group, JobState.CANCELLED, "", finished_ms=info.cancelled_ms)
    if info.state is JobState.EXPIRED and info.entry_id is None:
        return GroupInfo(
            group, JobState.EXPIRED, "", finished_ms=info.expired_ms, error=EXPIRED_REASON
        )
    for g in info.groups:
        if g.group == group:
            return g if g.state in _FINAL else None
    return None
