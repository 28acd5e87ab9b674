"""The PostgreSQL outbox on a real PostgreSQL and real Redis servers (docs/guides/outbox.md):
a job enqueued in a transaction exists if and only if it committed, fires once, on time,
through relay crashes, racing relays and server restarts; `once` applies effects once.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from tests.support.cli import PYTHON, ROOT, assert_one_line_error, clean_env, run_wheelq
from tests.support.outbox import FAST, SHARDS, commit, fired, fired_exactly, rows, scheduled
from tests.support.postgres import PostgresServer
from tests.support.relay_proc import RelayProcess
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually, eventually_sync, until
from tests.support.worker_proc import WorkerProcess
from wheelq import Scheduler, outbox
from wheelq.core import keys as k
from wheelq.core.job import Field
from wheelq.core.settings import RelaySettings
from wheelq.errors import (
    AckUnsupportedError,
    InvalidArgumentError,
    InvalidDelayError,
    InvalidTopicError,
    NotInTransactionError,
    OutboxNotInstalledError,
    PayloadTypeError,
)
from wheelq.producer.async_client import AsyncClient
from wheelq.testing import ServerBinary


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    """A database of the test's own with the outbox's tables."""
    outbox.install(postgres_dsn)
    return postgres_dsn


@pytest.fixture
async def relay_on(redis_url: str) -> AsyncIterator[Any]:
    """``await relay_on(dsn, **settings)``: a started in-process relay, stopped afterwards."""
    made: list[tuple[outbox.Relay, AsyncClient]] = []

    async def start(dsn: str, **settings: int) -> outbox.Relay:
        client = AsyncClient.from_url(redis_url)
        relay = outbox.Relay(client, dsn, RelaySettings(**{**FAST, **settings}))
        await relay.check()
        await relay.start()
        made.append((relay, client))
        return relay

    yield start
    for relay, client in made:
        await relay.stop()
        await client.aclose()


# --- a job exists if and only if its transaction committed ---------------------------------


async def test_a_rolled_back_transaction_never_produces_a_job(
    dsn: str, topic: str, redis_sync: redis.Redis, relay_on: Any
) -> None:
    with psycopg.connect(dsn) as conn:
        with pytest.raises(ZeroDivisionError), conn.transaction():
            lost = [outbox.enqueue(conn, topic, {"lost": i}) for i in range(20)]
            _ = 1 / 0
        with conn.transaction():
            kept = [outbox.enqueue(conn, topic, {"kept": i}) for i in range(20)]
    relay = await relay_on(dsn)
    await eventually(
        lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, kept),
        timeout_s=10,
        what="the committed jobs fired",
    )
    assert not set(fired(redis_sync, topic)) & set(lost)
    # The relay counts and deletes a batch's rows once Redis took it: a moment later.
    await until(lambda: relay.relayed == 20, timeout_s=10, what="the relay's count")
    assert rows(dsn) == 0


@pytest.mark.cluster_too
async def test_every_committed_job_fires_exactly_once_and_never_before_its_row_says(
    dsn: str, topic: str, redis_url: str, redis_sync: redis.Redis, relay_on: Any
) -> None:
    delays = [0, 0.3, 0.6, 1.0]
    before_ms = time.time() * 1000
    ids = {delay: commit(dsn, topic, 25, delay=delay) for delay in delays}
    await relay_on(dsn)
    async with Scheduler.from_url(redis_url, [topic]):
        every = [i for group in ids.values() for i in group]
        await eventually(
            lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, every),
            timeout_s=20,
            what="every committed job fired",
        )
    entry_ms = {}
    for shard in range(SHARDS):
        for entry_id, fields in redis_sync.xrange(k.ShardKeys(topic, shard).ready):
            entry_ms[fields[Field.ID].decode()] = int(entry_id.split(b"-")[0])
    for delay, group in ids.items():
        for job_id in group:  # the delay counts from the INSERT, which came after before_ms
            assert entry_ms[job_id] >= before_ms + delay * 1000, (delay, job_id)


async def test_a_relay_killed_between_redis_and_its_commit_causes_no_second_job(
    dsn: str, topic: str, redis_url: str, redis_sync: redis.Redis, tmp_path: Path
) -> None:
    ids = commit(dsn, topic, 600)  # due now: a second write would fire a second entry
    first = RelayProcess(
        redis_url, dsn, "first", tmp_path, {"batch_size": 200}, crash_at="relay.after_place:2"
    )
    try:
        eventually_sync(lambda: not first.alive(), timeout_s=30, what="the relay's crash")
        assert first.proc.returncode == -signal.SIGKILL, first.log_tail()
        placed = fired(redis_sync, topic)
        assert len(placed) == 400 and rows(dsn) == 400  # one batch deleted, one placed only
    finally:
        first.finish()
    second = RelayProcess(redis_url, dsn, "second", tmp_path, {"batch_size": 200})
    try:
        eventually_sync(
            lambda: fired_exactly(redis_sync, topic, ids), timeout_s=30, what="every job fired"
        )
        eventually_sync(lambda: rows(dsn) == 0, timeout_s=10, what="the rows deleted")
    finally:
        second.finish()


@pytest.mark.parametrize("relays", [2, 3])
async def test_racing_relays_place_every_row_once(
    dsn: str, topic: str, redis_sync: redis.Redis, relay_on: Any, relays: int
) -> None:
    ids = commit(dsn, topic, 3000)
    started = [await relay_on(dsn, batch_size=50) for _ in range(relays)]
    await eventually(
        lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, ids),
        timeout_s=30,
        what="every job fired",
    )
    assert sum(r.relayed for r in started) == 3000
    assert rows(dsn) == 0


async def test_a_postgresql_restart_under_a_running_relay_loses_and_doubles_nothing(
    dedicated_postgres: PostgresServer, topic: str, redis_sync: redis.Redis, relay_on: Any
) -> None:
    dsn = dedicated_postgres.dsn
    outbox.install(dsn)
    relay = await relay_on(dsn)
    ids = commit(dsn, topic, 100)
    await eventually(
        lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, ids),
        timeout_s=10,
        what="the first jobs",
    )
    await asyncio.to_thread(dedicated_postgres.restart)
    ids += commit(dsn, topic, 100)  # the relay's connections died with the server
    await eventually(
        lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, ids),
        timeout_s=30,
        what="the jobs committed after the restart",
    )
    assert relay.running


@pytest.mark.both_servers  # the server restarted
async def test_a_redis_restart_keeps_the_rows_until_redis_is_back(
    dsn: str, topic: str, server_binary: ServerBinary
) -> None:
    always = ["--appendfsync", "always"]  # everysec may acknowledge what a kill -9 loses
    with dedicated_server(server_binary, appendonly=True, extra_args=always) as srv:
        client = AsyncClient.from_url(srv.url)
        relay = outbox.Relay(client, dsn, RelaySettings(**FAST))
        await relay.start()
        try:
            first = commit(dsn, topic, 50)
            r = redis.Redis.from_url(srv.url)
            await eventually(
                lambda: asyncio.to_thread(fired_exactly, r, topic, first),
                timeout_s=10,
                what="the first jobs",
            )
            r.close()
            srv.kill()
            later = commit(dsn, topic, 50)
            await until_failing(relay)
            assert rows(dsn) == 50  # nothing is deleted that Redis did not take
            srv.restart()
            r = redis.Redis.from_url(srv.url)
            await eventually(
                lambda: asyncio.to_thread(fired_exactly, r, topic, first + later),
                timeout_s=30,
                what="the jobs committed while Redis was down",
            )
            # The relay deletes a batch's rows after Redis took it: a moment later.
            await eventually(
                lambda: asyncio.to_thread(lambda: rows(dsn) == 0),
                timeout_s=10,
                what="the relayed rows deleted",
            )
            r.close()
        finally:
            await relay.stop()
            await client.aclose()


async def until_failing(relay: outbox.Relay) -> None:
    async def failing() -> bool:
        return relay.failures > 0

    await eventually(failing, timeout_s=10, what="the relay's steps failing")


async def test_a_relay_started_an_hour_late_fires_each_job_when_its_row_says(
    dsn: str, topic: str, redis_sync: redis.Redis, relay_on: Any
) -> None:
    soon = commit(dsn, topic, 5, delay=1800)  # half an hour after the INSERT
    later = commit(dsn, topic, 5, delay=7200)  # two hours after
    with psycopg.connect(dsn) as conn:  # as if the relay came an hour after the commits
        conn.execute("UPDATE wheelq_outbox SET written_ms = written_ms - 3600000")
    await relay_on(dsn)
    await eventually(
        lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, soon),
        timeout_s=10,
        what="the half-hour jobs, overdue, fired at once",
    )
    due = scheduled(redis_sync, topic)
    (now_s, _) = redis_sync.time()
    for job_id in later:  # due an hour from now, on the Redis clock
        assert abs(due[job_id] - (now_s * 1000 + 3_600_000)) < 30_000, due[job_id]


# --- once: effects exactly once -------------------------------------------------------------


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_once_applies_effects_once_through_a_worker_killed_between_commit_and_ack(
    dsn: str, topic: str, redis_url: str, tmp_path: Path, relay_on: Any, sync: bool
) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE effects (job_id text NOT NULL)")
    ids = commit(dsn, topic, 5)
    await relay_on(dsn)
    behaviour = {"once_dsn": dsn, "sync": sync}
    settings = {"visibility_timeout_ms": 1000, "concurrency": 1}
    async with Scheduler.from_url(redis_url, [topic]):
        dying = WorkerProcess(
            redis_url, topic, "dying", tmp_path, behaviour, settings, crash_at="handler.after:1"
        )
        try:
            await eventually(
                lambda: asyncio.to_thread(lambda: not dying.alive()),
                timeout_s=30,
                what="the worker's crash",
            )
        finally:
            dying.finish()
        (victim,) = [line["job"] for line in dying.lines() if line["event"] == "once"]
        live = WorkerProcess(redis_url, topic, "live", tmp_path, behaviour, settings)
        try:

            def settled() -> bool:
                seen = [line for line in live.lines() if line["event"] == "once"]
                return {line["job"] for line in seen} == set(ids)

            await eventually(
                lambda: asyncio.to_thread(settled), timeout_s=30, what="every job handled"
            )
            again = [x for x in live.lines() if x["event"] == "once" and x["job"] == victim]
            assert [x["first"] for x in again] == [False], again  # redelivered, not applied
        finally:
            live.finish()
    with psycopg.connect(dsn) as conn:
        applied = Counter(j for (j,) in conn.execute("SELECT job_id FROM effects").fetchall())
    assert applied == Counter(ids), applied


async def test_a_redelivery_after_the_done_records_retention_applies_again(
    dsn: str, topic: str, relay_on: Any
) -> None:
    job = _job(topic, "01M8ZZZZZZZZZZZZZZZZZZZZZZ")
    with psycopg.connect(dsn) as conn, conn.transaction():
        assert outbox.once(conn, job) is True
    with psycopg.connect(dsn) as conn, conn.transaction():
        assert outbox.once(conn, job) is False  # within the retention: applied already
    with psycopg.connect(dsn) as conn:  # two days old, against a retention of one
        conn.execute("UPDATE wheelq_outbox_done SET done_ms = done_ms - 2 * 86400000")
    await relay_on(dsn, done_retention_ms=86_400_000)
    await eventually(
        lambda: asyncio.to_thread(lambda: rows(dsn, "wheelq_outbox_done") == 0),
        timeout_s=10,
        what="the relay pruning the expired record",
    )
    with psycopg.connect(dsn) as conn, conn.transaction():
        assert outbox.once(conn, job) is True  # documented: past the retention, applied again


def _job(topic: str, job_id: str) -> Any:
    from wheelq import Job

    return Job(id=job_id, topic=topic, payload=None, due_ms=0, attempt=1, max_attempts=1)


# --- bad input: a typed error naming what to do, nothing written ---------------------------


def test_once_outside_a_transaction_is_refused_and_records_nothing(dsn: str, topic: str) -> None:
    job = _job(topic, "01M8ZZZZZZZZZZZZZZZZZZZZZY")
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(NotInTransactionError, match="transaction") as info:
            outbox.once(conn, job)
        assert info.value.parameter == "conn"
    assert rows(dsn, "wheelq_outbox_done") == 0


async def test_aonce_outside_a_transaction_is_refused(dsn: str, topic: str) -> None:
    job = _job(topic, "01M8ZZZZZZZZZZZZZZZZZZZZZX")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(NotInTransactionError):
            await outbox.aonce(conn, job)
    assert rows(dsn, "wheelq_outbox_done") == 0


def test_enqueue_before_the_tables_exist_names_the_command_to_run(
    postgres_dsn: str, topic: str
) -> None:
    with (
        psycopg.connect(postgres_dsn) as conn,
        pytest.raises(OutboxNotInstalledError, match="wheelq outbox init"),
    ):
        outbox.enqueue(conn, topic, {"x": 1})


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ({"topic": "no spaces"}, InvalidTopicError),
        ({"delay": float("nan")}, InvalidDelayError),
        ({"delay": -1}, InvalidDelayError),
        ({"delay": 1, "at": 5}, InvalidDelayError),
        ({"job_id": ""}, InvalidArgumentError),
        ({"max_attempts": 0}, InvalidArgumentError),
        ({"payload": {1, 2}}, PayloadTypeError),
        ({"ordered": True}, InvalidArgumentError),
        ({"callback": "ftp://x"}, InvalidArgumentError),
    ],
)
def test_bad_arguments_are_refused_before_any_row_is_written(
    dsn: str, topic: str, call: dict[str, Any], error: type[Exception]
) -> None:
    args = {"topic": topic, "payload": {"x": 1}, **call}
    with psycopg.connect(dsn) as conn, conn.transaction(), pytest.raises(error):
        outbox.enqueue(conn, args.pop("topic"), args.pop("payload"), **args)
    assert rows(dsn) == 0


def test_the_relay_command_names_a_missing_table_and_an_unreachable_database(
    postgres_dsn: str, redis_url: str
) -> None:
    missing = run_wheelq("relay", "--dsn", postgres_dsn, "--redis-url", redis_url)
    assert missing.returncode == 1 and "wheelq outbox init" in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    dead = "postgresql://someone:hunter2@127.0.0.1:9/none"
    unreachable = run_wheelq("relay", "--dsn", dead, "--redis-url", redis_url)
    assert unreachable.returncode == 1, unreachable.stderr
    assert "cannot connect to PostgreSQL" in unreachable.stderr
    assert "hunter2" not in unreachable.stderr  # the password is not printed


def test_outbox_init_creates_the_tables_once_and_prints_its_sql(postgres_dsn: str) -> None:
    for _ in range(2):  # again: changes nothing
        done = run_wheelq("outbox", "init", "--dsn", postgres_dsn)
        assert done.returncode == 0, done.stderr
    with psycopg.connect(postgres_dsn) as conn:
        found = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables").fetchall()}
    assert set(outbox.TABLES) <= found
    sql = run_wheelq("outbox", "init", "--sql")
    assert sql.returncode == 0 and sql.stdout == outbox.schema_sql()


SECRET = "Pw-s3cret"
MALFORMED_DSNS = [  # each with a password; none parses, so none reaches a server
    f"postgresql://app:{SECRET}@[::1/db",  # libpq quotes the whole URI back
    f"host=127.0.0.1 port=1 password={SECRET} dbname",  # a key without its '='
    f"postgresql://app:{SECRET}@127.0.0.1:1/db?no_such_option=1",
    f"host=127.0.0.1 port=1 password='{SECRET}",  # an unterminated quote
    f"postgresql://app:{SECRET}%zz@127.0.0.1:1/db",  # libpq quotes the password back
]


@pytest.mark.parametrize("command", ["relay", "outbox init"])
@pytest.mark.parametrize("dsn", MALFORMED_DSNS, ids=range(len(MALFORMED_DSNS)))
def test_a_malformed_dsn_is_one_line_without_its_password(
    redis_url: str, command: str, dsn: str
) -> None:
    done = run_wheelq(*command.split(), "--dsn", dsn, "--redis-url", redis_url)
    assert_one_line_error(done, 1, "PostgreSQL", "malformed")
    assert "s3cret" not in done.stderr + done.stdout, done.stderr


def test_a_malformed_dsn_from_the_environment_is_one_line_without_its_password(
    redis_url: str,
) -> None:
    env = {"WHEELQ_RELAY_DSN": MALFORMED_DSNS[0]}
    done = run_wheelq("relay", "--redis-url", redis_url, env=env)
    assert_one_line_error(done, 1, "PostgreSQL", "malformed")
    assert "s3cret" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["relay", "outbox init"])
@pytest.mark.parametrize("dsn", ["", " ", " \t\n"], ids=["empty", "space", "blanks"])
def test_a_blank_dsn_is_refused_not_read_as_libpqs_defaults(
    redis_url: str, command: str, dsn: str
) -> None:
    """libpq reads a blank DSN as "every default" (the local server, the user's database):
    it is refused as missing. The defaults point at a closed port here, so a command that
    took them fails otherwise, and never reaches a server of the machine's."""
    env = {"PGHOST": "127.0.0.1", "PGPORT": "1"}
    done = run_wheelq(*command.split(), "--dsn", dsn, "--redis-url", redis_url, env=env)
    assert_one_line_error(done, 2, "--dsn", "required")


INIT_AT_ONCE = """
import sys
from wheelq.cli import main
import psycopg  # imported before the start signal: the processes start the SQL together
print("ready", flush=True)
sys.stdin.read(1)
sys.exit(main(["outbox", "init", "--dsn", sys.argv[1]]))
"""


def test_six_inits_at_once_on_an_empty_database_all_succeed(
    postgres: PostgresServer, request: pytest.FixtureRequest
) -> None:
    for attempt in range(4):  # a race may be missed once: each start is another chance
        name = f"init_at_once_{attempt}_{secrets.token_hex(4)}"
        dsn = postgres.create_database(name)
        request.addfinalizer(lambda name=name: postgres.drop_database(name))
        procs = [
            subprocess.Popen(
                [PYTHON, "-c", INIT_AT_ONCE, dsn],
                cwd=ROOT,
                env=clean_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        for proc in procs:  # every one imported and waiting
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("x")
            proc.stdin.flush()
        errors = [proc.communicate(timeout=120)[1] for proc in procs]
        assert [proc.returncode for proc in procs] == [0] * 6, [e for e in errors if e.strip()]
        with psycopg.connect(dsn) as conn:
            tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_tables").fetchall()]
            (ids,) = conn.execute(
                "SELECT count(*) FROM wheelq_outbox_meta WHERE key = 'source_id'"
            ).fetchone() or (0,)
        assert sorted(t for t in tables if t.startswith("wheelq_")) == sorted(outbox.TABLES)
        assert ids == 1


# --- the relay beside a scheduler node ------------------------------------------------------


def test_a_scheduler_with_a_relay_section_relays_the_outbox(
    dsn: str, topic: str, redis_url: str, redis_sync: redis.Redis, tmp_path: Path
) -> None:
    from tests.support.cli import start_wheelq, stop

    config = tmp_path / "wheelq.toml"
    config.write_text(f'[relay]\ndsn = "{dsn}"\nsweep_ms = 50\n')
    proc = start_wheelq("scheduler", "--config", str(config), "--redis-url", redis_url)
    try:
        ids = commit(dsn, topic, 20, delay=0.2)
        eventually_sync(
            lambda: fired_exactly(redis_sync, topic, ids), timeout_s=20, what="the jobs fired"
        )
    finally:
        _, err = stop(proc)
    assert proc.returncode == 0, err


# --- what the relay reports -----------------------------------------------------------------


async def test_the_relays_metrics_count_its_rows_and_what_it_relayed(
    dsn: str, topic: str, redis_url: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from wheelq.metrics import MetricsServer

    def scrape(port: int) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if not s.labels or (set(s.labels) == {"le"} and s.labels["le"] == "+Inf")
        }

    waiting = commit(dsn, topic, 30, delay=0.1)
    client = AsyncClient.from_url(redis_url)
    relay = outbox.Relay(client, dsn, RelaySettings(**FAST))
    async with MetricsServer(relay, port=0, host="127.0.0.1") as server:
        before = await asyncio.to_thread(scrape, server.port)
        assert before["wheelq_outbox_relayed_total"] == 0
        assert before["wheelq_outbox_relay_up"] == 0  # not started
        assert (await asyncio.to_thread(server.readiness))[0] is False  # /readyz: 503
        await relay.start()
        try:
            await until(lambda: relay.relayed == 30, timeout_s=10, what="the rows relayed")
            after = await asyncio.to_thread(scrape, server.port)
            assert await asyncio.to_thread(server.readiness) == (True, "ready")
        finally:
            await relay.stop()
            await client.aclose()
    assert after["wheelq_outbox_relayed_total"] == 30
    assert after["wheelq_outbox_relay_lag_seconds_bucket"] == 30  # +Inf: every row
    assert after["wheelq_outbox_relay_up"] == 1
    assert after["wheelq_outbox_rows"] == len(waiting)  # counted as its first step began


@pytest.mark.both_servers  # WAITAOF
async def test_a_relay_at_ack_persisted_deletes_rows_once_the_aof_has_them(
    dsn: str, topic: str, server_binary: ServerBinary
) -> None:
    with dedicated_server(server_binary, appendonly=True) as srv:
        client = AsyncClient.from_url(srv.url, ack_replicas=0)
        relay = outbox.Relay(client, dsn, RelaySettings(**FAST), ack="persisted")
        ids = commit(dsn, topic, 40)
        try:
            await relay.check()
        except AckUnsupportedError:  # no WAITAOF (Redis 7.0): said before the relay starts
            assert rows(dsn) == 40
            await client.aclose()
            return
        await relay.start()
        try:
            await until(lambda: relay.relayed == 40, timeout_s=10, what="the rows relayed")
            with redis.Redis.from_url(srv.url) as r:
                assert fired_exactly(r, topic, ids)
            assert rows(dsn) == 0 and relay.failures == 0
        finally:
            await relay.stop()
            await client.aclose()


async def test_a_busy_relay_still_counts_the_rows_waiting(
    dsn: str, topic: str, relay_on: Any
) -> None:
    commit(dsn, topic, 3000)
    relay = await relay_on(dsn, batch_size=10)  # full batches back to back for a while
    await until(lambda: relay.rows > 0, timeout_s=10, what="a count while taking full batches")
    assert relay.relayed < 3000  # still busy when it counted
    assert relay.status()["oldest_row_age_ms"] == relay.oldest_row_age_ms
