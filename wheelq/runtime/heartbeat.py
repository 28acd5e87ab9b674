"""The process heartbeat: one record a beat for every role one process runs
(docs/architecture.md, "Processes").

A role `join`s when it has started and leaves when it stops. The roles of one process that
run on one event loop and talk to one server share one `Heartbeat`, so a process costs
Redis one call a beat however many roles it runs (``wheelq run``: a node and a worker;
``wheelq serve``: the service and a delivery worker per topic). Its record expires
``ttl_ms`` after its last beat, so a process killed leaves the list by itself; one that
stops leaves it at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from wheelq.core.process import ProcessInfo, RoleInfo, pack_process
from wheelq.runtime.clock import RedisClock
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.service import Service
from wheelq.store import connect, processes
from wheelq.store.executor import AsyncExecutor

log = logging.getLogger(__name__)

LEAVE_TIMEOUT_S = 1.0
"""How long a stop without a budget of its own waits to take the process off the list."""

Snapshot = Callable[[], RoleInfo]
"""What a role is doing now, for the next beat's record."""


def wheelq_version() -> str:
    try:
        return version("wheelq")
    except PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


@dataclass(frozen=True, slots=True)
class _Member:
    executor: AsyncExecutor
    snapshot: Snapshot


class Heartbeat(Service):
    """Beats the record of every role joined, through the first one's executor, every
    `beat_ms`; its clock is corrected by each beat's reply (the server's time)."""

    name = "heartbeat"
    title = "process heartbeat"

    def __init__(self, beat_ms: int, ttl_ms: int, clock: RedisClock | None = None) -> None:
        self._clock = clock or RedisClock()
        super().__init__(self._clock, log, max_pause_ms=beat_ms)
        self.beat_ms = beat_ms
        self.ttl_ms = ttl_ms
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.process_id = f"{self.host}:{self.pid}:{secrets.token_hex(3)}"
        self.version = wheelq_version()
        self._since_local_ms = self._clock.local_ms()
        self._members: dict[int, _Member] = {}
        self._tokens = 0
        self.beats = 0

    def add(self, executor: AsyncExecutor, snapshot: Snapshot) -> int:
        """Add a role to the record; returns its token for `remove`."""
        self._tokens += 1
        self._members[self._tokens] = _Member(executor, snapshot)
        return self._tokens

    def remove(self, token: int) -> AsyncExecutor | None:
        """Take a role off the record; returns its executor (None: it was not there)."""
        member = self._members.pop(token, None)
        return None if member is None else member.executor

    @property
    def empty(self) -> bool:
        return not self._members

    def record(self) -> ProcessInfo:
        """The record of this beat, with every role's snapshot taken now."""
        now_ms = self._clock.now_ms()
        started_ms = now_ms - int(self._clock.local_ms() - self._since_local_ms)
        return ProcessInfo(
            self.process_id,
            self.host,
            self.pid,
            self.version,
            started_ms,
            self.beat_ms,
            self.ttl_ms,
            tuple(member.snapshot() for member in list(self._members.values())),
        )

    async def step(self) -> float | None:
        if not self._members:
            return None  # until a role joins (and wakes it)
        executor = next(iter(self._members.values())).executor
        call = processes.beat(self.process_id, pack_process(self.record()), self.ttl_ms)
        before = self._clock.local_ms()
        (server_ms,) = await executor.run([call])
        self._clock.add_sample(before, server_ms, self._clock.local_ms())
        self.beats += 1
        return self.beat_ms / 1000


_BEATS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Heartbeat]] = (
    weakref.WeakKeyDictionary()
)
"""The heartbeats of each event loop, by the server they beat to."""


@dataclass(slots=True)
class Beating:
    """A role's place in its process's heartbeat: `leave` when it stops."""

    heartbeat: Heartbeat
    token: int
    server: str

    async def leave(self, budget: StopBudget | None = None) -> None:
        """Take the role off the record; the last role to leave stops the heartbeat and
        takes the process off the list (within `budget`)."""
        hb = self.heartbeat
        executor = hb.remove(self.token)
        if executor is None or not hb.empty:
            return
        beats = _BEATS.get(asyncio.get_running_loop(), {})
        if beats.get(self.server) is hb:
            del beats[self.server]
        await hb.stop(budget)

        async def leave_list() -> None:
            await executor.run([processes.leave(hb.process_id)])

        if budget is None:
            try:
                await asyncio.wait_for(leave_list(), LEAVE_TIMEOUT_S)
            except Exception as exc:  # it expires by itself after ttl_ms
                log.info("could not take the process off the list (%s)", exc)
        else:
            await budget.attempt("take the process off the list", leave_list, None)


async def join(executor: AsyncExecutor, snapshot: Snapshot, beat_ms: int, ttl_ms: int) -> Beating:
    """Add a role to its process's heartbeat (started by the first, which sets `beat_ms`
    and `ttl_ms`); the next beat, at once, carries it."""
    loop = asyncio.get_running_loop()
    server = connect.server_of(executor)
    beats = _BEATS.setdefault(loop, {})
    hb = beats.get(server)
    if hb is None:
        hb = beats[server] = Heartbeat(beat_ms, ttl_ms)
    token = hb.add(executor, snapshot)
    if hb.running:
        hb.wake()
    else:
        await hb.start()
    return Beating(hb, token, server)


def heartbeats() -> list[Heartbeat]:
    """The heartbeats of the running event loop (for status and tests)."""
    return list(_BEATS.get(asyncio.get_running_loop(), {}).values())
