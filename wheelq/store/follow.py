"""The calls of jobs that follow jobs (`wheelq.core.follow`): an edge on the shard of the job
waited on (``follow.lua``), a waiting job's write and the hearing of notices on its own shard
(``resolve.lua``), and the notices' read and delete on the shard they wait on."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any, NamedTuple, TypeVar

import msgpack

from wheelq.core.follow import Notice, parse_notices
from wheelq.core.keys import ShardKeys, children_key
from wheelq.errors import ScriptError
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check

E = TypeVar("E", bound=IntEnum)


class Edge(IntEnum):
    """What ``follow.lua`` did."""

    NOTED = 0  # the edge is there: the job waited on has not ended in its group
    ENDED = 1  # it had ended there: the notice is written
    UNKNOWN = 2  # nothing is known of it: nothing written


class Heard(NamedTuple):
    """What hearing a batch of notices did."""

    changed: int
    """Notices that changed a waiting job (a reference it still waited on)."""
    released: int
    """Jobs made due."""
    ended: int
    """Jobs cancelled or dead-lettered."""
    cancel: list[str]
    """References to cancel: a failed join's children still pending."""


class Waiting(IntEnum):
    """What ``resolve.lua`` did with a waiting job's write."""

    WAITING = 0
    FIRED = 1  # every job it waits on had succeeded, and it was due now
    DUPLICATE = 2  # a job of its id is pending: nothing written
    RELEASED = 6  # every job it waits on had succeeded: due later
    CANCELLED = 7  # a job it waits on had failed, and its policy cancels
    DEAD = 8  # a job it waits on had failed, and its policy dead-letters it


def follow(
    keys: ShardKeys, job_id: str, group: str, waiting: ShardKeys, waiting_id: str, token: str
) -> Call[Edge]:
    """Note on the shard of `keys` that `waiting_id` (of shard `waiting`) waits on `job_id`'s
    outcome in `group`."""
    args: list[str | bytes | int] = [
        keys.topic,
        job_id,
        group,
        waiting.topic,
        waiting.shard,
        waiting_id,
        token,
    ]
    return script_call("follow", keys, args, lambda r: _code("follow", r, Edge))


def write_waiting(
    keys: ShardKeys,
    job_id: str,
    envelope: bytes,
    key: str,
    record: bytes,
    deadline_ms: int,
    refs: Sequence[str] = (),
) -> Call[tuple[Waiting, list[str]]]:
    """Write a waiting job and hear the outcomes that arrived before it; parses to what it
    did and the references to cancel (`refs`: a join's, when its record holds their count)."""
    args: list[str | bytes | int] = [
        keys.topic,
        keys.wake_channel,
        "w",
        job_id,
        envelope,
        key,
        record,
        deadline_ms,
        *refs,
    ]

    def parse(reply: Any) -> tuple[Waiting, list[str]]:
        return _code("resolve", reply, Waiting), _texts(reply[2])

    return script_call("resolve", keys, args, parse)


def hear(keys: ShardKeys, notices: Sequence[Notice]) -> Call[Heard]:
    """Hear `notices` on their waiting jobs' shard (`keys`)."""
    packed = msgpack.packb([(n.job_id, n.token, n.ref, n.outcome, n.error) for n in notices])
    args: list[str | bytes | int] = [keys.topic, keys.wake_channel, "n", packed]

    def parse(reply: Any) -> Heard:
        r = check("resolve", reply)
        return Heard(int(r[1]), int(r[2]), int(r[3]), _texts(r[4]))

    return script_call("resolve", keys, args, parse)


def read_notices(keys: ShardKeys, count: int) -> Call[list[Notice]]:
    """The shard's oldest `count` notices."""
    return Call(
        command=("XRANGE", keys.notices, "-", "+", "COUNT", count),
        parse=lambda reply: parse_notices(reply, keys),
    )


def drop_notices(keys: ShardKeys, entries: Sequence[str]) -> Call[int]:
    """Delete notices heard."""
    return Call(command=("XDEL", keys.notices, *entries), parse=int)


def drop_notices_upto(keys: ShardKeys, last: str) -> Call[int]:
    """Delete every notice up to `last` (all of them were heard): one argument, not one an
    entry (an entry added after it, with a greater id, stays)."""
    ms, _, seq = last.partition("-")
    return Call(command=("XTRIM", keys.notices, "MINID", f"{ms}-{int(seq) + 1}"), parse=int)


def _code(name: str, reply: Any, kind: type[E]) -> E:
    try:
        return kind(int(check(name, reply)[1]))
    except (ValueError, TypeError, IndexError) as exc:
        raise ScriptError(f"{name}.lua returned an unknown outcome ({reply!r:.200})") from exc


def _texts(reply: Any) -> list[str]:
    return [r.decode() if isinstance(r, bytes) else str(r) for r in reply or ()]


def children_refs(keys: ShardKeys, job_id: str) -> Call[list[str]]:
    """A flow parent's children as wire references, in the order given ([] for none)."""
    return Call(command=("LRANGE", children_key(keys, job_id), 0, -1), parse=_texts)


def relation_reads(keys: ShardKeys, job_id: str) -> list[Call[Any]]:
    """What `core.follow.relations` reads, one command each: the job's edges, its waiting
    record and its children list's length."""
    return [
        Call(command=("HGET", keys.followers, job_id), parse=_raw),
        Call(command=("HGET", keys.waiting, job_id), parse=_raw),
        Call(command=("LLEN", children_key(keys, job_id)), parse=int),
    ]


def _raw(reply: Any) -> bytes | None:
    return reply if isinstance(reply, bytes) else None


def followers_of(keys: ShardKeys, job_id: str) -> Call[list[tuple[ShardKeys, str]]]:
    """The jobs waiting on `job_id`'s outcome (its edges): each one's shard and id."""

    def parse(reply: Any) -> list[tuple[ShardKeys, str]]:
        if not reply:
            return []
        try:
            edges = msgpack.unpackb(reply, raw=False)
            return [(ShardKeys(e[1], int(e[2])), str(e[3])) for e in edges]
        except (TypeError, ValueError, IndexError, msgpack.UnpackException):
            return []  # an edge nobody wrote this way: nothing to follow down

    return Call(command=("HGET", keys.followers, job_id), parse=parse)
