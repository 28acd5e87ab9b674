"""Recurring schedules, the producer's side (sans-I/O): define, list, pause, resume,
remove (docs/architecture.md, "Schedules").
"""

from __future__ import annotations

from itertools import takewhile
from typing import TYPE_CHECKING, Any

from wheelq.core import keys as k
from wheelq.core.due import At, at_ms, latest_at_ms
from wheelq.core.options import RunOptions, run_values, validate_max_attempts
from wheelq.core.payload import encode_payload
from wheelq.core.recurring import (
    GRACE_MS,
    Schedule,
    recurrence,
    run_id,
    validate_misfire,
    validate_name,
)
from wheelq.store import enqueue
from wheelq.store import schedules as sched

if TYPE_CHECKING:
    from wheelq.producer.operations import Op, Producer


def define(
    producer: Producer,
    name: str,
    topic: str,
    payload: Any,
    *,
    cron: str | None,
    every_ms: int | None,
    tz: str,
    start: At | None,
    end: At | None,
    misfire: str,
    max_catch_up: int,
    options: RunOptions,
) -> Op[tuple[Schedule, bool]]:
    """Create or update a schedule; returns it and whether it was created. Its runs' options
    are checked as an enqueue's (`run_values`)."""
    validate_name(name)
    k.validate_topic(topic)
    latest = latest_at_ms(producer.clock.now_ms())  # as a job's `at`: at most ten years on
    start_ms = 0 if start is None else at_ms(start, "start", latest)
    end_ms = None if end is None else at_ms(end, "end", latest)
    rule = recurrence(
        cron=cron, every_ms=every_ms, tz=tz, start_ms=start_ms, end_ms=end_ms, anchor_ms=start_ms
    )
    policy, catch_up = validate_misfire(misfire, max_catch_up)
    settings = producer.settings
    max_attempts = options.get("max_attempts")
    attempts = validate_max_attempts(
        settings.default_max_attempts if max_attempts is None else max_attempts
    )
    stored = run_values(options)
    data = encode_payload(payload, settings.max_payload_bytes)
    now_ms = producer.clock.now_ms()
    record = Schedule(name, topic, rule, policy, catch_up, data, attempts, stored, now_ms)
    home, _ = yield from _home(producer, topic, name, create=True)
    assert home is not None
    yield from producer.note_callbacks(topic, bool(record.callback))
    packed = record.pack()
    _, (created, state) = yield [sched.index(home), sched.put(home, name, packed, False)]
    return Schedule.stored(topic, name, packed, state), created  # a bad old state: in error


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
