"""The chaos soak's faults, and the seeded schedule that mixes them.

A fault is a generator over an `Arena`: the code before its ``yield`` begins the fault and
yields how long to hold it (seconds); the code after ends it and puts things back. So the
schedule can run one fault at a time, or begin a second while the first holds:

    gen = FAULTS["node_stop"](arena, rng)
    hold_s = next(gen)           # the node is SIGSTOPped
    ...                          # hold_s later:
    next(gen, None)              # SIGCONT

Every fault writes what it did into its `Event` (``detail``); one that could not be
applied (a Redis command refused while Redis is down) says so instead of raising. A fault
on a process waits until that process is ready (`Fleet.wait_ready`: its signal handlers
installed), and is not applied to one that is dead or stopped before it got there.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from benchlib.chaos_fleet import Fleet, Member
from wheelq.testing import faults
from wheelq.testing.proxy import ProxyThread

NODE_POINTS = ("emit.before_send", "emit.after_reply", "resolve.after_hear")
WORKER_POINTS = ("ack.before_send", "ack.after_reply", "handler.after")


class Target(Protocol):
    """The Redis deployment under test: one server or a cluster."""

    def primaries(self) -> list[redis.Redis]:
        """A fresh direct connection to each primary (faults close them after use)."""

    def restart_one(self, rng: random.Random, down_s: float) -> str:
        """kill -9 a server, keep it down `down_s`, start it again (AOF) or fail it over;
        returns what was done."""

    def extra_faults(self) -> dict[str, Fault]:
        """Faults only this deployment has (slot migration, failover on a cluster)."""


@dataclass
class Event:
    fault: str
    start_ms: int
    end_ms: int = 0
    paired: bool = False
    """Injected together with another fault (the schedule's second half)."""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Arena:
    fleet: Fleet
    target: Target
    proxy: ProxyThread
    now_ms: Callable[[], int]
    """The Redis clock (the soak's offset to TIME, measured at its start)."""
    roles: tuple[str, ...] = ()
    """The roles whose members this schedule revives after each fault (empty: every role);
    a second schedule running beside it revives its own."""


Fault = Callable[[Arena, random.Random, Event], Iterator[float]]
MemberFault = Callable[[Arena, random.Random, Event, Member], Iterator[float]]


def on_ready(role: str, fault: MemberFault) -> Fault:
    """`fault` on a member of `role` drawn at random, once that member is ready."""

    def run(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
        member = rng.choice(arena.fleet.named(role))
        event.detail["target"] = member.name
        if not arena.fleet.wait_ready(member.name):
            event.detail["not_applied"] = f"{member.name} is not ready (dead or stopped)"
            yield 0.0
            return
        yield from fault(arena, rng, event, member)

    return run


def _on_primaries(arena: Arena, event: Event, action: Callable[[redis.Redis], Any]) -> None:
    done = []
    for conn in arena.target.primaries():
        try:
            done.append(action(conn))
        except redis.RedisError as exc:
            event.detail.setdefault("not_applied", []).append(repr(exc))
        finally:
            conn.close()
    event.detail["applied"] = len(done)


def _kill(arena: Arena, rng: random.Random, event: Event, member: Member) -> Iterator[float]:
    arena.fleet.kill(member.name)
    yield rng.uniform(0.5, 3.0)
    arena.fleet.start(member.name)


def pause(role: str, low: float, high: float) -> Fault:
    def fault(arena: Arena, rng: random.Random, event: Event, member: Member) -> Iterator[float]:
        arena.fleet.pause(member.name)
        yield rng.uniform(low, high)
        arena.fleet.resume(member.name)

    return on_ready(role, fault)


def crash_point(role: str, points: tuple[str, ...]) -> Fault:
    def fault(arena: Arena, rng: random.Random, event: Event, member: Member) -> Iterator[float]:
        point, hits = rng.choice(points), rng.randint(1, 30)
        event.detail["point"] = f"{point}:{hits}"
        arena.fleet.kill(member.name)
        arena.fleet.start(member.name, crash_at=f"{point}:{hits}")
        yield 10.0
        died = arena.fleet.wait_dead(member.name, 0)
        assert member.proc is not None
        event.detail["died_at_point"] = died and member.proc.returncode == -signal.SIGKILL
        arena.fleet.kill(member.name)
        arena.fleet.start(member.name)

    return on_ready(role, fault)


def redis_restart(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    event.detail["did"] = arena.target.restart_one(rng, rng.uniform(0.3, 2.0))
    yield 0.0


def script_flush(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    _on_primaries(arena, event, faults.flush_scripts)
    yield 0.0


def pause_writes(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    ms = rng.randint(300, 2000)
    event.detail["ms"] = ms
    _on_primaries(arena, event, lambda conn: faults.pause_writes(conn, ms))
    yield ms / 1000


def client_kill(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    killed: list[int] = []
    _on_primaries(arena, event, lambda conn: killed.append(faults.kill_clients(conn)))
    event.detail["killed"] = sum(killed)
    yield 0.0


def proxy_cut(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    event.detail["cut"] = arena.proxy.cut()
    yield 0.0


def proxy_stall(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    arena.proxy.stall()
    yield rng.uniform(0.5, 4.0)  # past the clients' 2 s socket timeout at times
    arena.proxy.unstall()


def proxy_slow(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    ms = rng.choice((5, 20, 50))
    event.detail["delay_ms"] = ms
    arena.proxy.slow(ms)
    yield rng.uniform(1.0, 4.0)
    arena.proxy.slow(0)


def out_of_memory(arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
    states: list[tuple[redis.Redis, faults.MemoryState]] = []
    for conn in arena.target.primaries():
        try:
            states.append((conn, faults.squeeze_memory(conn)))
        except redis.RedisError as exc:
            event.detail["not_applied"] = repr(exc)
            conn.close()
    yield rng.uniform(0.5, 2.0)
    for conn, state in states:
        try:
            faults.restore_memory(conn, state)
        except redis.RedisError as exc:  # restarted meanwhile: the setting went with it
            event.detail["not_restored"] = repr(exc)
        finally:
            conn.close()


def _toggle(sig: int, low: float, high: float) -> Fault:
    """`sig` to a ready node, and again to the same process after the hold (a node
    restarted meanwhile started with the toggle off, and is not sent it)."""

    def fault(arena: Arena, rng: random.Random, event: Event, member: Member) -> Iterator[float]:
        assert member.proc is not None
        pid = member.proc.pid
        arena.fleet.signal(member.name, sig)
        yield rng.uniform(low, high)
        if not arena.fleet.signal(member.name, sig, pid=pid):
            event.detail["untoggled_by_restart"] = True

    return on_ready("node", fault)


FAULTS: dict[str, Fault] = {
    "node_kill": on_ready("node", _kill),
    "node_stop": pause("node", 1.0, 8.0),  # the lease TTL is 5 s: past it at times
    "node_crash_point": crash_point("node", NODE_POINTS),
    "worker_kill": on_ready("worker", _kill),
    "worker_stop": pause("worker", 1.0, 8.0),  # the visibility timeout is 5 s
    "worker_crash_point": crash_point("worker", WORKER_POINTS),
    "redis_restart": redis_restart,
    "script_flush": script_flush,
    "pause_writes": pause_writes,
    "client_kill": client_kill,
    "proxy_cut": proxy_cut,
    "proxy_stall": proxy_stall,
    "proxy_slow": proxy_slow,
    "out_of_memory": out_of_memory,
    "clock_jump": _toggle(signal.SIGUSR1, 2.0, 8.0),
    "slow_renewals": _toggle(signal.SIGUSR2, 6.0, 10.0),
}


def run_schedule(
    arena: Arena,
    faults_by_name: dict[str, Fault],
    seed: int,
    until_s: float,
    log: Callable[[str], None],
) -> list[Event]:
    """Inject faults until `until_s` (monotonic seconds from now): the first half one at a
    time, every class in a seeded order, then overlapping pairs; a quiet gap of 4-8 s after
    each, so each fault's lateness spike and recovery can be told apart."""
    rng = random.Random(seed)
    names = sorted(faults_by_name)
    start = time.monotonic()
    half, end = start + until_s / 2, start + until_s
    events: list[Event] = []
    order: list[str] = []
    while time.monotonic() < end:
        pair = time.monotonic() >= half
        if not order:
            order = rng.sample(names, len(names))
        chosen = [order.pop()]
        if pair:
            chosen.append(rng.choice([n for n in names if n != chosen[0]]))
        running = []
        for name in chosen:
            event = Event(name, arena.now_ms(), paired=pair)
            gen = faults_by_name[name](arena, rng, event)
            running.append((time.monotonic() + next(gen), gen, event))
            log(f"fault {name} {event.detail}")
            if pair:
                time.sleep(rng.uniform(0, 1.0))
        for until, gen, event in sorted(running, key=lambda r: r[0]):
            time.sleep(max(0.0, until - time.monotonic()))
            next(gen, None)
            event.end_ms = arena.now_ms()
            events.append(event)
        revived = arena.fleet.revive(arena.roles)
        if revived:
            log(f"revived {revived}")
        time.sleep(rng.uniform(4.0, 8.0))
    return events
