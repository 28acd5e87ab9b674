"""The producer spool: enqueues Redis could not take, kept in a local SQLite file and
replayed into Redis in order, exactly once (docs/architecture.md, "The producer spool and
breaker"). `Spool` is the file, `Spooler` routes enqueues, `Drain` replays, `DrainService`
runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from wheelq.core import keys as k
from wheelq.core.clock import Clock
from wheelq.core.job import Envelope
from wheelq.errors import (
    RedisUnavailableError,
    SpoolError,
    SpoolLockedError,
)
from wheelq.producer.operations import Op, Place, Producer, SpoolStats
from wheelq.producer.replay import FenceClock, HeldJob, replay, warn_duplicates
from wheelq.runtime.breaker import Breaker
from wheelq.runtime.clock import LocalClock, WallClock
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.service import Service
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite
from wheelq.store.executor import drive_async

log = logging.getLogger("wheelq.producer.spool")
T = TypeVar("T")
Path = str | os.PathLike[str]
Send = Callable[[list[Call[Any]]], Awaitable[list[Any]]]  # return_exceptions=True

STEP_BYTES = 4 * 1024 * 1024  # envelope bytes per drain step (one row more if larger)
FENCE_MS = 15_000  # a step's writes reaching Redis this late are refused (`replay.Fence`)
CLOSE_WAIT_S = 5.0  # how long Client.close() waits for the drain's thread

FORMAT = "1"
# mode: 'd' (due_ms = the envelope's enqueued_ms + delay) or 'a' (absolute); rejected: rows
# Redis refused for good, kept for a person to decide; each row's replay token: `HeldJob.token`
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, job_id TEXT NOT NULL,
    mode TEXT NOT NULL, due_ms INTEGER NOT NULL, replace INTEGER NOT NULL,
    envelope BLOB NOT NULL, written_ms INTEGER NOT NULL, token TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS rejected (
    seq, topic, job_id, mode, due_ms, replace, envelope, written_ms, error, rejected_ms);
"""
_INSERT = (
    "INSERT INTO jobs (topic, job_id, mode, due_ms, replace, envelope, written_ms, token) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_HEAD = (
    "SELECT seq, topic, job_id, mode, due_ms, replace, envelope, written_ms, token FROM jobs "
    "ORDER BY seq LIMIT ?"
)
_REJECT = (
    "INSERT INTO rejected SELECT seq, topic, job_id, mode, due_ms, replace, envelope, "
    "written_ms, ?, ? FROM jobs WHERE seq = ?"
)


class Spool:
    """A spool file, opened and exclusively locked (made when missing); thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise SpoolError(f"spool {self.path!r} cannot be opened: {exc}") from exc
        try:
            self.spool_id = self._setup()
        except BaseException:
            self._db.close()
            raise
        self.depth, self.oldest_ms = self._count()
        (self.rejected,) = self._db.execute("SELECT COUNT(*) FROM rejected").fetchone()

    def _setup(self) -> str:
        try:
            self._db.execute("PRAGMA locking_mode=EXCLUSIVE")
            self._db.execute("BEGIN EXCLUSIVE")  # takes the lock now, held until close
            self._db.execute("COMMIT")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
            if "token" not in columns:  # a file an older wheelq made
                self._db.execute("ALTER TABLE jobs ADD COLUMN token TEXT NOT NULL DEFAULT ''")
            new = secrets.token_hex(8)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('spool_id', ?)", (new,))
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise SpoolLockedError(
                    f"spool {self.path!r} is in use by another client (one client per file)"
                ) from exc
            raise SpoolError(f"spool {self.path!r} cannot be used: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise SpoolError(f"spool {self.path!r} is not a wheelq spool: {exc}") from exc
        if meta.get("format") != FORMAT:
            raise SpoolError(
                f"spool {self.path!r} has format {meta.get('format')!r}; this wheelq reads {FORMAT}"
            )
        return str(meta["spool_id"])

    def _count(self) -> tuple[int, int | None]:
        depth, oldest = self._db.execute(
            "SELECT COUNT(*), (SELECT written_ms FROM jobs ORDER BY seq LIMIT 1) FROM jobs"
        ).fetchone()
        return int(depth), oldest

    def append(self, topic: str, writes: Sequence[JobWrite], now_ms: int) -> None:
        """Store validated writes, in order, in one fsynced transaction."""
        rows = []
        for w in writes:
            due_ms = w.due.value_ms
            if w.due.kind == "delay":
                due_ms += Envelope.unpack(w.envelope).enqueued_ms  # the call's wall-clock ms
            mode = "d" if w.due.kind == "delay" else "a"
            rows.append((topic, w.id, mode, due_ms, int(w.replace), w.envelope, now_ms, w.token))
        with self._lock:
            with self._transaction():
                self._db.executemany(_INSERT, rows)
            if self.depth == 0:
                self.oldest_ms = now_ms
            self.depth += len(rows)

    def head(self, limit: int, max_bytes: int) -> list[HeldJob]:
        """The oldest rows: at most `limit`, and `max_bytes` of envelopes (at least one row)."""
        with self._lock:
            found = self._db.execute(_HEAD, (limit,)).fetchall()
        out: list[HeldJob] = []
        size = 0
        for seq, topic, job_id, mode, due_ms, replace, envelope, written_ms, token in found:
            size += len(envelope)
            if out and size > max_bytes:
                break
            out.append(
                HeldJob(
                    seq, topic, job_id, mode, due_ms, bool(replace), envelope, written_ms, token
                )
            )
        return out

    def settle(
        self, done: Sequence[HeldJob], rejected: Sequence[tuple[HeldJob, str]], now_ms: int
    ) -> None:
        """In one transaction: delete rows Redis confirmed, move rows it refused for good."""
        if not done and not rejected:
            return
        with self._lock:
            self._settle(done, rejected, now_ms)
            self.depth, self.oldest_ms = self._count()
            self.rejected += len(rejected)

    def _settle(
        self, done: Sequence[HeldJob], rejected: Sequence[tuple[HeldJob, str]], now_ms: int
    ) -> None:
        with self._transaction():
            self._db.executemany(_REJECT, [(error, now_ms, job.seq) for job, error in rejected])
            gone = [(job.seq,) for job in done] + [(job.seq,) for job, _ in rejected]
            self._db.executemany("DELETE FROM jobs WHERE seq = ?", gone)

    def stats(self, now_ms: int, last_error: str | None = None) -> SpoolStats:
        with self._lock:
            depth, oldest = self.depth, self.oldest_ms
        age = 0 if not depth or oldest is None else max(0, now_ms - oldest)
        return SpoolStats(self.path, depth, age, self.rejected, last_error)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise SpoolError(f"spool write failed (nothing was written): {exc}") from exc
            raise


class Spooler:
    """Routes a client's enqueues to Redis, or to the spool while it holds jobs or Redis
    cannot take them (`wheelq.producer.operations.Spooling`)."""

    def __init__(self, spool: Spool, clock: Clock, wake: Callable[[], None]) -> None:
        self.spool = spool
        self._clock = clock
        self._wake = wake

    def write(self, topic: str, writes: list[JobWrite], place: Place) -> Op[list[str]]:
        ids = [w.id for w in writes]
        if self.spool.depth:
            self._spool(topic, writes, None)
            return ids
        confirmed: list[str] = []
        try:
            return (yield from place(topic, writes, confirmed))
        except RedisUnavailableError as exc:
            done = set(confirmed)
            self._spool(topic, [w for w in writes if w.id not in done], exc)
            return ids

    def _spool(
        self, topic: str, writes: Sequence[JobWrite], why: RedisUnavailableError | None
    ) -> None:
        was_empty = not self.spool.depth
        self.spool.append(topic, writes, self._clock.now_ms())
        if was_empty and why is not None:
            log.warning("%s; spooling enqueues to %s until it is back", why, self.spool.path)
        self._wake()


class Drain:
    """The replay, one bounded sans-I/O step at a time; rows go once Redis confirmed them,
    and the row tokens make a repeated step write nothing twice."""

    def __init__(self, spool: Spool, producer: Producer, breaker: Breaker, clock: Clock) -> None:
        self.spool = spool
        self._producer = producer
        self.breaker = breaker
        self._clock = clock
        self._forget: dict[k.ShardKeys, list[str]] = {}
        self._fences = FenceClock(FENCE_MS)
        self.last_error: str | None = None

    def pending(self) -> bool:
        return bool(self.spool.depth or self._forget)

    def stats(self) -> SpoolStats:
        return self.spool.stats(self._clock.now_ms(), self.last_error)

    def step(self) -> Op[int]:
        """Replay the oldest rows; returns how many left the spool."""
        settings = self._producer.settings
        yield from self._fences.sync()
        fence = self._fences.fence()  # before the rows are read
        rows = self.spool.head(settings.batch_size, STEP_BYTES)
        now = self._clock.now_ms()
        spool_id = self.spool.spool_id
        out = yield from replay(
            self._producer, rows, spool_id, now, settings.spool_record_ms, self._forget, fence
        )
        self._forget = {}  # gone or not: the record forgets them after spool_record_ms anyway
        self.spool.settle(out.done, out.rejected, now)
        self._forget = out.confirmed  # only once their rows are gone from the file
        warn_duplicates("spooled jobs", out.duplicates)
        for row, error in out.rejected:
            log.error("spooled job %r of %r refused for good: %s", row.job_id, row.topic, error)
        if out.failure is not None:
            raise out.failure
        return len(out.done) + len(out.rejected)


class DrainService(Service):
    """The drain's loop: steps while the spool has rows, else waits for `wake()`."""

    name = "spool_drain"
    title = "spool drain"

    def __init__(self, drain: Drain, send: Send) -> None:
        super().__init__(LocalClock(), log)
        self.drain = drain
        self._send = send
        self.begun = False
        self.closing = False  # set before the client cuts its connections: no step after

    async def start(self) -> None:
        self.begun = True
        await super().start()

    async def step(self) -> float | None:
        if self.closing or not self.drain.pending():
            return None
        await drive_async(self.drain.step(), self._send)
        drain = self.drain
        if drain.last_error is not None and not drain.spool.depth:
            log.info("spool %s drained: every spooled job is in redis", drain.spool.path)
        drain.last_error = None
        drain.breaker.report(False, None)
        return 0

    def failed(self, exc: BaseException) -> float:
        if self.closing or self.stopping:
            return 0.0  # the close cut the step short: what is left stays in the file
        self.drain.last_error = f"{type(exc).__name__}: {exc}"
        self.drain.breaker.report(False, exc)
        return super().failed(exc)

    async def close(self) -> None:
        self.closing = True
        await self.stop(StopBudget(0))
        self.drain.spool.close()


class DrainThread:
    """`Client`'s drain: its `DrainService` on an event loop in a daemon thread."""

    def __init__(self, service: DrainService) -> None:
        self.service = service
        self.drain = service.drain
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._main, name="wheelq-spool-drain", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._run())
        finally:
            self._loop.close()

    async def _run(self) -> None:
        await self.service.start()
        await self._stop.wait()
        await self.service.stop(StopBudget(0))

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the client is closed
            self._loop.call_soon_threadsafe(self.service.wake)

    def close(self, disconnect: Callable[[], None]) -> None:
        """Stop the loop and close the spool; `disconnect` ends a step waiting on Redis."""
        self.service.closing = True
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._stop.set)
        disconnect()
        self._thread.join(CLOSE_WAIT_S)
        disconnect()
        self.service.drain.spool.close()


R = TypeVar("R", DrainThread, DrainService)


def attach_spool(
    producer: Producer, breaker: Breaker, path: Path | None, runner: Callable[[Drain], R]
) -> R | None:
    """Open the spool at `path`, route `producer`'s enqueues through it; returns the runner."""
    if path is None:
        return None
    clock = WallClock()
    spool = Spool(path)
    made = runner(Drain(spool, producer, breaker, clock))
    producer.spooler = Spooler(spool, clock, made.wake)
    return made
