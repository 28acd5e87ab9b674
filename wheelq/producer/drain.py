"""The spool's drain: replays spooled jobs into Redis, in order, exactly once.

Each step takes the oldest rows (at most ``batch_size`` jobs and `STEP_BYTES` of
envelopes), groups them by shard (one ``enqueue.lua`` call per shard, rows in spool order)
and sends them in one pipeline as a replay: each job with its row's token (``spool_id:seq``)
and the same id and envelope it was spooled with. Rows are deleted only after Redis
confirmed their call. A reply that is lost after Redis applied the call (a timeout, a
dropped connection, the producer killed before the delete) leaves the rows, and the next
replay of them finds their tokens in the shard's record (``{T:s}:spooled``) and writes
nothing again, even for a job that fired meanwhile. Tokens of deleted rows are removed from
the record in the next step's pipeline (they expire after ``spool_record_ms`` in any case).

A call refused for good (a key of the wrong type, a corrupt topic registry) moves its rows
to the file's ``rejected`` table, logged as an ERROR, so one bad topic cannot hold up the
others; a job whose id is pending already (``replace`` not asked for) is dropped with a
warning, as `DuplicateJobError` would have said. Any other failure leaves the rows for the
next try, after a pause (`wheelq.runtime.outage.Outage`), and shows in
`SpoolStats.last_error`. The runners (`wheelq.producer.drain_runner`) own the loop.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

from wheelq.core import keys as k
from wheelq.core.clock import Clock
from wheelq.errors import MalformedJobError, ScriptError, TopicConfigError
from wheelq.producer.breaker import Breaker
from wheelq.producer.spool import Spool, SpooledJob, SpoolStats
from wheelq.runtime.outage import Outage
from wheelq.store import job_writes
from wheelq.store.executor import Call
from wheelq.store.scripts import Placed

if TYPE_CHECKING:
    from wheelq.producer.operations import Op, Producer

log = logging.getLogger("wheelq.producer.spool")
T = TypeVar("T")

STEP_BYTES = 4 * 1024 * 1024  # envelope bytes per step (one row more if larger)
_FOR_GOOD = (ScriptError, MalformedJobError, TopicConfigError)


class Drain:
    """The replay, one bounded step at a time; see the module docstring.

    Args:
        spool: The open spool.
        producer: The client's producer (settings, the topics' shard counts).
        breaker: The client's breaker: a step's success closes it, a connection-level
            failure opens it.
        clock: The producer's wall clock (what spooled due times are measured on).
    """

    def __init__(self, spool: Spool, producer: Producer, breaker: Breaker, clock: Clock) -> None:
        self.spool = spool
        self._producer = producer
        self._breaker = breaker
        self._clock = clock
        self._outage = Outage(log, "spool drain")
        self._forget: dict[k.ShardKeys, list[str]] = {}
        self.last_error: str | None = None

    def pending(self) -> bool:
        """Whether a step has anything to do."""
        return bool(self.spool.depth or self._forget)

    def stats(self) -> SpoolStats:
        return self.spool.stats(self._clock.now_ms(), self.last_error)

    def succeeded(self) -> None:
        """Note a step that returned."""
        if self.last_error is not None and not self.spool.depth:
            log.info("spool %s drained: every spooled job is in redis", self.spool.path)
        self.last_error = None
        self._outage.ok()
        self._breaker.report(False, None)

    def failed(self, exc: Exception) -> float:
        """Note a step that raised; returns the pause before the next, in seconds."""
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._breaker.report(False, exc)
        return self._outage.failed(exc)

    def step(self) -> Op[int]:
        """Replay the oldest rows; returns how many left the spool. Driven with
        ``return_exceptions=True``: a call's error is its reply.

        Raises:
            Exception: What kept some rows in the spool (they are tried again).
        """
        settings = self._producer.settings
        rows = self.spool.head(settings.batch_size, STEP_BYTES)
        groups: dict[k.ShardKeys, list[SpooledJob]] = {}
        rejected: list[tuple[SpooledJob, str]] = []
        for topic in dict.fromkeys(row.topic for row in rows):
            mine = [row for row in rows if row.topic == topic]
            try:
                shards = yield from _raising(self._producer.shard_count(topic, create=True))
            except _FOR_GOOD as exc:
                rejected += [(row, f"{type(exc).__name__}: {exc}") for row in mine]
                continue
            assert shards is not None
            for row in mine:
                keys = k.ShardKeys(topic, k.shard_of(row.job_id, shards))
                groups.setdefault(keys, []).append(row)
        now = self._clock.now_ms()
        forget: list[Call[Any]] = [
            job_writes.forget_replayed(ks, t) for ks, t in self._forget.items()
        ]
        replays = [
            job_writes.enqueue(
                keys,
                [row.replay_write(self.spool.spool_id, now) for row in group],
                settings.spool_record_ms,
            )
            for keys, group in groups.items()
        ]
        replies = (yield [*forget, *replays]) if forget or replays else []
        self._forget = {}  # gone or not: the record forgets them after spool_record_ms anyway
        done: list[SpooledJob] = []
        confirmed: dict[k.ShardKeys, list[str]] = {}
        failure: Exception | None = None
        for (keys, group), reply in zip(groups.items(), replies[len(forget) :], strict=True):
            if isinstance(reply, _FOR_GOOD):
                rejected += [(row, f"{type(reply).__name__}: {reply}") for row in group]
            elif isinstance(reply, Exception):
                failure = failure or reply
            else:
                done += group
                confirmed[keys] = [row.token(self.spool.spool_id) for row in group]
                _warn_duplicates(keys.topic, group, reply)
        self.spool.settle(done, rejected, now)
        self._forget = confirmed  # only once their rows are gone from the file
        for row, error in rejected:
            log.error("spooled job %r of %r refused for good: %s", row.job_id, row.topic, error)
        if failure is not None:
            raise failure
        return len(done) + len(rejected)


def _warn_duplicates(topic: str, group: list[SpooledJob], placed: list[Placed]) -> None:
    dropped = [row.job_id for row, p in zip(group, placed, strict=True) if p == Placed.DUPLICATE]
    if dropped:
        log.warning(
            "spooled jobs %s of %r not written: a job of that id was pending (replace=False)",
            dropped[:5],
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
