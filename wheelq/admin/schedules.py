"""Recurring schedules, the producer's side (sans-I/O): define, list, pause, resume,
remove (docs/architecture.md, "Schedules").
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from typing import TYPE_CHECKING, Any

from wheelq.admin import payload_checks
from wheelq.core import keys as k
from wheelq.core.due import At, at_ms, latest_at_ms
from wheelq.core.options import RunOptions, run_values, validate_max_attempts
from wheelq.core.payload import encode_payload, read_payload
from wheelq.core.recurring import (
    GRACE_MS,
    Schedule,
    recurrence,
    run_id,
    validate_misfire,
    validate_name,
)
from wheelq.core.settings import ClientSettings
from wheelq.store import enqueue
from wheelq.store import schedules as sched

if TYPE_CHECKING:
    from wheelq.producer.operations import Op, Producer


def record(
    settings: ClientSettings,
    now_ms: int,
    name: str,
    topic: str,
    payload: Any,
    *,
    cron: str | None,
    every_ms: int | None,
    tz: str,
    start: At | None = None,
    end: At | None = None,
    misfire: str,
    max_catch_up: int,
    options: RunOptions,
    declared: str = "",
) -> Schedule:
    """A schedule's record as `define` stores it, every argument checked (sans-I/O): its runs'
    options as an enqueue's (`run_values`), its payload against the check registered for
    `topic` in this process (`payload_checks`: a task's arguments), as a run would read it.

    Raises:
        InvalidArgumentError: A parameter out of range, or a payload that does not fit the
            topic's task (naming the argument); nothing is stored.
    """
    validate_name(name)
    k.validate_topic(topic)
    latest = latest_at_ms(now_ms)  # as a job's `at`: at most ten years on
    start_ms = 0 if start is None else at_ms(start, "start", latest)
    end_ms = None if end is None else at_ms(end, "end", latest)
    rule = recurrence(
        cron=cron, every_ms=every_ms, tz=tz, start_ms=start_ms, end_ms=end_ms, anchor_ms=start_ms
    )
    policy, catch_up = validate_misfire(misfire, max_catch_up)
    max_attempts = options.get("max_attempts")
    attempts = validate_max_attempts(
        settings.default_max_attempts if max_attempts is None else max_attempts
    )
    stored = run_values(options)
    data = encode_payload(payload, settings.max_payload_bytes)
    payload_checks.check(topic, read_payload(data))
    return Schedule(
        name, topic, rule, policy, catch_up, data, attempts, stored, now_ms, declared=declared
    )


def define(producer: Producer, made: Schedule) -> Op[tuple[Schedule, bool]]:
    """Create or update the schedule `made` (a `record`); returns it as stored and whether
    it was created."""
    schedule, created, _ = yield from _put(producer, made, None)
    return schedule, created


def _put(
    producer: Producer, made: Schedule, expected: bytes | None, *, create_only: bool = False
) -> Op[tuple[Schedule, bool, bool]]:
    """Store `made` (`sched.put`'s modes); (as stored, created, written)."""
    topic, name = made.topic, made.name
    home, _ = yield from _home(producer, topic, name, create=True)
    assert home is not None
    yield from producer.note_callbacks(topic, bool(made.callback))
    packed = made.pack()
    call = sched.put(home, name, packed, create_only, expected)
    _, (created, state, written) = yield [sched.index(home), call]
    return (
        Schedule.stored(topic, name, packed, state),
        created,
        written,
    )  # a bad old state: in error


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What `sync` changed, by schedule name (``topic/name``): what this call wrote; a change
    a racing sync wrote first is in neither list of this one."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    """Declared and stored as declared already: left as they were (their state, their runs
    written ahead)."""


def sync(
    producer: Producer, topics: Collection[str], declared: Sequence[Schedule]
) -> Op[SyncReport]:
    """Make the schedules of `topics` marked declared in code (`Schedule.declared`) exactly
    `declared`: add the new ones, update the changed ones (only those: an unchanged one
    keeps its state and its runs written ahead), remove the ones marked declared that no
    longer are; a schedule made with `Admin.schedule` is never removed (one of the same name
    as a declaration becomes the declared one).

    Safe when several processes sync at once: an add is create-only, an update a
    compare-and-set against the definition read, a removal found once; so each change is
    written by one of them, and the others see it done.
    """
    wanted = {(s.topic, s.name): s for s in declared}
    for topic in topics:
        k.validate_topic(topic)
    (homes,) = yield [sched.homes()]
    homes = [h for h in homes if h.topic in topics]
    found = (yield [sched.read(h) for h in homes]) if homes else []
    stored: dict[tuple[str, str], tuple[Schedule, bytes]] = {}
    for keys, records in zip(homes, found, strict=True):
        for name, (definition, state) in records.records.items():
            stored[(keys.topic, name)] = (
                Schedule.stored(keys.topic, name, definition, state),
                definition,
            )
    report = SyncReport()
    for key, want in sorted(wanted.items()):
        label = f"{key[0]}/{key[1]}"
        have = stored.get(key)
        if have is not None and have[0].same_definition(want):
            report.kept.append(label)
            continue
        _, created, written = yield from _put(
            producer, want, None if have is None else have[1], create_only=have is None
        )
        if written:
            (report.added if created else report.updated).append(label)
    for key, (old, _) in sorted(stored.items()):
        if key in wanted or not old.declared:
            continue
        if (yield from change(producer, old.name, old.topic, "remove")):
            report.removed.append(f"{key[0]}/{key[1]}")
    return report


def get(producer: Producer, name: str, topic: str) -> Op[Schedule | None]:
    validate_name(name)
    home, _ = yield from _home(producer, topic, name, create=False)
    if home is None:
        return None
    (found,) = yield [sched.read(home, name)]
    if name not in found.records:
        return None
    definition, state = found.records[name]
    return Schedule.stored(topic, name, definition, state)


def every(producer: Producer, topic: str | None) -> Op[list[Schedule]]:
    if topic is not None:
        k.validate_topic(topic)
    (homes,) = yield [sched.homes()]
    homes = [h for h in homes if topic is None or h.topic == topic]
    if not homes:
        return []
    out: list[Schedule] = []
    for keys, found in zip(homes, (yield [sched.read(h) for h in homes]), strict=True):
        out += [
            Schedule.stored(keys.topic, name, definition, state)
            for name, (definition, state) in found.records.items()
        ]
    return sorted(out, key=lambda s: (s.topic, s.name))


def change(producer: Producer, name: str, topic: str, op: str) -> Op[bool]:
    """Pause, resume or remove (`op`); pause and remove fence the writers out and cancel the
    runs written ahead."""
    validate_name(name)
    home, count = yield from _home(producer, topic, name, create=False)
    if home is None:
        return False
    (done,) = yield [sched.change_state(home, op, name)]
    if not done.found or op == "resume":
        return bool(done.found)
    shards = k.all_shards(topic, count)
    lasts = yield [sched.fence(keys, done.epoch, True, [name]) for keys in shards]
    upper = max(last for (last,) in lasts)
    now = producer.clock.now_ms()
    if done.definition is None or upper <= now - GRACE_MS:
        return True
    rule = Schedule.stored(topic, name, done.definition, None).rule  # unreadable: no runs
    ahead = takewhile(lambda t: t <= upper, rule.after(now - GRACE_MS))
    ids = [run_id(name, t) for t in ahead]
    calls = [enqueue.cancel(shards[k.shard_of(i, len(shards))], i) for i in ids]
    if calls:
        yield calls
    return True


def _home(
    producer: Producer, topic: str, name: str, *, create: bool
) -> Op[tuple[k.ShardKeys | None, int]]:
    shards = yield from producer.shard_count(topic, create=create)
    if shards is None:
        return None, 0
    return k.ShardKeys(topic, k.shard_of(name, shards)), shards
