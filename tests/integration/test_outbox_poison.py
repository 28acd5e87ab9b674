"""Outbox rows the relay can never place, written by plain SQL (another writer, a migration):
each is judged alone and refused into ``wheelq_outbox_rejected`` with a reason naming its
column and the accepted range, the good rows around it are each placed once, and the
runbook's resend (docs/operations/alerts.md, WheelqOutboxRowsRejected) fires nothing twice
(docs/guides/outbox.md, "What is guaranteed").
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import psycopg
import pytest
import redis
from psycopg import sql

from tests.support.docs import blocks
from tests.support.outbox import FAST, SHARDS, fired, fired_exactly, rows, scheduled
from tests.support.waiting import eventually, until
from wheelq import outbox
from wheelq.core import keys as k
from wheelq.core.due import NOW as DUE_NOW
from wheelq.core.settings import RelaySettings
from wheelq.errors import MalformedJobError
from wheelq.outbox.enqueue import row as enqueue_row
from wheelq.outbox.rows import refusal
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.replay import HeldJob
from wheelq.store import enqueue
from wheelq.store.enqueue import JobWrite

INSERT = (
    "INSERT INTO wheelq_outbox (topic, job_id, mode, value_ms, replace, order_key, envelope) "
    "VALUES (%(topic)s, %(job_id)s, %(mode)s, %(value_ms)s, %(replace)s, %(order_key)s, "
    "%(envelope)s)"
)
NOW, LATER = 12, 4  # good rows due now on each side of the poison, and due in an hour
OUT_OF_RANGE_ID = (
    "job_id: InvalidJobIdError: job_id must be a non-empty printable str of at most 256 UTF-8 bytes"
)

POISON: dict[str, tuple[dict[str, Any], str]] = {  # case: (the row's columns, its reason)
    "invalid topic": (
        {"topic": "no spaces here"},
        r"topic: InvalidTopicError: topic must be 1-100 characters from \[A-Za-z0-9_.-\]",
    ),
    "undecodable envelope": (
        {"envelope": b"\xc1 is no msgpack"},
        r"envelope: MalformedJobError: .* cannot be decoded: not msgpack",
    ),
    "empty id": ({"job_id": ""}, re.escape(OUT_OF_RANGE_ID)),
    "300-byte id": ({"job_id": "x" * 300}, re.escape(OUT_OF_RANGE_ID)),
    "due 9e18": (
        {"mode": "a", "value_ms": 9 * 10**18},
        r"value_ms = 9000000000000000000 \(mode 'a'\): InvalidDelayError: at must be finite "
        r"epoch seconds in \[0, \d+\]",
    ),
    "negative delay": (
        {"mode": "d", "value_ms": -5000},
        r"value_ms = -5000 \(mode 'd'\): InvalidDelayError: delay must be a finite number of "
        r"seconds >= 0 and <= 315360000",
    ),
    "a bin payload": (  # msgpack, but not what enqueue.lua reads (it has no bin)
        {"envelope": msgpack.packb([1, b"\x01", 1, 5, 0], use_bin_type=True)},
        r"envelope: MalformedJobError: .*payload is a bytes, not a msgpack str",
    ),
    "max_attempts 0": (
        {"envelope": msgpack.packb([1, b"\x01", 1, 0, 0], use_bin_type=False)},
        r"envelope: InvalidArgumentError: max_attempts must be an int in \[1, 1000\], got 0",
    ),
    "an order key of no ordered job": (
        {"order_key": "customer-7"},
        r"order_key: InvalidArgumentError: order_key must be the envelope's key when the job "
        r"is ordered, else ''",
    ),
}


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    outbox.install(postgres_dsn)
    return postgres_dsn


@pytest.fixture
async def relay(dsn: str, redis_url: str) -> AsyncIterator[outbox.Relay]:
    client = AsyncClient.from_url(redis_url)
    started = outbox.Relay(client, dsn, RelaySettings(**FAST))
    await started.check()
    await started.start()
    yield started
    await started.stop()
    await client.aclose()


def write(dsn: str, topic: str, poison: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Good rows by `outbox.enqueue`, with each of `poison` by plain SQL in the middle of
    them, in one transaction: one relay batch. The ids of the good rows due now, and later."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        now = [outbox.enqueue(conn, topic, {"n": i}) for i in range(NOW)]
        later = [outbox.enqueue(conn, topic, {"n": i}, delay=3600) for i in range(LATER)]
        for n, columns in enumerate(poison):
            conn.execute(INSERT, {**enqueue_row(topic, {"poison": n}, None), **columns})
        now += [outbox.enqueue(conn, topic, {"n": i}) for i in range(NOW, 2 * NOW)]
    return now, later


def rejected(dsn: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT topic, job_id, error FROM wheelq_outbox_rejected ORDER BY seq")
        return [(t, j, e) for t, j, e in found.fetchall()]


def resend(dsn: str) -> None:
    """The runbook's statement, as written, for each topic with rejected rows."""
    (statement,) = [
        b.body
        for b in blocks("docs/operations/alerts.md")
        if b.lang == "sql" and b.section == "WheelqOutboxRowsRejected"
    ]
    assert "'invoices'" in statement
    with psycopg.connect(dsn) as conn:
        topics = {t for (t,) in conn.execute("SELECT topic FROM wheelq_outbox_rejected")}
        for topic in topics:
            literal = sql.Literal(topic).as_string(conn)
            conn.execute(statement.replace("'invoices'", literal).encode())
        conn.commit()


async def settled(dsn: str, relay: outbox.Relay, refused: int) -> None:
    """Until the outbox is empty and the relay has refused `refused` rows in all."""

    async def done() -> bool:
        return relay.rejected >= refused and await asyncio.to_thread(rows, dsn) == 0

    await eventually(done, timeout_s=20, what=f"the outbox empty, {refused} rows refused")


def _shape(error: str) -> str:
    """`error` with its numbers out (the latest `at` moves with the clock)."""
    return re.sub(r"\d+", "N", error)


def placed_once(r: redis.Redis, topic: str, now: list[str], later: list[str]) -> bool:
    """Every good row placed once: fired (due now) or pending (due later), and nothing else."""
    return fired_exactly(r, topic, now) and set(scheduled(r, topic)) == set(later)


@pytest.mark.parametrize("case", list(POISON))
async def test_a_poison_row_is_refused_alone_and_the_rows_around_it_are_placed_once(
    dsn: str, topic: str, redis_sync: redis.Redis, relay: outbox.Relay, case: str
) -> None:
    columns, reason = POISON[case]
    now, later = write(dsn, topic, [columns])
    await settled(dsn, relay, 1)
    assert await asyncio.to_thread(placed_once, redis_sync, topic, now, later)
    ((bad_topic, bad_id, error),) = rejected(dsn)
    assert re.match(reason, error), error
    assert bad_topic == columns.get("topic", topic)
    assert bad_id not in {*fired(redis_sync, topic), *scheduled(redis_sync, topic)}
    assert relay.relayed == 2 * NOW + LATER and relay.failures == 0

    # The runbook's resend: the row is refused again, and nothing fires twice.
    resend(dsn)
    await settled(dsn, relay, 2)
    assert await asyncio.to_thread(placed_once, redis_sync, topic, now, later)
    ((_, _, again),) = rejected(dsn)
    assert _shape(again) == _shape(error)
    assert relay.relayed == 2 * NOW + LATER


@pytest.mark.cluster_too
async def test_every_poison_row_of_one_batch_is_refused_and_every_good_row_placed_once(
    dsn: str, topic: str, redis_sync: redis.Redis, relay: outbox.Relay
) -> None:
    now, later = write(dsn, topic, [columns for columns, _ in POISON.values()])
    await settled(dsn, relay, len(POISON))
    assert await asyncio.to_thread(placed_once, redis_sync, topic, now, later)
    errors = [error for _, _, error in rejected(dsn)]
    assert len(errors) == len(POISON)
    for (_, reason), error in zip(POISON.values(), errors, strict=True):
        assert re.match(reason, error), (reason, error)
    resend(dsn)
    await settled(dsn, relay, 2 * len(POISON))
    assert await asyncio.to_thread(placed_once, redis_sync, topic, now, later)
    again = [error for _, _, error in rejected(dsn)]  # (resent a topic at a time: in any order)
    assert sorted(map(_shape, again)) == sorted(map(_shape, errors))


@pytest.mark.cluster_too
async def test_rows_redis_refused_for_good_are_placed_once_by_the_runbooks_resend(
    dsn: str, topic: str, redis_sync: redis.Redis, relay: outbox.Relay
) -> None:
    broken = k.ShardKeys(topic, 0).delayed  # not a sorted set: shard 0's writes are refused
    redis_sync.set(broken, "not wheelq's")
    now, later = write(dsn, topic, [])
    on_broken = {i for i in now + later if k.shard_of(i, SHARDS) == 0}  # refused: unwritten
    assert on_broken
    await settled(dsn, relay, len(on_broken))
    assert {j for _, j, _ in rejected(dsn)} == on_broken
    assert all("WrongTypeError: " in e and broken in e for _, _, e in rejected(dsn))
    others = [i for i in now if i not in on_broken]  # (the broken key cannot be read yet)
    assert await asyncio.to_thread(fired_exactly, redis_sync, topic, others)

    redis_sync.delete(broken)  # the runbook: fix what the error names, then send them again
    resend(dsn)
    await until(lambda: relay.relayed == 2 * NOW + LATER, timeout_s=20, what="the resend placed")
    assert await asyncio.to_thread(placed_once, redis_sync, topic, now, later)
    assert rejected(dsn) == [] and await asyncio.to_thread(rows, dsn) == 0


def _packed(fields: object, bin_type: bool = False) -> bytes:
    packed: bytes = msgpack.packb(fields, use_bin_type=bin_type)
    return packed


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"  # 55 characters: a str8
ENVELOPES = {  # name: an envelope enqueue.lua may refuse (the last two it takes)
    "empty": b"",
    "not msgpack": b"\xc1",
    "a map": _packed({"a": 1}),
    "a str": _packed("envelope"),
    "four fields": _packed([1, "p", 1, 5]),
    "version 2": _packed([2, "p", 1, 5, 0]),
    "version true": _packed([True, "p", 1, 5, 0]),
    "a bin payload": _packed([1, b"p", 1, 5, 0], bin_type=True),
    "an int payload": _packed([1, 5, 1, 5, 0]),
    "attempt 2**31": _packed([1, "p", 2**31, 5, 0]),
    "attempt -1": _packed([1, "p", -1, 5, 0]),
    "attempt 1.5": _packed([1, "p", 1.5, 5, 0]),
    "max_attempts 2**31": _packed([1, "p", 1, 2**31, 0]),
    "enqueued_ms -1": _packed([1, "p", 1, 5, -1]),
    "field 6 an int": _packed([1, "p", 1, 5, 0, 7]),
    "field 6 nil": _packed([1, "p", 1, 5, 0, None]),
    "field 11 a bin": _packed([1, "p", 1, 5, 0, "", "", "", "", "", b"1"], bin_type=True),
    "a plain job": _packed([1, _packed({"x": 1}), 1, 5, 0]),  # bytes as str, as enqueue does
    "str8 headers": _packed([1, "\x05", 1, 5, 0, "", "", TRACE], bin_type=True),
}


@pytest.mark.parametrize("name", list(ENVELOPES))
def test_the_relay_refuses_every_envelope_enqueue_lua_refuses(
    keys: k.ShardKeys, run: Any, name: str
) -> None:
    envelope = ENVELOPES[name]
    try:  # due now: enqueue.lua decodes it to fire it
        run(enqueue.enqueue(keys, [JobWrite(f"job-{name}", DUE_NOW, False, envelope)]))
        lua_refused = False
    except MalformedJobError:
        lua_refused = True
    held = HeldJob(1, keys.topic, f"job-{name}", "d", 0, False, envelope, 0)
    why = refusal(held, 0, 1_700_000_000_000)
    assert why is not None or not lua_refused, "enqueue.lua refuses what the relay would send"
    assert (why is None) == (name in ("a plain job", "str8 headers")), why
