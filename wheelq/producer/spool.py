"""The producer spool: enqueues Redis could not take, kept in a local SQLite file until the
drain (`wheelq.producer.drain`) has replayed them.

One file serves one client at a time: it is opened in SQLite's exclusive locking mode, so a
second client on it (in this process or another) gets `SpoolLockedError`, and the lock goes
with the process that held it, even after kill -9. The journal is a WAL with
``synchronous=FULL``: each append is one transaction, fsynced before the client returns the
ids, so an id the client returned survives a kill -9 of the producer and, as far as SQLite
promises, a power cut.

Rows keep the msgpack envelope wheelq built (no pickle) and when the job is due. A relative
delay is stored as an absolute time on the producer's wall clock (the call's time, which is
the envelope's ``enqueued_ms``, plus the delay) and replayed as the delay that is left by
that same clock; see `SpooledJob.replay_write`.

```
jobs      seq (replay order), topic, job_id, mode ('d' | 'a'), due_ms, replace, envelope,
          written_ms (wall clock, for the spool's age), token ('' or the replay token of a
          direct call's write whose reply was lost: "CALL:n", see `SpooledJob.token`)
rejected  the same, plus error and rejected_ms: rows Redis refused for good (kept, never
          replayed: a person decides)
meta      format ('1'), spool_id (random: each row's replay token is spool_id:seq)
```
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.errors import SpoolError, SpoolLockedError
from wheelq.store.job_writes import JobWrite

FORMAT = "1"
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


@dataclass(frozen=True, slots=True)
class SpoolStats:
    """What `Client.spool_stats()` (and `TopicStats.spool`) report about a client's spool."""

    path: str
    depth: int
    """Jobs waiting in the spool to be replayed into Redis."""
    age_ms: int
    """Ms since the oldest waiting job was spooled (producer's wall clock); 0 when empty."""
    rejected: int = 0
    """Jobs Redis refused for good when replayed (a key of the wrong type, ...): kept in the
    file's ``rejected`` table with the error, and logged; never replayed."""
    last_error: str | None = None
    """Why the drain's last try failed, while it keeps failing; None once one succeeds."""


@dataclass(frozen=True, slots=True)
class SpooledJob:
    """One row of the spool."""

    seq: int
    topic: str
    job_id: str
    mode: str
    due_ms: int
    replace: bool
    envelope: bytes
    written_ms: int
    given_token: str = ""
    """The token the write had when it was spooled ('' for most rows)."""

    def token(self, spool_id: str) -> str:
        """The row's replay token, the same each try: the one it was spooled with, when a
        direct call sent it and its reply was lost (``CALL:n``: the replay is skipped if
        that call was applied, see ``enqueue.lua``), else ``spool_id:seq``, unique to this
        spool file and row."""
        return self.given_token or f"{spool_id}:{self.seq}"

    def replay_write(self, spool_id: str, now_ms: int) -> JobWrite:
        """The write that replays this row at `now_ms` (producer's wall clock), with its token.

        A delayed job is sent as the delay left (never negative): the script adds it to
        the Redis clock, so the skew between the two clocks cancels out and the job fires
        when it was asked to, measured from the call, however long Redis was away.
        """
        due = (
            DueSpec("delay", max(0, self.due_ms - now_ms))
            if self.mode == "d"
            else DueSpec("at", self.due_ms)
        )
        return JobWrite(self.job_id, due, self.replace, self.envelope, self.token(spool_id))


class Spool:
    """A spool file, opened and locked; thread-safe (one lock around one connection).

    Args:
        path: The SQLite file; made, with its directory's parent existing, when missing.

    Raises:
        SpoolLockedError: Another client has the file open.
        SpoolError: It is not a wheelq spool, or SQLite cannot open it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
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

    def head(self, limit: int, max_bytes: int) -> list[SpooledJob]:
        """The oldest rows, in order: at most `limit`, and no more envelope bytes than
        `max_bytes` (but at least one row)."""
        with self._lock:
            found = self._db.execute(_HEAD, (limit,)).fetchall()
        out: list[SpooledJob] = []
        size = 0
        for seq, topic, job_id, mode, due_ms, replace, envelope, written_ms, token in found:
            size += len(envelope)
            if out and size > max_bytes:
                break
            out.append(
                SpooledJob(
                    seq, topic, job_id, mode, due_ms, bool(replace), envelope, written_ms, token
                )
            )
        return out

    def settle(
        self, done: Sequence[SpooledJob], rejected: Sequence[tuple[SpooledJob, str]], now_ms: int
    ) -> None:
        """In one transaction: delete rows Redis confirmed, move rows it refused for good."""
        if not done and not rejected:
            return
        with self._lock:
            self._settle(done, rejected, now_ms)
            self.depth, self.oldest_ms = self._count()
            self.rejected += len(rejected)

    def _settle(
        self, done: Sequence[SpooledJob], rejected: Sequence[tuple[SpooledJob, str]], now_ms: int
    ) -> None:
        with self._transaction():
            self._db.executemany(_REJECT, [(error, now_ms, job.seq) for job, error in rejected])
            gone = [(job.seq,) for job in done] + [(job.seq,) for job, _ in rejected]
            self._db.executemany("DELETE FROM jobs WHERE seq = ?", gone)

    def stats(self, now_ms: int, last_error: str | None = None) -> SpoolStats:
        """Depth and age as of `now_ms` (producer's wall clock)."""
        with self._lock:
            depth, oldest = self.depth, self.oldest_ms
        age = 0 if not depth or oldest is None else max(0, now_ms - oldest)
        return SpoolStats(self.path, depth, age, self.rejected, last_error)

    def close(self) -> None:
        """Close the file (what is left stays in it); releases the lock."""
        with self._lock:
            self._db.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """BEGIN ... COMMIT (ROLLBACK on an error), SQLite errors raised as `SpoolError`."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            if exc is None:
                self._db.execute("COMMIT")
                return
        except sqlite3.Error as failed:
            exc = failed
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise SpoolError(f"spool write failed (nothing was written): {exc}") from exc
