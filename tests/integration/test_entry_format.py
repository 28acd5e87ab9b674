"""The stream-entry wire format on a real server: every way a job enters a ready stream
(emit, a retry's emit, enqueue and reschedule due now, replay) writes the same fields, in the
order `wheelq.core.job` names them, and the readers decode what the scripts wrote. A job
enqueued with a traceparent has it as its last field every way; one without has no such
field."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
import redis

from tests.support.entries import add_ready, dead_annotations, ready_fields
from tests.support.scripts import Runner
from wheelq.core.callback import Callback
from wheelq.core.due import DueSpec
from wheelq.core.job import DeadLetter, Envelope, Field, Job
from wheelq.core.keys import ShardKeys
from wheelq.store import consume, dead_letters, enqueue, fire, leases, scripts, settle

pytestmark = [
    pytest.mark.cluster_too,  # on the single server and on the cluster
    pytest.mark.both_servers,  # what the Lua scripts write
]

TOKEN = "node-a:1"
GROUP = "g"
WORKER = "worker-1"
TTL_MS = 30_000
ENQUEUED_MS = 1_700_000_000_000
PAYLOAD = {"to": "ada@example.com", "raw": b"\xff\x00"}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
RAW_PAYLOAD = msgpack.packb(PAYLOAD, use_bin_type=True)


def server_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def field_names(r: redis.Redis, key: str) -> dict[str, list[bytes]]:
    """Each entry's field names in stream order, by the job id it names."""
    return {fields[b"id"].decode(): list(fields) for _, fields in r.xrange(key)}


def fire_every_way(r: redis.Redis, run: Runner, keys: ShardKeys, traceparent: str = "") -> None:
    """Put jobs into the ready stream by each path a job takes there: emitted, retried and
    emitted again, enqueued due now, rescheduled to now, and replayed from the dead letters;
    each enqueued with `traceparent` ("" = none)."""

    def envelope(attempt: int = 1, group: str = "", job_id: str = "") -> bytes:
        return Envelope(RAW_PAYLOAD, attempt, 3, ENQUEUED_MS, group, job_id, traceparent).pack()

    assert run(leases.lease_acquire(keys, TOKEN, TTL_MS)).held
    run(consume.create_group(keys, GROUP))
    now = server_ms(r)
    for job_id in ("emitted", "retried", "died"):
        r.hset(keys.jobs, job_id, envelope())
        r.zadd(keys.delayed, {job_id: now - 1000})
    r.hset(keys.jobs, "broken", b"\xc1")
    r.zadd(keys.delayed, {"broken": now - 1000})
    emitted = run(fire.emit_due(keys, TOKEN, now, ["emitted", "retried", "died", "broken"]))
    assert (emitted.emitted, emitted.malformed) == (3, ["broken"])

    read = run(consume.read_group([keys], GROUP, WORKER, 10, None))
    by_id = {fields[Field.ID].decode(): entry_id for _, (entry_id, fields) in read}
    retry_envelope = envelope(2, GROUP, "retried")
    retry = run(settle.retry(keys, GROUP, by_id["retried"], "retried", 0, retry_envelope))
    assert retry.done
    assert run(settle.dead_letter(keys, GROUP, [(by_id["died"], "failed", "boom")])) == 1
    assert run(fire.emit_due(keys, TOKEN, server_ms(r), limit=10)).emitted == 1

    later = server_ms(r) + 60_000
    r.hset(keys.jobs, "rescheduled", envelope())
    r.zadd(keys.delayed, {"rescheduled": later})
    assert run(enqueue.reschedule(keys, "rescheduled", DueSpec("delay", 0))) == scripts.Placed.FIRED
    fired_now = enqueue.JobWrite("enqueued", DueSpec("delay", 0), False, envelope())
    assert run(enqueue.enqueue(keys, [fired_now])) == [scripts.Placed.FIRED]

    dead_id = next(eid.decode() for eid, f in r.xrange(keys.dead) if f[Field.ID] == b"died")
    assert run(dead_letters.replay(keys, [dead_id])) == (1, 0, [])


def test_every_way_into_the_ready_stream_writes_the_same_fields(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    fire_every_way(redis_sync, run, keys)

    names = field_names(redis_sync, keys.ready)
    first_runs = [names["emitted"], names["enqueued"], names["rescheduled"]]
    assert first_runs == [list(Field.READY)] * 3
    # a retry fired by emit_due and a replay both name their one group after the same fields
    # emitted, retried, died; the retry emitted; rescheduled, enqueued; the replay of died
    assert redis_sync.xlen(keys.ready) == 7
    group_entries = [
        list(fields) for _, fields in redis_sync.xrange(keys.ready) if Field.GROUP in fields
    ]
    assert group_entries == [[*Field.READY, Field.GROUP]] * 2


def test_a_traced_job_carries_its_trace_field_last_every_way(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    fire_every_way(redis_sync, run, keys, TRACEPARENT)

    names = field_names(redis_sync, keys.ready)
    first_runs = [names["emitted"], names["enqueued"], names["rescheduled"]]
    assert first_runs == [[*Field.READY, Field.TRACE]] * 3
    group_entries = [
        list(fields) for _, fields in redis_sync.xrange(keys.ready) if Field.GROUP in fields
    ]
    # the retry (its envelope from the worker) and the replay (from the dead letter's fields)
    assert group_entries == [[*Field.READY, Field.GROUP, Field.TRACE]] * 2
    traces = {f[Field.TRACE] for _, f in redis_sync.xrange(keys.ready)}
    assert traces == {TRACEPARENT.encode()}
    jobs = [Job.from_entry(eid.decode(), f) for eid, f in redis_sync.xrange(keys.ready)]
    assert {job.traceparent for job in jobs} == {TRACEPARENT}


def test_readers_decode_every_entry_the_scripts_write(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    fire_every_way(redis_sync, run, keys)

    jobs = [Job.from_entry(eid.decode(), f) for eid, f in redis_sync.xrange(keys.ready)]
    assert {job.id for job in jobs} == {"emitted", "retried", "died", "rescheduled", "enqueued"}
    assert all((job.payload, job.topic) == (PAYLOAD, keys.topic) for job in jobs)
    assert {(job.id, job.attempt, job.group) for job in jobs if job.group} == {
        ("retried", 2, GROUP),
        ("died", 1, GROUP),
    }
    [broken] = [
        DeadLetter.from_entry(keys.topic, keys.shard, eid.decode(), f)
        for eid, f in redis_sync.xrange(keys.dead)
    ]
    assert (broken.job_id, broken.reason) == ("broken", "malformed")
    assert list(broken.fields) == [
        n.decode()
        for n in (Field.ID, Field.TOPIC, Field.DUE, Field.REASON, Field.ERROR, Field.ENVELOPE)
    ]


def test_one_emit_writes_each_jobs_own_attempt_and_max_attempts(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    # emit_due keeps the counts it last spelled for the next job (wq_counts): a job must
    # never get another's
    counts = {"a": (1, 3), "b": (2, 3), "c": (1, 25), "d": (7, 7), "e": (1, 3), "f": (25, 1000)}
    assert run(leases.lease_acquire(keys, TOKEN, TTL_MS)).held
    now = server_ms(redis_sync)
    for job_id, (attempt, max_attempts) in counts.items():
        envelope = Envelope(RAW_PAYLOAD, attempt, max_attempts, ENQUEUED_MS).pack()
        redis_sync.hset(keys.jobs, job_id, envelope)
        redis_sync.zadd(keys.delayed, {job_id: now - 1000})

    assert run(fire.emit_due(keys, TOKEN, now, list(counts))).emitted == len(counts)

    written = {
        f[Field.ID].decode(): (int(f[Field.ATTEMPT]), int(f[Field.MAX_ATTEMPTS]))
        for _, f in redis_sync.xrange(keys.ready)
    }
    assert written == counts


def test_a_dead_letter_is_the_entry_followed_by_the_annotations(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(consume.create_group(keys, GROUP))
    fields = ready_fields(
        "j", topic=keys.topic, due_ms=1, payload=RAW_PAYLOAD, attempt=3, max_attempts=3
    )
    entry = add_ready(redis_sync, keys.ready, fields)
    run(consume.read_group([keys], GROUP, WORKER, 10, None))

    assert run(settle.dead_letter(keys, GROUP, [(entry, "failed", "boom")])) == 1

    [(dead_id, dead_fields)] = redis_sync.xrange(keys.dead)
    assert list(dead_fields) == [*Field.READY, *Field.DEAD]
    dead = DeadLetter.from_entry(keys.topic, keys.shard, dead_id.decode(), dead_fields)
    assert (dead.job_id, dead.attempt, dead.reason, dead.error, dead.group, dead.source_entry) == (
        "j",
        3,
        "failed",
        "boom",
        GROUP,
        entry,
    )


OPTIONAL = {
    "retry": {"group": GROUP, "job_id": "retried"},
    "traced": {"traceparent": TRACEPARENT},
    "callback": {"callback": Callback("https://example.com/hook", {"x-a": "1"}, 5000).pack()},
    "key": {"key": "k1"},
    "ordered": {"key": "k1", "ordered": True},
    "ordered without key": {"ordered": True},  # not written without a key
}


@pytest.mark.parametrize(
    "kinds", [(), *[(k,) for k in OPTIONAL], tuple(OPTIONAL), ("retry", "traced", "ordered")]
)
def test_an_emitted_entry_is_the_one_the_definition_builds(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, kinds: tuple[str, ...]
) -> None:
    # wq_fire_entry and tests.support.entries both write READY_ENTRY: the same bytes in the
    # same order, for every optional field alone and together
    values: dict[str, object] = {}
    for kind in kinds:
        values |= OPTIONAL[kind]
    envelope = Envelope(RAW_PAYLOAD, 2, 4, ENQUEUED_MS, **values)  # type: ignore[arg-type]
    assert run(leases.lease_acquire(keys, TOKEN, TTL_MS)).held
    due = server_ms(redis_sync) - 1000
    redis_sync.hset(keys.jobs, "member", envelope.pack())
    redis_sync.zadd(keys.delayed, {"member": due})

    assert run(fire.emit_due(keys, TOKEN, due + 1000, ["member"])).emitted == 1

    stream = keys.callbacks if "callback" in values else keys.ready
    [(_, written)] = redis_sync.xrange(stream)
    expected = ready_fields("member", topic=keys.topic, due_ms=due, envelope=envelope)
    assert list(written.items()) == list(expected.items())


@pytest.mark.parametrize("kinds", [(), *[(k,) for k in OPTIONAL], tuple(OPTIONAL)])
def test_a_replayed_entry_is_its_first_attempt_for_the_group_it_failed_in(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, kinds: tuple[str, ...]
) -> None:
    """Bug: replay.lua spelled the envelope out by hand and left out key and ordered: a
    replayed keyed job lost its key. The replay fires every optional field of the dead
    letter's entry, as the definition builds it."""
    values: dict[str, object] = {}
    for kind in kinds:
        values |= OPTIONAL[kind]
    failed = Envelope(RAW_PAYLOAD, 4, 4, ENQUEUED_MS, **values)  # type: ignore[arg-type]
    entry = ready_fields("j", topic=keys.topic, due_ms=1, envelope=failed)
    dead_id = add_ready(redis_sync, keys.dead, entry | dead_annotations("failed", "boom", "1-0"))

    assert run(dead_letters.replay(keys, [dead_id])) == (1, 0, [])

    stream = keys.callbacks if "callback" in values else keys.ready
    [(_, written)] = redis_sync.xrange(stream)
    first = dataclasses.replace(failed, attempt=1, group="g")  # dead_annotations' group
    due = written[Field.DUE].decode()
    expected = ready_fields("j", topic=keys.topic, due_ms=due, envelope=first)
    assert list(written.items()) == list(expected.items())
