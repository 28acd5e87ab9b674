"""The relay: committed outbox rows placed in Redis, each exactly once, then deleted
(docs/architecture.md, "The outbox relay").

One step: in one PostgreSQL transaction, take up to ``batch_size`` rows (``FOR UPDATE SKIP
LOCKED``: relays running side by side take different rows; a row waits while an older row
of its job id is held by another relay, so an id's versions are placed in order) and delete
them; place them in Redis through the producer's replay, each write carrying the row's
token, which the shard records, and the step's deadline (``fence_ms`` after the step began,
on the Redis clock), past which the shard refuses it; commit only once Redis confirmed them
at the relay's ack level. A relay that dies between Redis and the commit leaves its rows
(the transaction rolls back, or PostgreSQL ends it after ``idle_in_transaction_ms``); the
relay that takes them next writes nothing twice, as the shard still holds their tokens.
Once a row's delete is committed its token is kept only ``2 * fence_ms`` more (set with the
next step's writes): past the deadline of any write of it that a frozen relay may still
send.

A step is woken by ``LISTEN wheelq_outbox`` (the table's trigger notifies at each commit
that inserted rows) and runs at least every ``sweep_ms``, so a lost notification costs at
most that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import urllib.parse
from typing import TYPE_CHECKING, Any

from wheelq.core import keys as k
from wheelq.core.histogram import Histogram
from wheelq.core.process import RoleInfo, role_info
from wheelq.core.settings import RelaySettings, RoleSettings
from wheelq.errors import AckUnreachedError, OutboxNotInstalledError, OutboxUnavailableError
from wheelq.outbox import connection
from wheelq.outbox.once import PRUNE
from wheelq.outbox.rows import taken
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.replay import FenceClock, Replayed, replay, warn_duplicates
from wheelq.runtime import crash, heartbeat
from wheelq.runtime.clock import LocalClock
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.service import PartStopped, Service
from wheelq.store import enqueue
from wheelq.store.call import Call
from wheelq.store.executor import drive_async

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow

    Conn = AsyncConnection[TupleRow]

log = logging.getLogger("wheelq.outbox.relay")

CHANNEL = "wheelq_outbox"
# The head: the oldest rows no other relay holds. A row of it is taken unless an older row of
# its job id is held by another relay (in flight, its delete not committed: those rows are the
# ones before the head's last that the head skipped); it stays locked, not deleted, until the
# commit, and the next step takes it once that relay committed: an id's versions are placed
# in the order of their seq, as by one relay. The last column: how many rows the head had.
TAKE = """
WITH head AS MATERIALIZED (
    SELECT seq, topic, job_id FROM wheelq_outbox ORDER BY seq LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), held AS MATERIALIZED (
    SELECT seq, topic, job_id FROM wheelq_outbox
    WHERE seq < (SELECT max(seq) FROM head) AND seq NOT IN (SELECT seq FROM head)
), taken AS (
    SELECT h.seq FROM head h WHERE NOT EXISTS (
        SELECT 1 FROM held o WHERE o.topic = h.topic AND o.job_id = h.job_id AND o.seq < h.seq
    )
)
DELETE FROM wheelq_outbox o USING taken WHERE o.seq = taken.seq
RETURNING o.seq, o.topic, o.job_id, o.mode, o.value_ms, o.replace, o.envelope, o.written_ms,
    o.order_key, (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint,
    (SELECT count(*) FROM head)
"""
REJECT = """
INSERT INTO wheelq_outbox_rejected
    (seq, topic, job_id, mode, value_ms, replace, order_key, envelope, written_ms, error,
     rejected_ms)
VALUES (%(seq)s, %(topic)s, %(job_id)s, %(mode)s, %(value_ms)s, %(replace)s, %(order_key)s,
    %(envelope)s, %(written_ms)s, %(error)s,
    (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint)
"""
BACKLOG = (
    "SELECT count(*), (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint "
    "- min(written_ms) FROM wheelq_outbox"
)
SOURCE_ID = "SELECT value FROM wheelq_outbox_meta WHERE key = 'source_id'"
BACKLOG_INTERVAL_MS = 5000  # how often the relay counts the table's rows (a gauge)
PRUNE_INTERVAL_MS = 60_000  # how often it deletes expired `once` records
PRUNE_BATCH = 10_000  # once records deleted per statement (a short lock)
# Keys `check` confirms the ack level on: their slots are at most 302 apart, so on a cluster
# every primary owning 303 slots in a row (any of up to 54 with even shares) has one
ACK_PROBES = 256
LAG_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 60_000, 600_000)


class Relay(Service):
    """Relays one PostgreSQL database's outbox into the Redis of `client`; several may run.

    `status()` adds ``rows`` and ``oldest_row_age_ms`` (counted every few seconds, busy or
    not), ``relayed``, ``duplicates`` and ``rejected`` (rows refused for good, by the relay's
    check of each row or by Redis, kept in ``wheelq_outbox_rejected``).
    """

    name = "relay"
    title = "outbox relay"

    def __init__(
        self,
        client: AsyncClient,
        dsn: str,
        settings: RelaySettings | None = None,
        *,
        ack: str | None = None,
    ) -> None:
        clock = LocalClock()
        super().__init__(clock, log)
        self.client = client
        self.dsn = dsn
        self.settings = settings or RelaySettings()
        self._wait = client.durability.wait_for(ack)  # checked now: a bad level fails here
        self._fences = FenceClock(self.settings.fence_ms)
        self._conn: Conn | None = None
        self._listener: Conn | None = None
        self._listening: asyncio.Task[None] | None = None
        self._source_id = ""
        self._forget: dict[k.ShardKeys, list[str]] = {}
        self._backlog_at_ms = self._pruned_at_ms = -(10**15)
        self.rows = 0
        self.oldest_row_age_ms = 0
        self.relayed = 0
        self.duplicates = 0
        self.rejected = 0
        self.lag = Histogram(LAG_BOUNDS_MS)  # ms from a row's INSERT to its step taking it
        self._beating: heartbeat.Beating | None = None
        self._source_name = ""

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "rows": self.rows,
            "oldest_row_age_ms": self.oldest_row_age_ms,
            "relayed": self.relayed,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
        }

    async def check(self) -> None:
        """Connect and read the table's identity now, and try the ack level on Redis:
        `OutboxUnavailableError` (the DSN), `OutboxNotInstalledError` (the tables),
        `AckUnsupportedError` or `AckUnreachedError` (too few replicas confirm), for a
        command to report before it starts."""
        await self._connect()
        wait = self._wait
        if wait is None:
            return
        # A ZADD XX of nothing, confirmed at the level, on every node that owns a probe key
        probes = [
            enqueue.settle_replayed(k.ShardKeys("wheelq-ack-probe", shard), ["-"], 0)
            for shard in range(ACK_PROBES)
        ]
        try:
            acked = await self.client.executor.run_acked(probes, wait)
            if acked.short:
                level = "persisted" if wait.aof else "replicated"
                fewest = min(acked.short.values())
                raise AckUnreachedError(level, wait.replicas, fewest, wait.timeout_ms)
        except BaseException:
            await self._disconnect()
            raise

    async def step(self) -> float | None:
        conn = await self._connect()
        now = self.clock.now_ms()
        if now - self._backlog_at_ms >= BACKLOG_INTERVAL_MS:  # busy or failing too
            await self._count_backlog(conn)
            self._backlog_at_ms = now
        retention = self.settings.done_retention_ms
        if retention and now - self._pruned_at_ms >= PRUNE_INTERVAL_MS:
            await self._prune(conn, retention)
            self._pruned_at_ms = now
        executor = self.client.executor
        await drive_async(self._fences.sync(), executor.run)
        head = await self._relay_batch(conn)
        return 0 if head >= self.settings.batch_size else self.settings.sweep_ms / 1000

    async def start(self) -> None:
        await super().start()
        if self._beating is None:  # in the process list, as the roles are
            self._source_name = redacted(self.dsn)
            beat = RoleSettings()
            self._beating = await heartbeat.join(
                self.client.executor, self.process_role, beat.process_beat_ms, beat.process_ttl_ms
            )

    def process_role(self) -> RoleInfo:
        """The relay in its process's heartbeat record: rows relayed, and rows refused."""
        return role_info("relay", self._source_name, handled=self.relayed, failed=self.rejected)

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        beating, self._beating = self._beating, None
        if beating is not None:
            await beating.leave(budget)
        stopped = await super().stop(budget)
        await self._disconnect()
        return stopped

    async def _relay_batch(self, conn: Conn) -> int:
        """One step's batch; returns how many rows its head had (taken or left waiting)."""
        async with conn.transaction():
            fence = self._fences.fence()  # before the rows are ours: see Fence
            found = await (await conn.execute(TAKE, {"limit": self.settings.batch_size})).fetchall()
            if not found and not self._forget:
                return 0
            rows, refused, now_pg, head = taken(found)  # refused: each alone, never sent
            producer = self.client.producer
            op = replay(
                producer,
                rows,
                self._source_id,
                now_pg,
                self.settings.record_ms,
                self._forget,
                fence,
            )
            out = await drive_async(op, self._send)
            crash.point("relay.after_place")  # in Redis, not yet deleted: the tokens' case
            if out.failure is not None:
                raise out.failure  # rolled back: every row stays, to retry (tokens: no twice)
            out.rejected[:0] = refused
            if out.rejected:
                await self._reject(conn, out)
        self._forget = out.confirmed  # the rows are gone: their tokens go with the next step
        self.relayed += len(out.done)
        self.duplicates += len(out.duplicates)
        self.rejected += len(out.rejected)
        self.lag.observe_all(max(0, now_pg - row.written_ms) for row in out.done)
        warn_duplicates("outbox jobs", out.duplicates)
        for row, error in out.rejected:
            log.error(
                "outbox job %r of %r refused for good (kept in wheelq_outbox_rejected): %s",
                row.job_id,
                row.topic,
                error,
            )
        return head

    async def _send(self, calls: list[Call[Any]]) -> list[Any]:
        executor = self.client.executor
        if self._wait is None:
            return await executor.run(calls, return_exceptions=True)
        try:
            acked = await executor.run_acked(calls, self._wait)
        except Exception as exc:  # the whole round failed: every call's reply says so
            return [exc] * len(calls)
        short = acked.short
        return [
            OutboxUnavailableError(f"not confirmed by {self._wait.replicas} replicas")
            if i in short
            else reply
            for i, reply in enumerate(acked)
        ]

    async def _reject(self, conn: Conn, out: Replayed) -> None:
        async with conn.cursor() as cursor:
            await cursor.executemany(
                REJECT,
                [
                    {
                        "seq": row.seq,
                        "topic": row.topic,
                        "job_id": row.job_id,
                        "mode": row.mode,
                        "value_ms": row.due_ms - row.written_ms if row.mode == "d" else row.due_ms,
                        "replace": row.replace,
                        "order_key": row.order_key,
                        "envelope": row.envelope,
                        "written_ms": row.written_ms,
                        "error": error,
                    }
                    for row, error in out.rejected
                ],
            )

    async def _count_backlog(self, conn: Conn) -> None:
        async with conn.transaction():
            found = await (await conn.execute(BACKLOG)).fetchone()
        assert found is not None
        self.rows, age = int(found[0]), found[1]
        self.oldest_row_age_ms = 0 if age is None else max(0, int(age))

    async def _prune(self, conn: Conn, retention_ms: int) -> None:
        while True:
            async with conn.transaction():
                params = {"retention_ms": retention_ms, "limit": PRUNE_BATCH}
                cursor = await conn.execute(PRUNE, params)
            if cursor.rowcount < PRUNE_BATCH or self.stopping:
                return

    async def _connect(self) -> Conn:
        if self._listening is not None and self._listening.done():
            await self._disconnect()  # the listener's connection was lost: both anew
        if self._conn is not None and not self._conn.closed:
            return self._conn
        await self._disconnect()
        pg = connection.psycopg()
        timeout_s = max(1, self.settings.connect_timeout_ms // 1000)
        try:
            conn: Conn = await pg.AsyncConnection.connect(self.dsn, connect_timeout=timeout_s)
            listener: Conn = await pg.AsyncConnection.connect(
                self.dsn, connect_timeout=timeout_s, autocommit=True
            )
        except (pg.OperationalError, pg.ProgrammingError) as exc:  # Programming: a bad DSN
            raise unreachable("the relay cannot connect to", self.dsn, exc) from exc
        self._conn, self._listener = conn, listener
        try:
            idle = int(self.settings.idle_in_transaction_ms)
            await conn.execute(f"SET idle_in_transaction_session_timeout = {idle}")
            await conn.commit()
            try:
                found = await (await conn.execute(SOURCE_ID)).fetchone()
            except pg.errors.UndefinedTable as exc:
                raise OutboxNotInstalledError(
                    f"the outbox's tables are missing from {redacted(self.dsn)}: "
                    f"{connection.INSTALL_HINT}"
                ) from exc
            finally:
                await conn.rollback()
            if found is None:
                raise OutboxNotInstalledError(
                    f"the outbox's meta table has no source_id: {connection.INSTALL_HINT}"
                )
            self._source_id = str(found[0])
            await listener.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            await self._disconnect()
            raise
        self._listening = asyncio.create_task(self._listen(listener), name="wheelq-relay-listen")
        self.wake()  # rows committed while no relay listened
        return conn

    async def _listen(self, listener: Conn) -> None:
        with contextlib.suppress(connection.psycopg().Error):
            async for _ in listener.notifies():
                self.wake()

    async def _disconnect(self) -> None:
        task, self._listening = self._listening, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for conn in (self._conn, self._listener):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        self._conn = self._listener = None


def unreachable(what: str, dsn: str, exc: Exception) -> OutboxUnavailableError:
    """`OutboxUnavailableError` for a connection to `dsn` that failed with `exc`: one line,
    the DSN without its password, and the driver's reason without it either."""
    said = scrubbed(str(exc), dsn)
    if isinstance(exc, connection.psycopg().ProgrammingError):  # libpq could not parse it
        said = f"the DSN is malformed: {said}"
    return OutboxUnavailableError(f"{what} PostgreSQL ({redacted(dsn)}): {said}")


_URI_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^/\s]*)@")
_KEY_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'?|\S+)")


def scrubbed(text: str, dsn: str) -> str:
    """`text` (a driver's message about `dsn`) on one line, at most 300 characters, with the
    DSN and its password (as written, and decoded) replaced, parsable or not."""
    secrets = {m["secret"] for m in _URI_PASSWORD.finditer(dsn)}
    secrets |= {m["secret"].strip("'") for m in _KEY_PASSWORD.finditer(dsn)}
    secrets |= {urllib.parse.unquote(secret) for secret in secrets}
    text = text.replace(dsn, "<the DSN>")
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _KEY_PASSWORD.sub(r"\g<head>***", _URI_PASSWORD.sub(r"\g<head>***@", text))
    return " ".join(text.split())[:300]


def redacted(dsn: str) -> str:
    """`dsn` without its password."""
    pg = connection.psycopg()
    try:
        info = pg.conninfo.conninfo_to_dict(dsn)
    except pg.ProgrammingError:
        return "an unparsable DSN"
    info.pop("password", None)
    return str(pg.conninfo.make_conninfo(**{k_: str(v) for k_, v in info.items()}))
