"""A process's heartbeat record: where it runs, in which roles, doing what
(docs/architecture.md, "Processes").

Every scheduler node, worker, HTTP service and outbox relay beats one record a second into
Redis for its process (the roles one process runs share it); the record expires by itself
when the beats stop. This module is the record and its stored form (msgpack); the beat
and the reads are `wheelq.store.processes`, the beating `wheelq.runtime.heartbeat`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import msgpack

ROLES = ("scheduler", "worker", "service", "relay")
"""What a role part of a record may be."""
MAX_LEADS = 256
"""Led shards a record lists per role (``leads_total`` counts them all)."""
MAX_LISTED_TOPICS = 1000
"""Topics and groups a record lists per role."""
MAX_HELD = 1000
"""Held entries a worker's record lists (running ones first; ``in_flight`` counts them all)."""
FORMAT = 1
"""The stored record's format (its first element)."""


@dataclass(frozen=True, slots=True)
class LeadInfo:
    """One shard a scheduler node leads, and how old its lease is."""

    topic: str
    shard: int
    held_ms: int
    """How long the node has led the shard (since it took the lease)."""
    lease_age_ms: int
    """Time since the lease was last renewed (or taken): it expires at ``lease_ttl_ms``."""


@dataclass(frozen=True, slots=True)
class HeldEntry:
    """An entry a worker holds: running in one of its slots, or read ahead of them."""

    topic: str
    shard: int
    entry_id: str
    run_ms: int | None
    """How long its handler had run when the record was written; None: not started (read
    ahead of the slots, or waiting for a flow limit's turn or a paused group)."""


@dataclass(frozen=True, slots=True)
class RoleInfo:
    """One role a process runs: a scheduler node, a worker, a service or a relay."""

    role: str
    """``scheduler``, ``worker``, ``service`` (``wheelq serve``) or ``relay`` (the outbox's)."""
    name: str
    """The role's own name: a node's id, a worker's consumer name in its group."""
    topics: tuple[str, ...] = ()
    """The topics it serves (a scheduler node: those it takes part in)."""
    groups: tuple[str, ...] = ()
    """A worker's consumer group."""
    concurrency: int | None = None
    """A worker's handler slots (None: not a worker)."""
    in_flight: int = 0
    """A worker's entries delivered to it and not yet settled."""
    handled: int = 0
    """Jobs done: a worker's handler runs that succeeded, a node's jobs fired, a service's
    requests answered, a relay's rows relayed."""
    failed: int = 0
    """A worker's failed handler runs, a service's 5xx answers, a relay's rows refused."""
    leads: tuple[LeadInfo, ...] = ()
    """A scheduler node's led shards (at most `MAX_LEADS`)."""
    leads_total: int = 0
    """How many shards it leads (``leads`` may list fewer)."""
    held: tuple[HeldEntry, ...] = ()
    """A worker's entries held, running ones first (at most `MAX_HELD`): what the job lists
    tell running jobs from those read ahead by."""


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One live process, as `Admin.processes()` lists it."""

    id: str
    """The process's id in the list: ``host:pid:random``."""
    host: str
    pid: int
    version: str
    """The wheelq version it runs."""
    started_ms: int
    """When it started beating (Redis clock ms)."""
    beat_interval_ms: int
    """How often it beats."""
    ttl_ms: int
    """How long after its last beat its record goes, when no beat follows (it died)."""
    roles: tuple[RoleInfo, ...] = ()
    last_beat_ms: int = 0
    """When its last beat landed (Redis clock ms; set when read)."""
    beat_age_ms: int = 0
    """How long ago its last beat landed, when read."""

    @property
    def up_ms(self) -> int:
        """How long it has been running, when read."""
        return max(0, self.last_beat_ms + self.beat_age_ms - self.started_ms)

    @property
    def role(self) -> str:
        """Its roles, joined by ``+`` (``scheduler+worker`` for ``wheelq run``)."""
        return "+".join(dict.fromkeys(r.role for r in self.roles))

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({t for r in self.roles for t in r.topics}))

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(sorted({g for r in self.roles for g in r.groups}))

    @property
    def concurrency(self) -> int | None:
        slots = [r.concurrency for r in self.roles if r.concurrency is not None]
        return sum(slots) if slots else None

    @property
    def in_flight(self) -> int:
        return sum(r.in_flight for r in self.roles)

    @property
    def handled(self) -> int:
        return sum(r.handled for r in self.roles)

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.roles)

    @property
    def leads(self) -> tuple[LeadInfo, ...]:
        return tuple(lead for r in self.roles for lead in r.leads)

    @property
    def leads_total(self) -> int:
        return sum(r.leads_total for r in self.roles)


def role_info(
    role: str,
    name: str,
    *,
    topics: Iterable[str] = (),
    groups: Iterable[str] = (),
    concurrency: int | None = None,
    in_flight: int = 0,
    handled: int = 0,
    failed: int = 0,
    leads: Sequence[LeadInfo] = (),
    held: Iterable[HeldEntry] = (),
) -> RoleInfo:
    """A `RoleInfo` with its lists bounded (`MAX_LISTED_TOPICS`, `MAX_LEADS`, `MAX_HELD`:
    running entries first)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    return RoleInfo(
        role,
        name,
        tuple(sorted(topics))[:MAX_LISTED_TOPICS],
        tuple(sorted(groups))[:MAX_LISTED_TOPICS],
        concurrency,
        in_flight,
        handled,
        failed,
        tuple(leads[:MAX_LEADS]),
        len(leads),
        tuple(sorted(held, key=lambda h: h.run_ms is None)[:MAX_HELD]),
    )


def pack_process(info: ProcessInfo) -> bytes:
    """The stored record: a msgpack array, `FORMAT` first (what a reader sets is not stored)."""
    roles = [
        [
            r.role,
            r.name,
            list(r.topics),
            list(r.groups),
            r.concurrency,
            r.in_flight,
            r.handled,
            r.failed,
            [[x.topic, x.shard, x.held_ms, x.lease_age_ms] for x in r.leads],
            r.leads_total,
            [[h.topic, h.shard, h.entry_id, h.run_ms] for h in r.held],
        ]
        for r in info.roles
    ]
    fields = [
        FORMAT,
        info.id,
        info.host,
        info.pid,
        info.version,
        info.started_ms,
        info.beat_interval_ms,
        info.ttl_ms,
        roles,
    ]
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def unpack_process(raw: bytes, expires_ms: int, now_ms: int) -> ProcessInfo:
    """The record `pack_process` wrote, read at `now_ms` with its expiry `expires_ms` (both
    Redis clock ms); fields a later format appends are ignored.

    Raises:
        ValueError: `raw` is not such a record.
    """
    try:
        fields = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"a process record that is not msgpack: {exc}") from None
    if not isinstance(fields, list) or len(fields) < 9 or fields[0] != FORMAT:
        raise ValueError(f"not a process record of format {FORMAT}: {fields!r:.100}")
    _, pid_text, host, pid, version, started, interval, ttl, roles = fields[:9]
    info = ProcessInfo(
        _str(pid_text),
        _str(host),
        _int(pid),
        _str(version),
        _int(started),
        _int(interval),
        _int(ttl),
        tuple(_role(r) for r in _list(roles)),
    )
    beat_ms = expires_ms - info.ttl_ms
    return replace(info, last_beat_ms=beat_ms, beat_age_ms=max(0, now_ms - beat_ms))


def _role(value: Any) -> RoleInfo:
    fields = _list(value)
    if len(fields) < 10:
        raise ValueError(f"a role of a process record has {len(fields)} fields, expected 10")
    role, name, topics, groups, concurrency, in_flight, handled, failed, leads, total = fields[:10]
    held = _list(fields[10]) if len(fields) > 10 else []  # absent: an older wheelq's record
    return RoleInfo(
        _str(role),
        _str(name),
        tuple(_str(t) for t in _list(topics)),
        tuple(_str(g) for g in _list(groups)),
        None if concurrency is None else _int(concurrency),
        _int(in_flight),
        _int(handled),
        _int(failed),
        tuple(_lead(x) for x in _list(leads)),
        _int(total),
        tuple(_held(h) for h in held),
    )


def _lead(value: Any) -> LeadInfo:
    fields = _list(value)
    if len(fields) < 4:
        raise ValueError(f"a lead of a process record has {len(fields)} fields, expected 4")
    return LeadInfo(_str(fields[0]), _int(fields[1]), _int(fields[2]), _int(fields[3]))


def _held(value: Any) -> HeldEntry:
    fields = _list(value)
    if len(fields) < 4:
        raise ValueError(f"a held entry of a process record has {len(fields)} fields, expected 4")
    run_ms = None if fields[3] is None else _int(fields[3])
    return HeldEntry(_str(fields[0]), _int(fields[1]), _str(fields[2]), run_ms)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list in a process record, got {value!r:.60}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a str in a process record, got {value!r:.60}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an int in a process record, got {value!r:.60}")
    return value


def live_order(found: Iterable[ProcessInfo]) -> list[ProcessInfo]:
    """Processes in the order the lists show them: by role, host, then pid and id."""
    order = {role: n for n, role in enumerate(ROLES)}

    def key(p: ProcessInfo) -> tuple[int, str, int, str]:
        first = min((order.get(r.role, len(ROLES)) for r in p.roles), default=len(ROLES))
        return first, p.host, p.pid, p.id

    return sorted(found, key=key)


Held = dict[tuple[str, str, str, int, str], tuple[int, int | None]]
"""(consumer, group, topic, shard, entry id) -> (the worker's last beat, Redis ms; how long
its handler had run then, None: not started)."""


class Start(NamedTuple):
    """When a held entry's handler started, as its worker's last beat says."""

    started_ms: int | None
    """Redis ms; None: not started."""
    read_ahead: bool
    """Held without running yet (read ahead of the slots, or waiting for a turn)."""


def start_of(held: Held, key: tuple[str, str, str, int, str]) -> Start | None:
    """The start of the entry `key` names (a `Held` key), None when no live worker's beat
    names it."""
    beat = held.get(key)
    if beat is None:
        return None
    beat_ms, run_ms = beat
    return Start(None if run_ms is None else beat_ms - run_ms, run_ms is None)


def held_by_workers(processes: Sequence[ProcessInfo]) -> Held:
    """The entries each live worker held at its last beat (`RoleInfo.held`)."""
    out: Held = {}
    for p in processes:
        for role in p.roles:
            for group in role.groups if role.role == "worker" else ():
                for h in role.held:
                    key = (role.name, group, h.topic, h.shard, h.entry_id)
                    out[key] = (p.last_beat_ms, h.run_ms)
    return out
