"""Replaying jobs written down before Redis took them (a spool file's rows, an outbox
table's rows) exactly once: each write carries a token the shard records, so a step
repeated after a crash writes nothing twice, and a deadline, so a step frozen past it
writes nothing at all (docs/architecture.md, "The producer spool and breaker" and "The
outbox relay").
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from wheelq.core import keys as k
from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.core.options import DEFAULT_PRIORITY
from wheelq.errors import MalformedJobError, ScriptError, TopicConfigError
from wheelq.producer.operations import Op, Producer, register_order
from wheelq.runtime.clock import RedisClock, SyncedClock
from wheelq.store import enqueue, server
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite
from wheelq.store.scripts import Placed

log = logging.getLogger("wheelq.producer.replay")
T = TypeVar("T")

FOR_GOOD = (ScriptError, MalformedJobError, TopicConfigError)
"""Errors a replay of the same row would meet again: the row is refused, not retried."""

SYNC_MS = 10_000
"""How often a replayer measures its clock's offset to the Redis clock (one TIME round)."""


@dataclass(frozen=True, slots=True)
class Fence:
    """How late one step's writes may land, read from the Redis clock before the step took
    its rows (docs/architecture.md, "The outbox relay", the fence).

    Each shard refuses the step's writes once its clock is past `deadline_ms` (that time
    plus the fence); the tokens of rows an earlier step settled are kept until
    `settled_until_ms` (plus twice the fence: a margin for the skew between two replayers'
    clocks), past the deadline of any write that carries them and was sent before they were
    settled.
    """

    deadline_ms: int
    settled_until_ms: int


class FenceClock:
    """The Redis clock a replayer reads its fences from: the local monotonic clock, corrected
    by a TIME round at most every `SYNC_MS` (`sync`, the first round of a step that needs it).
    """

    def __init__(self, fence_ms: int, clock: SyncedClock | None = None) -> None:
        self.fence_ms = fence_ms
        self._clock = clock or RedisClock()
        self._synced_ms: float | None = None

    def sync(self) -> Op[None]:
        """Measure the offset if it is `SYNC_MS` old (replies as values or raised: either)."""
        before = self._clock.local_ms()
        if self._synced_ms is not None and before - self._synced_ms < SYNC_MS:
            return
        (server_ms,) = yield [server.server_time()]
        if isinstance(server_ms, Exception):
            raise server_ms
        self._clock.add_sample(before, server_ms, self._clock.local_ms())
        self._synced_ms = before

    def fence(self) -> Fence:
        """The fence of a step that takes its rows now."""
        now = self._clock.now_ms()
        return Fence(now + self.fence_ms, now + 2 * self.fence_ms)


@dataclass(frozen=True, slots=True)
class HeldJob:
    """A validated, encoded job held outside Redis until a replay places it.

    `mode` ``"d"``: due `due_ms` on the clock that wrote the row (its `written_ms` plus the
    delay), sent as the delay left, so clock skew between that clock and Redis cancels out;
    ``"a"``: due at `due_ms`. `seq` numbers the row in its source; the write's token is
    `given_token`, else ``source_id:seq``.
    """

    seq: int
    topic: str
    job_id: str
    mode: str
    due_ms: int
    replace: bool
    envelope: bytes
    written_ms: int
    given_token: str = ""
    order_key: str = ""  # the key whose order the job joins (registered before the write)

    def token(self, source_id: str) -> str:
        """The row's replay token: ``CALL:n`` from a lost direct call, else ``source_id:seq``."""
        return self.given_token or f"{source_id}:{self.seq}"

    def replay_write(self, source_id: str, now_ms: int) -> JobWrite:
        """The write that replays this row; `now_ms` on the clock that wrote it."""
        due = (
            DueSpec("delay", max(0, self.due_ms - now_ms))
            if self.mode == "d"
            else DueSpec("at", self.due_ms)
        )
        token = self.token(source_id)
        lined, key = _read(self.envelope)
        return JobWrite(
            self.job_id,
            due,
            self.replace,
            self.envelope,
            token,
            self.order_key,
            False,
            lined,
            key,
        )


def _read(envelope: bytes) -> tuple[bool, str]:
    """Whether a spooled job's priority makes its shard order its due jobs, and its key ("":
    none), for the key index; one that does not decode: no, and none (the script refuses it
    when due now, as before)."""
    try:
        env = Envelope.unpack(envelope)
    except ValueError:
        return False, ""
    return env.priority != DEFAULT_PRIORITY, env.key or ""


@dataclass(slots=True)
class Replayed:
    """What one replay step did with its rows."""

    done: list[HeldJob] = field(default_factory=list)  # in Redis (or a job of that id was)
    rejected: list[tuple[HeldJob, str]] = field(default_factory=list)  # refused for good: why
    duplicates: list[HeldJob] = field(default_factory=list)  # of `done`: an id was pending
    confirmed: dict[k.ShardKeys, list[str]] = field(default_factory=dict)  # tokens of `done`
    failure: Exception | None = None  # what stopped the rest (their rows stay, to retry)


def replay(
    producer: Producer,
    rows: Sequence[HeldJob],
    source_id: str,
    now_ms: int,
    record_ms: int,
    forget: dict[k.ShardKeys, list[str]],
    fence: Fence,
) -> Generator[list[Call[Any]], list[Any], Replayed]:
    """Place `rows` in Redis, each shard's in one call with its tokens recorded `record_ms`
    and refused whole past `fence`'s deadline (`LateReplayError`, a failure: rows kept).

    `forget`: tokens of rows an earlier step settled (gone from their source), kept in the
    record only until `fence.settled_until_ms` from the same round on. Replies come as values
    (``return_exceptions``): a failing shard leaves its rows for the next step, whose tokens
    make the retry write nothing twice.
    """
    out = Replayed()
    groups: dict[k.ShardKeys, list[HeldJob]] = {}
    for topic in dict.fromkeys(row.topic for row in rows):
        mine = [row for row in rows if row.topic == topic]
        try:
            shards = yield from _raising(producer.shard_count(topic, create=True))
        except FOR_GOOD as exc:
            out.rejected += [(row, f"{type(exc).__name__}: {exc}") for row in mine]
            continue
        assert shards is not None
        for row in mine:
            groups.setdefault(k.ShardKeys(topic, k.shard_of(row.job_id, shards)), []).append(row)
    writes = {
        keys: [row.replay_write(source_id, now_ms) for row in g] for keys, g in groups.items()
    }
    ordered = [(keys.topic, [w for w in ws if w.order_key]) for keys, ws in writes.items()]
    for topic, order in ordered:
        if order:  # registered before the writes (idempotent: a repeat registers nothing new)
            yield from _raising(register_order(topic, order))
    until = fence.settled_until_ms
    drop: list[Call[Any]] = [enqueue.settle_replayed(ks, t, until) for ks, t in forget.items()]
    deadline = fence.deadline_ms
    calls = [
        enqueue.enqueue(keys, ws, record_ms, deadline_ms=deadline, orders=any(w.orders for w in ws))
        for keys, ws in writes.items()
    ]
    replies = (yield [*drop, *calls]) if drop or calls else []
    for (keys, group), reply in zip(groups.items(), replies[len(drop) :], strict=True):
        if isinstance(reply, FOR_GOOD):
            out.rejected += [(row, f"{type(reply).__name__}: {reply}") for row in group]
        elif isinstance(reply, Exception):
            out.failure = out.failure or reply
        else:
            out.done += group
            out.confirmed[keys] = [row.token(source_id) for row in group]
            out.duplicates += [
                r for r, p in zip(group, reply, strict=True) if p == Placed.DUPLICATE
            ]
    return out


def warn_duplicates(what: str, duplicates: Sequence[HeldJob]) -> None:
    """Log the rows not written because a job of their id was pending (replace=False)."""
    by_topic: dict[str, list[str]] = {}
    for row in duplicates:
        by_topic.setdefault(row.topic, []).append(row.job_id)
    for topic, ids in by_topic.items():
        log.warning(
            "%s %s of %r not written: a job of that id was pending (replace=False)",
            what,
            ids[:5],
            topic,
        )


def _raising(op: Op[T]) -> Op[T]:
    """Drive `op` (which expects raised errors) inside rounds whose errors come as replies."""
    try:
        calls = next(op)
        while True:
            replies = yield calls
            error = next((r for r in replies if isinstance(r, Exception)), None)
            calls = op.throw(error) if error is not None else op.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
