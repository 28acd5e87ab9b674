"""Leases: which node leads a shard (`lease_*.lua`, fenced by token), and the node sets
the lease keeper shares shards by (``wheelq:nodes:T``, the membership counter).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from wheelq.core.keys import MEMBERSHIP_KEY, ShardKeys, nodes_key
from wheelq.errors import LeaseLostError
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text


@dataclass(frozen=True, slots=True)
class LeaseAttempt:
    """The outcome of `lease_acquire.lua`."""

    held: bool
    new: bool
    """True when it was just acquired (not renewed)."""
    server_now_ms: int
    holder: str | None


def _lease_attempt(reply: Any) -> LeaseAttempt:
    r = check("lease_acquire", reply)
    return LeaseAttempt(bool(r[1]), bool(r[2]), int(r[3]), r[4].decode())


def lease_acquire(keys: ShardKeys, token: str, ttl_ms: int) -> Call[LeaseAttempt]:
    return script_call("lease_acquire", keys, [token, ttl_ms], _lease_attempt)


def _still_held(name: str) -> Callable[[Any], bool]:
    """A parser for LEASE_LOST as False: losing the lease is an answer here, not an error."""

    def parse(reply: Any) -> bool:
        try:
            check(name, reply)
        except LeaseLostError:
            return False
        return True

    return parse


_RENEWED = _still_held("lease_renew")
_RELEASED = _still_held("lease_release")


def lease_renew(keys: ShardKeys, token: str, ttl_ms: int) -> Call[bool]:
    """Parses to True when renewed, False when the lease is no longer the caller's."""
    return script_call("lease_renew", keys, [token, ttl_ms], _RENEWED)


def lease_renew_ifeq(keys: ShardKeys, token: str, ttl_ms: int) -> Call[bool]:
    """`lease_renew` as ``SET lease token IFEQ token PX ttl`` (Redis >= 8.4, Valkey >= 8.1)."""
    return Call(
        command=("SET", keys.lease, token, "IFEQ", token, "PX", ttl_ms),
        parse=lambda reply: reply is not None,
    )


def lacks_set_ifeq(reply: object) -> bool:
    """Whether `reply` is an older server's refusal of ``SET ... IFEQ``."""
    return isinstance(reply, ResponseError) and "syntax" in str(reply).lower()


def lease_release(keys: ShardKeys, token: str) -> Call[bool]:
    """Parses to True when released, False when the lease was not the caller's."""
    return script_call("lease_release", keys, [token], _RELEASED)


def lease_followed(keys: ShardKeys, token: str, confirmed: bool) -> Call[bool]:
    """Mark the shard's wake subscription as confirmed by its leader `token` (or unmark it);
    parses to False when confirming a lease that is not the caller's."""
    return script_call(
        "lease_followed", keys, [token, int(confirmed)], _still_held("lease_followed")
    )


WATCHED_PER_CALL = 1000
"""Channels one `lease_watch` call counts (Lua's unpack() takes a few thousand at most)."""


def lease_watch(route: ShardKeys, channels: list[str]) -> Call[list[int]]:
    """Subscribers of each channel on the server `route`'s slot lives on (on a cluster, the
    channels' own shards must live there too for the counts to mean anything)."""
    return script_call(
        "lease_watch",
        route,
        channels,
        lambda reply: [int(n) for n in check("lease_watch", reply)[1:]],
    )


class Reaped(IntEnum):
    """What `lease_reap` found."""

    ALIVE = 0
    """Held by a leader whose liveness connection is there (or was never registered)."""
    FREED = 1
    """The leader's liveness connection stayed gone past the grace: its lease was freed."""
    FREE = 2
    GONE = 3
    """The leader's liveness connection is gone, not for the whole grace yet: nothing freed."""
    OVER = 4
    """Gone past the grace, not freed: the caller had not seen the leader's process gone
    (`lease_reap`'s ``gone`` names another holder, or none)."""


@dataclass(frozen=True, slots=True)
class Reap:
    """The outcome of `lease_reap`."""

    state: Reaped
    holder: str
    """The lease's token ("" when free)."""
    wait_ms: int = 0
    """`Reaped.GONE`: ms until the grace ends (ask again then)."""


def lease_reap(keys: ShardKeys, grace_ms: int, gone: str = "") -> Call[Reap]:
    """Free the lease of a leader whose liveness connection has stayed gone for `grace_ms`
    (see lease_reap.lua), if that leader is `gone`: the caller has seen none of its process's
    connections left (`connected`). The first call that finds the connection gone starts the
    grace; one past it for another holder answers `Reaped.OVER`, freeing nothing."""

    def parse(reply: Any) -> Reap:
        r = check("lease_reap", reply)
        return Reap(Reaped(int(r[1])), text(r[2]), int(r[3]))

    return script_call("lease_reap", keys, [keys.wake_channel, grace_ms, gone], parse)


NAME_PREFIX = "wheelq-node:"


def node_client_name(token: str) -> str:
    """The name a scheduler node gives its connections (CLIENT SETNAME), from its token: its
    id when a connection name can hold it (printable ASCII without spaces), else a digest of
    it. Another node reads it in CLIENT LIST to tell a process that is gone (none of its
    connections left) from a live one whose liveness connection alone was dropped."""
    if 0 < len(token) <= 200 and all("!" <= ch <= "~" for ch in token):
        return NAME_PREFIX + token
    return NAME_PREFIX + hashlib.sha1(token.encode(), usedforsecurity=False).hexdigest()[:20]


def connected(route: ShardKeys, names: Collection[str]) -> Call[set[str]]:
    """Which of the connection names `names` the server of `route` has a client of (CLIENT
    LIST, sent to that server: on a cluster, the node serving the shard)."""

    def parse(reply: Any) -> set[str]:
        return {name for name in _client_names(reply) if name in names}

    return Call(command=("CLIENT", "LIST"), parse=parse, keyless=True, route=route.lease)


def _client_names(reply: Any) -> list[str]:
    """The ``name`` of each client in a CLIENT LIST reply (text, a line a client)."""
    found = []
    for line in text(reply, errors="replace").splitlines():
        for field in line.split(" "):
            if field.startswith("name="):
                found.append(field[5:])
                break
    return found


def lease_holder(keys: ShardKeys) -> Call[str | None]:
    """The token of the node holding the shard's lease, None when it is free."""
    return Call(command=("GET", keys.lease), parse=lambda r: None if r is None else r.decode())


def forget_nodes(topic: str) -> Call[int]:
    """Delete the topic's node set (a topic being dropped)."""
    return Call(command=("UNLINK", nodes_key(topic)), parse=int)


def heartbeat(topic: str, node_id: str, expires_ms: int) -> Call[int]:
    return Call(command=("ZADD", nodes_key(topic), expires_ms, node_id), parse=int)


def live_nodes(topic: str, now_ms: int) -> Call[list[tuple[str, int]]]:
    """The nodes whose heartbeat expiry is after `now_ms`, with that expiry (ms)."""

    def parse(reply: Any) -> list[tuple[str, int]]:
        if reply and not isinstance(reply[0], list | tuple):  # RESP2: flat
            reply = list(zip(reply[::2], reply[1::2], strict=True))
        return [(member.decode(), int(float(score))) for member, score in reply]

    return Call(
        command=("ZRANGE", nodes_key(topic), f"({now_ms}", "+inf", "BYSCORE", "WITHSCORES"),
        parse=parse,
    )


def membership_version() -> Call[int]:
    """The membership counter (`wheelq.core.keys.MEMBERSHIP_KEY`); 0 before any change."""
    return Call(command=("GET", MEMBERSHIP_KEY), parse=lambda r: int(r or 0))


def refused_by_acl(reply: object) -> bool:
    """Whether `reply` is a NOPERM refusal (an ACL user without the key)."""
    return isinstance(reply, NoPermissionError)


def membership_changed() -> Call[int]:
    """Raise the membership counter: this node joined or left a node set."""
    return Call(command=("INCR", MEMBERSHIP_KEY), parse=int)


def forget_dead_nodes(topic: str, before_ms: int) -> Call[int]:
    return Call(command=("ZREMRANGEBYSCORE", nodes_key(topic), "-inf", before_ms), parse=int)


def leave(topic: str, node_id: str) -> Call[int]:
    return Call(command=("ZREM", nodes_key(topic), node_id), parse=int)
