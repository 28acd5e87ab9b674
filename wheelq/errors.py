"""Every error wheelq raises, under one root.

```
WheelqError
├── InvalidArgumentError (also ValueError)  a caller passed a bad value; nothing was changed
│   ├── InvalidTopicError                   topic name outside [A-Za-z0-9_.-]{1,100}
│   ├── InvalidDelayError                   delay / at not a finite time >= 0, or both given
│   ├── InvalidJobIdError                   job_id empty, too long or with forbidden characters
│   ├── PayloadTooLargeError                encoded payload over the configured limit
│   └── InvalidHandlerError                 not a function of one Job (also TypeError)
├── PayloadTypeError (also TypeError)       payload msgpack cannot serialise; nothing was changed
├── DuplicateJobError                       a job with that id is already pending (replace=False)
├── TopicFullError                          the topic holds max_pending jobs; those refused
│                                           were not written
├── TopicConfigError                        create_topic() with a shard count that differs, or
│                                           a registry entry that is not a count in [1, 1024]
├── TopicNotEmptyError                      drop_topic() of a topic with jobs still to run
├── GroupNotFoundError (also LookupError)   delete_group() of a group no shard of the topic has
├── GroupBusyError                          delete_group() of a group with entries in flight
├── GroupLimitError                         create_group() past the topic's cap of groups
├── DurabilityError                         a write applied on the primary was not confirmed
│                                           at its ack level: it may or may not survive a failover
├── AckUnsupportedError                     ack="persisted" where a node has no WAITAOF or has
│                                           appendonly no; nothing was written
├── MalformedJobError                       a stored job cannot be decoded (get() names it)
├── LeaseLostError                          a scheduler node no longer holds a shard's lease
├── ScriptError                             a Lua script answered with a status it should not
├── HandlerTimeoutError                     a handler ran over handler_timeout_ms (its run failed)
├── HandlerExitError                        a handler raised SystemExit etc. (its run failed)
├── RedisUnavailableError                   start(): redis unreachable for all of start_timeout_ms;
│                                           a producer call: unreachable, loading, read-only, out of
│                                           memory, cluster down, or failing fast (breaker open)
├── SpoolError                              a producer spool file cannot be used
│   └── SpoolLockedError                    another client (this process or another) has it open
├── UnsupportedServerError                  start(): the server is older than Redis 7.0
└── EmbeddedServerError                     the embedded server binary failed to start
```

Caller errors subclass the built-in a caller would expect (`ValueError`,
`TypeError`) so generic handlers keep working. Messages name the parameter
and the accepted range.
"""

from __future__ import annotations

from collections.abc import Sequence


class WheelqError(Exception):
    """Root of every error raised by wheelq."""


class InvalidArgumentError(WheelqError, ValueError):
    """A caller passed a value outside the accepted range; nothing was changed.

    Attributes:
        parameter: Name of the offending parameter, as the caller wrote it.
    """

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class InvalidTopicError(InvalidArgumentError):
    """A topic name is empty, too long, or has characters outside [A-Za-z0-9_.-]."""


class InvalidDelayError(InvalidArgumentError):
    """A delay or due time is not a finite, non-negative time (or both were given)."""


class InvalidJobIdError(InvalidArgumentError):
    """A job id is empty, too long, or has characters that are not allowed."""


class PayloadTooLargeError(InvalidArgumentError):
    """A payload's msgpack encoding is larger than the configured limit."""


class InvalidHandlerError(InvalidArgumentError, TypeError):
    """A handler is not a function taking one `wheelq.Job` (``def`` or ``async def``) that
    returns None: not callable, a generator function, or taking other arguments (raised when
    the worker is made). A sync handler that returns a generator fails its run with it."""


class PayloadTypeError(WheelqError, TypeError):
    """A payload holds a value msgpack cannot serialise; nothing was changed."""


class DuplicateJobError(WheelqError):
    """A job with this id is already pending on the topic and `replace` was False.

    Attributes:
        topic: The topic.
        job_ids: The ids that were already pending (not enqueued again).
        enqueued: For a batch, the ids that were enqueued all the same.
    """

    def __init__(self, topic: str, job_ids: Sequence[str], enqueued: Sequence[str] = ()) -> None:
        self.topic = topic
        self.job_ids = list(job_ids)
        self.enqueued = list(enqueued)
        super().__init__(self.describe())

    def describe(self, id_name: str = "job_id", replacing: str = "pass replace=True") -> str:
        """The message, with the id and the way to replace spelt as the caller's interface
        spells them (the default: the Python library's; over HTTP ``id`` and
        ``send "replace": true``)."""
        shown = ", ".join(repr(j) for j in self.job_ids[:5])
        more = f" and {len(self.job_ids) - 5} more" if len(self.job_ids) > 5 else ""
        return (
            f"{id_name} {shown}{more} already pending on topic {self.topic!r}; "
            f"{replacing} to replace it"
        )


class TopicFullError(WheelqError):
    """The topic is at its ``max_pending`` (`Client.set_limits`): the refused jobs were not
    written. Retry later, or shed load.

    Attributes:
        topic: The topic.
        job_ids: The ids refused (nothing of them written).
        enqueued: For a batch, the ids written all the same (to shards with room).
        ids: Every id of the call, in the order of its jobs (generated ones included).
    """

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
    """A topic exists with a different shard count than the one asked for, or the topic
    registry holds something that is not a shard count in [1, 1024] for it."""


class TopicNotEmptyError(WheelqError):
    """`drop_topic` without `force` found jobs still to run; nothing was deleted.

    `str()` says how to force it in Python (``force=True``); `explain` says it in another
    interface's words (the CLI's ``--force``).

    Attributes:
        topic: The topic.
        pending: Jobs waiting for their due time.
        unacked: Ready-stream entries some consumer group has not acked (an entry
            counts once per group that has yet to ack it).
    """

    def __init__(self, topic: str, pending: int, unacked: int) -> None:
        self.topic = topic
        self.pending = pending
        self.unacked = unacked
        super().__init__(self.explain("pass force=True"))

    def explain(self, forcing: str) -> str:
        """The message, with `forcing` as the interface says how to force the drop."""
        return (
            f"topic {self.topic!r} has {self.pending} pending jobs and {self.unacked} "
            f"ready-stream entries not yet acked; {forcing} to drop it anyway"
        )


class GroupNotFoundError(WheelqError, LookupError):
    """`delete_group` named a consumer group that no shard of the topic has on that stream
    (or a topic that does not exist); nothing was deleted.

    Attributes:
        topic: The topic.
        group: The group asked for.
        stream: The stream it was looked for on (``"ready"`` or ``"callbacks"``).
        known: The groups that stream has, by name; None when the topic does not exist.
        elsewhere: The topic's other streams that have a group of that name.
    """

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
    """`create_group` would give the topic more consumer groups than its cap; nothing was
    created. Delete a group no longer read (`delete_group`), or raise the cap.

    Attributes:
        topic: The topic.
        group: The group asked for.
        max_groups: The cap.
    """

    def __init__(self, topic: str, group: str, max_groups: int) -> None:
        super().__init__(
            f"topic {topic!r} has {max_groups} consumer groups, its cap (max_groups_per_topic): "
            f"group {group!r} was not created; delete a group no longer read, or raise the cap"
        )
        self.topic = topic
        self.group = group
        self.max_groups = max_groups


class GroupBusyError(WheelqError):
    """`delete_group` without `force` found entries in flight in the group: delivered to one
    of its consumers and not acked. Where they were, the group was kept.

    `str()` says how to force it in Python (``force=True``); `explain` says it in another
    interface's words (the CLI's ``--force``, the HTTP API's ``?force=true``).

    Attributes:
        topic: The topic.
        group: The group.
        stream: Its stream (``"ready"`` or ``"callbacks"``).
        in_flight: Entries in flight, summed over the shards that kept the group.
        deleted: Shards where the group was deleted all the same: 0, unless an entry was
            delivered between the check on every shard and the delete on each.
    """

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
    """A write was applied on its primary, but the `ack` level asked for was not reached
    within ``ack_timeout_ms``: fewer than ``ack_replicas`` replicas confirmed it (WAIT), or
    for ``ack="persisted"`` the primary or the replicas did not confirm it on disk
    (WAITAOF). The write may or may not survive a failover (or, for ``persisted``, a
    crash): if the primary fails now, a promoted replica may lack it.

    A retry is idempotent, because the error names every job id in doubt (generated ids
    too): enqueue them again with the same ``job_id`` and ``replace=True`` (with ``at`` the
    job is the same again; with ``delay`` its due time counts from the retry), or check
    with ``get()`` first, since a job due now may have fired already; call ``cancel`` again
    (False once it is gone) or ``reschedule`` again (with ``at``, the same due time).

    Attributes:
        level: The ack level that was not reached: ``"replicated"`` or ``"persisted"``.
        topic: The topic.
        job_ids: The jobs whose write was not confirmed at `level`.
        wanted: The replicas asked for (``ack_replicas``).
        confirmed: The fewest replicas that confirmed any of `job_ids` (-1: not even the
            primary: its AOF was not fsynced in time, or WAIT itself failed).
        result: What the call returned on the primary (the ids of ``enqueue_many``, the id
            of ``enqueue``, the bool of ``cancel`` and ``reschedule``); None when the call
            raised another error as well (then its ``__cause__``).
    """

    def __init__(
        self,
        level: str,
        topic: str,
        job_ids: Sequence[str],
        wanted: int,
        confirmed: int,
        result: object = None,
    ) -> None:
        shown = ", ".join(repr(j) for j in list(job_ids)[:5])
        more = f" and {len(job_ids) - 5} more" if len(job_ids) > 5 else ""
        what = "on disk (WAITAOF)" if level == "persisted" else "(WAIT)"
        who = f"{confirmed} of {wanted} replicas" if confirmed >= 0 else "not even the primary"
        super().__init__(
            f"ack={level!r} not reached on topic {topic!r} for job {shown}{more}: written on "
            f"the primary, but {who} confirmed it {what} within the timeout; "
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
    """``ack="persisted"`` needs WAITAOF (Redis or Valkey 7.2 and later) and ``appendonly
    yes`` on every primary it writes to; a node without either is found (once per node)
    before anything is written, so nothing was.

    Attributes:
        node: The node (``host:port``, or ``server`` for a single server).
        reason: What it lacks.
    """

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(
            f"ack='persisted' needs WAITAOF (Redis/Valkey >= 7.2) and appendonly yes; "
            f"{node} {reason}; nothing was written"
        )
        self.node = node
        self.reason = reason


class MalformedJobError(WheelqError):
    """A stored job's envelope or payload cannot be decoded (written by something other
    than wheelq, or corrupted). The scheduler dead-letters such a job as ``malformed``
    when it comes due.

    Attributes:
        topic: The topic.
        job_id: The job.
    """

    def __init__(self, topic: str, job_id: str, why: str) -> None:
        super().__init__(f"job {job_id!r} on topic {topic!r} cannot be decoded: {why}")
        self.topic = topic
        self.job_id = job_id


class LeaseLostError(WheelqError):
    """This scheduler node no longer holds the lease of a shard it acted on."""


class ScriptError(WheelqError):
    """A Lua script returned a status code the caller does not expect."""


class HandlerTimeoutError(WheelqError, TimeoutError):
    """A handler ran longer than `handler_timeout_ms`; the run counts as failed."""


class HandlerExitError(WheelqError):
    """A handler raised `SystemExit`, `KeyboardInterrupt` (or another `BaseException` that is
    not an `Exception`): the run counts as failed, like any other exception, and the worker
    goes on. The original exception is its ``__cause__``."""


class RedisUnavailableError(WheelqError):
    """Redis cannot take calls now; trying again later may work.

    A scheduler node or worker raises it when it could not reach Redis within
    ``start_timeout_ms`` when starting: only transient errors (refused, reset, timed out,
    still loading) for that long. The last of them is chained as ``__cause__``; an error
    that waiting cannot fix (wrong password, bad certificate) is raised at once instead, as
    it is.

    A producer client raises it when a call failed because Redis is unreachable or cannot
    take writes now (see `reason`), with the redis-py error as ``__cause__``, and, for
    ``breaker_open_ms`` after a connection-level failure, at once for every call without
    sending it (reason ``"breaker_open"``). With a spool, enqueues go to the spool instead.
    A call that failed this way after it was sent may have been applied.

    Attributes:
        reason: ``"unreachable"`` (refused, reset, timed out), ``"loading"``,
            ``"readonly"`` (a replica), ``"oom"`` (over ``maxmemory``), ``"clusterdown"``,
            ``"masterdown"``, ``"tryagain"``, or ``"breaker_open"`` (not sent).
    """

    def __init__(self, message: str, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason


class SpoolError(WheelqError):
    """A producer spool file cannot be used (not a wheelq spool, or SQLite failed on it)."""


class SpoolLockedError(SpoolError):
    """Another client has the spool file open: one spool serves one client at a time. The
    lock is SQLite's and goes with the process that held it, even after kill -9."""


class UnsupportedServerError(WheelqError):
    """A scheduler node or worker found, when starting, a server older than Redis 7.0 (or
    Valkey 7.2): wheelq's scripts announce jobs with sharded pub/sub (SPUBLISH), which
    came in 7.0."""


class EmbeddedServerError(WheelqError):
    """The embedded Redis-protocol server could not be started or stopped."""


def int_in(name: str, value: object, low: int, high: int) -> int:
    """Return `value` if it is an int (not a bool) in [low, high].

    Raises:
        InvalidArgumentError: Naming `name` and the range.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(name, f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value
