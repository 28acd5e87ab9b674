"""What a Redis Cluster's refusals mean for a call, and which may go again.

A cluster that moves a slot answers MOVED, ASK or TRYAGAIN, and one that
fails over answers CLUSTERDOWN or drops the connection. redis-py's cluster
client follows MOVED and ASK itself for a while; the executors
(`wheelq.store.sync_executor`, `wheelq.store.async_executor`) decide the rest
here: a refused call did not run, so it may go again; a call whose
connection broke may have run, so it goes up as an error, after the slot map
is reloaded so the caller's next try reaches the node that owns the slot now
(redis-py's cluster pipeline reloads it only while it has retries left, and
the clients wheelq makes have none: see `wheelq.store.connect`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.commands.cluster import READ_COMMANDS
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from wheelq.store.calls import Call

TOPOLOGY_ERRORS = (RedisConnectionError, RedisTimeoutError, ClusterDownError, SlotNotCoveredError)
"""Failures after which a cluster client's slot map may be out of date."""

SETTLE_S = 2.0
"""How long calls a cluster refused while it moves a slot are sent again: past redis-py's
own redirects (16 tries in about half a second), a slot of many keys may still be on its
way. Such a call did not run, so sending it again never runs it twice."""
SETTLE_PAUSE_S = 0.05


def unsettled(reply: Any) -> bool:
    """A refusal by a cluster moving a slot: TRYAGAIN (a multi-key call met a slot half
    moved), or redirects redis-py gave up following (its ``ClusterError`` "TTL exhausted")."""
    return isinstance(reply, TryAgainError | AskError) or type(reply) is ClusterError


def may_resend(exc: BaseException, calls: Sequence[Call[Any]]) -> bool:
    """Whether `calls`, whose sending raised `exc` (one of `TOPOLOGY_ERRORS`), may go again
    once the slot map is reloaded: every one of them only reads, or it is one call whose
    node refused the connection, so it did not run (a pipeline over several nodes may have
    run on the others)."""
    if all(c.script is None and str(c.command[0]).upper() in READ_COMMANDS for c in calls):
        return True
    if len(calls) != 1 or not isinstance(exc, RedisConnectionError):
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def apart(calls: Sequence[Call[Any]], cluster: bool) -> tuple[list[int], list[int]]:
    """On a cluster, the indices of the keyless calls (sent one by one) and of the others
    (one pipeline); elsewhere nothing apart."""
    if not cluster or len(calls) == 1 or not any(c.keyless for c in calls):
        return [], []
    alone = [i for i, c in enumerate(calls) if c.keyless]
    return alone, [i for i, c in enumerate(calls) if not c.keyless]
