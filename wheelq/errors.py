"""Every error wheelq raises, under one root; caller errors also subclass the built-in a
caller expects, and messages name the parameter and the accepted range.

```
WheelqError
├── InvalidArgumentError (also ValueError)  a caller passed a bad value; nothing was changed
│   ├── InvalidTopicError                   topic name outside [A-Za-z0-9_.-]{1,100}
│   ├── InvalidDelayError                   delay / at not a finite time >= 0, or both given
│   ├── InvalidJobIdError                   job_id empty, too long or with forbidden characters
│   ├── UnknownTopicError                   no topic of that name (pull, pause, resume)
│   ├── UnknownGroupError                   no consumer group of that name (pull, pause, result)
│   ├── UnknownJobError                     nothing is known of that job id (result)
│   ├── PayloadTooLargeError                encoded payload over the configured limit
│   ├── PayloadTooDeepError                 payload nested deeper than MAX_PAYLOAD_DEPTH levels
│   ├── SelectionGoneError                  bulk(): the selection was used up, or has expired
│   ├── InvalidHandlerError                 not a function of one Job (also TypeError)
│   └── InvalidSpecError                    a module:attribute (an app, a handler) names nothing
├── PayloadTypeError (also TypeError)       payload msgpack cannot serialise; nothing was changed
├── DuplicateJobError                       a job with that id is already pending (replace=False)
├── TopicFullError                          at max_pending; the refused jobs were not written
├── TopicConfigError                        another shard count, or a bad registry entry
├── TopicNotEmptyError                      drop_topic() of a topic with jobs still to run
├── GroupNotFoundError (also LookupError)   delete_group() of a group no shard of the topic has
├── GroupBusyError                          delete_group() of a group with entries in flight
├── GroupLimitError                         create_group() past the topic's cap of groups
├── DurabilityError                         a write not confirmed at its ack level
├── AckUnsupportedError                     ack="persisted" without WAITAOF or appendonly
├── AckUnreachedError                       a relay's start: Redis does not confirm its ack level
├── MalformedJobError                       a stored job cannot be decoded (get() names it)
├── LeaseLostError                          a scheduler node no longer holds a shard's lease
├── LateReplayError                         a replay's write reached Redis past its deadline
├── ScriptError                             a Lua script answered with a status it should not
│   └── WrongTypeError                      a key holds another type (not written by wheelq)
├── ScriptIncludeError                      a Lua file's includes are unknown, cyclic or short
├── HandlerTimeoutError                     a handler ran over handler_timeout_ms (its run failed)
├── HandlerExitError                        a handler raised SystemExit etc. (its run failed)
├── ResultError                             a handler's return value cannot be kept (its run failed)
│   ├── ResultTooLargeError                 its msgpack encoding is over result_max_bytes
│   └── ResultTypeError (also TypeError)    msgpack cannot serialise it
├── JobFailedError                          result(): the job was dead-lettered or cancelled
├── NoCurrentJobError (also LookupError)   current_job() outside a handler or task's run
├── EagerModeError                          App.eager() cannot run this call (says what can)
├── EventsOffError                          events(): the topic keeps no job events to follow
├── ResultTimeoutError (also TimeoutError)  result(): the job did not finish within the timeout
├── RedisUnavailableError                   redis unreachable or unable to take writes now
├── SpoolError                              a producer spool file cannot be used
│   └── SpoolLockedError                    another client (this process or another) has it open
├── OutboxError                             the PostgreSQL outbox cannot be used
│   ├── OutboxNotInstalledError             its tables are missing: run `wheelq outbox init`
│   ├── OutboxUnavailableError              the relay cannot reach its PostgreSQL (the DSN)
│   ├── NotInTransactionError (ValueError)  once() on a connection outside a transaction
│   └── UnsupportedConnectionError (TypeError)  not a psycopg, SQLAlchemy or Django connection
├── UnsupportedServerError                  start(): the server is older than Redis 7.0
└── EmbeddedServerError                     the embedded server binary failed to start
```
"""

from __future__ import annotations

import json
from collections.abc import Sequence


def _first_ids(ids: Sequence[str]) -> str:
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return ", ".join(repr(j) for j in list(ids)[:5]) + more


class WheelqError(Exception):
    """Root of every error raised by wheelq."""


class InvalidArgumentError(WheelqError, ValueError):
    """A caller passed a value out of range (`parameter` names it); nothing was changed."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class InvalidTopicError(InvalidArgumentError):
    """A topic name is empty, too long, or has characters outside [A-Za-z0-9_.-]."""


class InvalidDelayError(InvalidArgumentError):
    """A delay or due time is not a finite, non-negative time (or both were given)."""


class InvalidJobIdError(InvalidArgumentError):
    """A job id is empty, too long, or has characters that are not allowed."""


class UnknownTopicError(InvalidArgumentError):
    """The topic is not registered (nothing was ever enqueued on it); nothing was changed."""

    def __init__(self, topic: str) -> None:
        super().__init__("topic", f"no topic {topic!r}")
        self.topic = topic


class UnknownGroupError(InvalidArgumentError):
    """No shard of the topic has the group (pull, pause and result() never create one)."""

    def __init__(self, topic: str, group: str) -> None:
        super().__init__(
            "group",
            f"topic {topic!r} has no consumer group {group!r}: create it first "
            f'(POST /v1/topics/{topic}/groups with {{"name": {json.dumps(group)}}}, '
            "`wheelq groups create`, or Admin.create_group)",
        )
        self.topic = topic
        self.group = group


class UnknownJobError(InvalidArgumentError):
    """Nothing is known of the job: never enqueued on the topic, or its history is past
    retention (`result()` says so at once rather than wait for an outcome that cannot come)."""

    def __init__(self, topic: str, job_id: str, parameter: str = "job_id") -> None:
        named = "" if parameter == "job_id" else f"{parameter}: "
        super().__init__(
            parameter,
            f"{named}nothing is known of job {job_id!r} on topic {topic!r} (never enqueued "
            "there, or its history is past retention)",
        )
        self.topic = topic
        self.job_id = job_id


class NoFlowError(UnknownJobError):
    """`children()`: the job is no flow's parent, or its children list (kept 3 days after
    the parent no longer waits) has expired."""

    def __init__(self, topic: str, job_id: str) -> None:
        super().__init__(topic, job_id)
        self.args = (
            f"job {job_id!r} on topic {topic!r} is no flow's parent (enqueue_flow), or its "
            "children list, kept 3 days after the parent ran, has expired",
        )


class PayloadTooLargeError(InvalidArgumentError):
    """A payload's msgpack encoding is larger than the configured limit."""


class PayloadTooDeepError(InvalidArgumentError):
    """A payload nests lists and maps deeper than `wheelq.core.payload.MAX_PAYLOAD_DEPTH` levels."""


class InvalidHandlerError(InvalidArgumentError, TypeError):
    """A handler is not a function of one `wheelq.Job` that returns None."""


class InvalidSpecError(InvalidArgumentError):
    """A ``module:attribute`` spec (`parameter` names where it was given) names no object of
    the kind wanted: not of that form, no such module or attribute, or another type
    (`wheelq.tasks.loading`)."""


class SelectionGoneError(InvalidArgumentError):
    """`bulk()` on a selection acted on to its end already, or kept past its time; nothing
    was changed (a dry run makes a new one)."""

    def __init__(self, message: str) -> None:
        super().__init__("selection", message)


class PayloadTypeError(WheelqError, TypeError):
    """A payload holds a value msgpack cannot serialise; nothing was changed."""


class DuplicateJobError(WheelqError):
    """Jobs with these ids are already pending on the topic and `replace` was False."""

    def __init__(self, topic: str, job_ids: Sequence[str], enqueued: Sequence[str] = ()) -> None:
        self.topic, self.job_ids, self.enqueued = topic, list(job_ids), list(enqueued)
        super().__init__(self.describe())

    def describe(self, id_name: str = "job_id", replacing: str = "pass replace=True") -> str:
        """The message, in the words of the caller's interface (HTTP: ``id``, ``"replace"``)."""
        return (
            f"{id_name} {_first_ids(self.job_ids)} already pending on topic {self.topic!r}; "
            f"{replacing} to replace it"
        )


class TopicFullError(WheelqError):
    """The topic is at its ``max_pending``: the refused jobs (`job_ids`) were not written."""

    def __init__(
        self,
        topic: str,
        job_ids: Sequence[str],
        enqueued: Sequence[str] = (),
        ids: Sequence[str] = (),
    ) -> None:
        super().__init__(
            f"topic {topic!r} is full: it holds its max_pending of jobs waiting to fire; "
            f"{len(job_ids)} job(s) refused, nothing of them written (retry later)"
        )
        self.topic = topic
        self.job_ids = list(job_ids)
        self.enqueued = list(enqueued)
        self.ids = list(ids) or self.job_ids + self.enqueued


class TopicConfigError(WheelqError):
    """A topic has another shard count, or its registry entry is not a count in [1, 1024]."""


class TopicNotEmptyError(WheelqError):
    """`drop_topic` without `force` found jobs still to run; nothing was deleted."""

    def __init__(self, topic: str, pending: int, unacked: int) -> None:
        self.topic, self.pending, self.unacked = topic, pending, unacked
        super().__init__(self.explain("pass force=True"))

    def explain(self, forcing: str) -> str:
        """The message, with `forcing` as the interface says how to force the drop."""
        return (
            f"topic {self.topic!r} has {self.pending} pending jobs and {self.unacked} "
            f"ready-stream entries not yet acked; {forcing} to drop it anyway"
        )


class GroupNotFoundError(WheelqError, LookupError):
    """`delete_group` named a group the topic's stream does not have; nothing was deleted."""

    def __init__(
        self,
        topic: str,
        group: str,
        stream: str,
        known: Sequence[str] | None = None,
        elsewhere: Sequence[str] = (),
    ) -> None:
        if known is None:
            text = f"no topic {topic!r} (so no consumer group {group!r})"
        else:
            shown = ", ".join(repr(g) for g in list(known)[:20])
            more = " ..." if len(known) > 20 else ""
            there = f"its groups there: {shown}{more}" if known else "it has none there"
            text = (
                f"topic {topic!r} has no consumer group {group!r} on its {stream} stream ({there})"
            )
            if elsewhere:
                text += f"; a group of that name reads its {' and '.join(elsewhere)} stream"
        super().__init__(text)
        self.topic = topic
        self.group = group
        self.stream = stream
        self.known = None if known is None else list(known)
        self.elsewhere = list(elsewhere)


class GroupLimitError(WheelqError):
    """`create_group` would pass the topic's cap of consumer groups; nothing was created."""

    def __init__(self, topic: str, group: str, max_groups: int) -> None:
        super().__init__(
            f"topic {topic!r} has {max_groups} consumer groups, its cap (max_groups_per_topic): "
            f"group {group!r} was not created; delete a group no longer read, or raise the cap"
        )
        self.topic, self.group, self.max_groups = topic, group, max_groups


class GroupBusyError(WheelqError):
    """`delete_group` without `force` found entries in flight; it was kept where they were."""

    def __init__(
        self, topic: str, group: str, stream: str, in_flight: int, deleted: int = 0
    ) -> None:
        self.topic = topic
        self.group = group
        self.stream = stream
        self.in_flight = in_flight
        self.deleted = deleted
        super().__init__(self.explain("force=True"))

    def explain(self, force: str) -> str:
        """The message, with `force` as the interface spells the option that forces it."""
        where = "" if self.stream == "ready" else f" ({self.stream} stream)"
        kept = (
            f"it was deleted on {self.deleted} shards, and kept on those with entries in flight"
            if self.deleted
            else "nothing was deleted"
        )
        return (
            f"consumer group {self.group!r} of topic {self.topic!r}{where} has {self.in_flight} "
            f"entries in flight (delivered, not acked); {kept}. Stop its workers, or delete "
            f"it with {force} to drop them"
        )


class DurabilityError(WheelqError):
    """A write applied on the primary was not confirmed at its `ack` level (retry it by job id)."""

    def __init__(
        self,
        level: str,
        topic: str,
        job_ids: Sequence[str],
        wanted: int,
        confirmed: int,
        result: object = None,
    ) -> None:
        what = "on disk (WAITAOF)" if level == "persisted" else "(WAIT)"
        who = f"{confirmed} of {wanted} replicas" if confirmed >= 0 else "not even the primary"
        super().__init__(
            f"ack={level!r} not reached on topic {topic!r} for job {_first_ids(job_ids)}: "
            f"written on the primary, but {who} confirmed it {what} within the timeout; "
            "it may or may not survive a failover (retry with the same job_id and "
            "replace=True, or check with get())"
        )
        self.level = level
        self.topic = topic
        self.job_ids = list(job_ids)
        self.wanted = wanted
        self.confirmed = confirmed
        self.result = result


class AckUnsupportedError(WheelqError):
    """``ack="persisted"`` on a node without WAITAOF or ``appendonly yes``; nothing was written."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(
            f"ack='persisted' needs WAITAOF (Redis/Valkey >= 7.2) and appendonly yes; "
            f"{node} {reason}; nothing was written"
        )
        self.node, self.reason = node, reason


class AckUnreachedError(WheelqError):
    """A relay's start found that Redis does not confirm its ``ack`` level (too few replicas,
    or no AOF fsync, within ``ack_timeout_ms``); nothing was written."""

    def __init__(self, level: str, wanted: int, confirmed: int, timeout_ms: int) -> None:
        who = f"{confirmed} of {wanted} replicas" if confirmed >= 0 else "not even the primary"
        super().__init__(
            f"ack={level!r} is not reached on this Redis: {who} confirmed a write within "
            f"ack_timeout_ms={timeout_ms} (ack_replicas={wanted}); give the primary replicas "
            "(and appendonly yes for 'persisted'), lower [client] ack_replicas, or use "
            "ack='primary'; nothing was written"
        )
        self.level, self.wanted, self.confirmed = level, wanted, confirmed


class MalformedJobError(WheelqError):
    """A stored job's envelope or payload cannot be decoded."""

    def __init__(self, topic: str, job_id: str, why: str) -> None:
        super().__init__(f"job {job_id!r} on topic {topic!r} cannot be decoded: {why}")
        self.topic, self.job_id = topic, job_id


class LeaseLostError(WheelqError):
    """This scheduler node no longer holds the lease of a shard it acted on."""


class LateReplayError(WheelqError):
    """A replay's write (an outbox relay's, a spool drain's) reached Redis after its deadline
    and was refused, nothing written: its rows stay to be replayed again
    (docs/architecture.md, "The outbox relay")."""

    def __init__(self, topic: str, deadline_ms: int, now_ms: int) -> None:
        super().__init__(
            f"a replay to topic {topic!r} reached Redis {now_ms - deadline_ms} ms after its "
            f"deadline (a step slower than its fence_ms, or one frozen): refused, nothing "
            f"written; its rows stay and are replayed again"
        )
        self.topic, self.deadline_ms, self.now_ms = topic, deadline_ms, now_ms


class ScriptError(WheelqError):
    """A Lua script returned a status code the caller does not expect."""


class ScriptIncludeError(WheelqError):
    """A Lua script or include of the package names an unknown include or a cycle of them,
    or uses a helper of an include it does not name (raised as `wheelq.store.scripts` is
    imported: the package is broken, not the call)."""


class WrongTypeError(ScriptError):
    """A key of the topic holds a value of another type than wheelq keeps there (written by
    something else, or by hand); the script wrote nothing. `key` names it."""

    def __init__(self, script: str, key: str) -> None:
        super().__init__(
            f"{script}.lua: key {key!r} holds a value of the wrong type; nothing was written"
        )
        self.key = key


class HandlerTimeoutError(WheelqError, TimeoutError):
    """A handler ran longer than `handler_timeout_ms`; the run counts as failed."""


class HandlerExitError(WheelqError):
    """A handler raised a `BaseException` that is no `Exception` (the ``__cause__``); it failed."""


class ResultError(WheelqError):
    """A handler returned a value wheelq cannot keep as the job's result; the run failed."""


class ResultTooLargeError(ResultError):
    """A handler's return value encodes to more than `result_max_bytes` of msgpack."""


class ResultTypeError(ResultError, TypeError):
    """A handler returned a value msgpack cannot serialise (or that would not decode back)."""


class JobFailedError(WheelqError):
    """`result()`: the job will not succeed in the group: dead-lettered, its retry cancelled,
    or dropped at its expiry (``expires=``) before it started.

    Attributes:
        state: ``"dead"``, ``"cancelled"`` or ``"expired"``.
        reason: Dead: ``failed``, ``deliveries`` or ``malformed`` (the dead letter's reason).
        error: The dead letter's error (the last attempt's), or None.
        dead_entry_id: The dead letter's entry id (for `replay`), or None.
    """

    def __init__(
        self,
        topic: str,
        job_id: str,
        group: str,
        state: str,
        reason: str | None = None,
        error: str | None = None,
        dead_entry_id: str | None = None,
    ) -> None:
        line = (error or "").strip().partition("\n")[0]  # a recorded error's summary
        why = f" ({reason}: {line})" if reason else ""
        super().__init__(f"job {job_id!r} of topic {topic!r} is {state} in group {group!r}{why}")
        self.topic, self.job_id, self.group, self.state = topic, job_id, group, state
        self.reason, self.error, self.dead_entry_id = reason, error, dead_entry_id


class NoCurrentJobError(WheelqError, LookupError):
    """`current_job()` was called outside a handler or task a worker runs."""


class EagerModeError(WheelqError):
    """`App.eager` cannot run this call as asked: the sync form of an ``async def`` task
    inside a running event loop (use the ``a`` form), or an outbox connection with no hook
    that runs a job only once its transaction commits; the message says what to use."""


class EventsOffError(WheelqError):
    """`events()` of a topic that keeps no job events: it would wait for ever (`topic`)."""

    def __init__(self, topic: str) -> None:
        super().__init__(
            f"topic {topic!r} keeps no job events: turn them on first (`wheelq topics events "
            f"{topic} --on`, POST /v1/topics/{topic}/events/on, or Admin.set_events)"
        )
        self.topic = topic


class ResultTimeoutError(WheelqError, TimeoutError):
    """`result()`: the job had not succeeded nor died when the timeout passed (`state`: its
    state then, a `wheelq.JobState` value)."""

    def __init__(self, topic: str, job_id: str, group: str, timeout_ms: int, state: str) -> None:
        super().__init__(
            f"job {job_id!r} of topic {topic!r} is {state} in group {group!r} after "
            f"timeout={timeout_ms / 1000:g} s; nothing was changed (wait again, or cancel it)"
        )
        self.topic, self.job_id, self.group, self.state = topic, job_id, group, state


class RedisUnavailableError(WheelqError):
    """Redis cannot take calls now (`reason` says why); trying again later may work."""

    def __init__(self, message: str, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason


class SpoolError(WheelqError):
    """A producer spool file cannot be used (not a wheelq spool, or SQLite failed on it)."""


class SpoolLockedError(SpoolError):
    """Another client has the spool file open (SQLite's lock, gone with its process)."""


class OutboxError(WheelqError):
    """The PostgreSQL outbox (`wheelq.outbox`) cannot be used as asked."""


class OutboxNotInstalledError(OutboxError):
    """The outbox's tables are missing from the database; the message says what to run."""


class OutboxUnavailableError(OutboxError):
    """The relay cannot connect to its PostgreSQL (a wrong DSN, a server down)."""


class NotInTransactionError(OutboxError, ValueError):
    """`once()` was given a connection in autocommit mode outside a transaction, where its
    record would not share the fate of the handler's effects (`parameter` names it)."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class UnsupportedConnectionError(OutboxError, TypeError):
    """Not a connection the outbox can write with: psycopg 3 (sync or async), SQLAlchemy 2
    (`Connection`, `Session` and their async forms) or Django's."""


class UnsupportedServerError(WheelqError):
    """The server is older than Redis 7.0 / Valkey 7.2 (no sharded pub/sub)."""


class EmbeddedServerError(WheelqError):
    """The embedded Redis-protocol server could not be started or stopped."""


def int_in(name: str, value: object, low: int, high: int) -> int:
    """`value` if it is an int (not a bool) in [low, high], else InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(name, f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value
