"""The ``ack=`` levels of the producer's writes (primary, replicated: WAIT, persisted:
WAITAOF) and the check that each round reached its level.
"""

from __future__ import annotations

from typing import Any, TypeVar

from wheelq.core.settings import ClientSettings, setting_ranges
from wheelq.errors import DuplicateJobError, DurabilityError, InvalidArgumentError
from wheelq.producer.operations import Op, Producer
from wheelq.store import enqueue
from wheelq.store.acked import Acked, Wait

T = TypeVar("T")

PRIMARY, REPLICATED, PERSISTED = "primary", "replicated", "persisted"
LEVELS = (PRIMARY, REPLICATED, PERSISTED)


def check_ack(ack: object) -> str:
    if not isinstance(ack, str) or ack not in LEVELS:
        raise InvalidArgumentError(
            "ack", f"ack must be 'primary', 'replicated' or 'persisted', got {ack!r}"
        )
    return ack


class Durability:
    """A client's default ack level and what each level waits for."""

    def __init__(self, default: object, producer: Producer) -> None:
        self._settings = producer.settings
        self._block_ms = producer.block_ms
        self.default = check_ack(default)
        self._waits = {level: self._wait(level) for level in (REPLICATED, PERSISTED)}
        if self.default != PRIMARY:
            self._check(self.default)

    def plan(
        self, producer: Producer, topic: str, op: Op[T], ack: object
    ) -> tuple[Op[T], Wait | None]:
        """The operation to run and what each of its rounds waits for (None: nothing)."""
        level = self.default if ack is None else check_ack(ack)
        if level == PRIMARY:
            return op, None
        self._check(level)
        wait = self._waits[level]
        return confirmed(producer, topic, op, level, wait), wait

    def wait_for(self, ack: object) -> Wait | None:
        """What a write at `ack` (None: the default) waits for; None: nothing."""
        level = self.default if ack is None else check_ack(ack)
        if level == PRIMARY:
            return None
        self._check(level)
        return self._waits[level]

    def _wait(self, level: str) -> Wait:
        s = self._settings
        return Wait(s.ack_replicas, s.ack_timeout_ms, aof=level == PERSISTED)

    def _check(self, level: str) -> None:
        s = self._settings
        if level == REPLICATED and s.ack_replicas < 1:
            raise InvalidArgumentError(
                "ack_replicas", "ack='replicated' needs ack_replicas >= 1, got 0"
            )
        # WAIT and WAITAOF hold the connection up to ack_timeout_ms: past the socket timeout
        # a level not reached would read as a dead server, the write in doubt.
        accepted = setting_ranges(ClientSettings)["ack_timeout_ms"]
        longest = self._block_ms(accepted.high)
        if s.ack_timeout_ms > longest:
            raise InvalidArgumentError(
                "ack_timeout_ms",
                f"ack={level!r} waits on the connection: ack_timeout_ms must be an int in "
                f"[{accepted.low}, {longest}], half its socket timeout (a longer socket_timeout, "
                f"in redis_options or the URL's ?socket_timeout=, allows more), "
                f"got {s.ack_timeout_ms}",
            )


def confirmed(producer: Producer, topic: str, op: Op[T], level: str, wait: Wait) -> Op[T]:
    """Run `op` and check each round was confirmed; else `DurabilityError` naming the jobs
    (all of them when a call naming none fell short, and the shard count is forgotten)."""
    doubt: list[str] = []  # the ids of calls not confirmed
    named: list[str] = []  # the ids of every call
    unnamed = False  # a call naming no job was not confirmed
    fewest = wait.replicas
    result: Any = None
    cause: Exception | None = None
    try:
        calls = next(op)
        while True:
            replies = yield calls
            short = replies.short if isinstance(replies, Acked) else {}
            for call in calls:
                named += enqueue.job_ids(call)
            for i, count in short.items():
                fewest = min(fewest, count)
                ids = enqueue.job_ids(calls[i])
                doubt += ids
                unnamed = unnamed or not ids
            calls = op.send(replies)
    except StopIteration as done:
        result = done.value
    except Exception as exc:
        if not (doubt or unnamed):
            raise
        cause = exc
    if unnamed:
        producer.forget(topic)
        doubt = named
    if isinstance(cause, DuplicateJobError):  # not written: not in doubt
        duplicates = set(cause.job_ids)
        doubt = [i for i in doubt if i not in duplicates]
    if not doubt:
        if cause is not None:
            raise cause
        return result  # type: ignore[no-any-return]
    unique = list(dict.fromkeys(doubt))
    raise DurabilityError(level, topic, unique, wait.replicas, fewest, result) from cause
