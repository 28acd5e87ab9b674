"""The spool file on its own (SQLite, no Redis): rows kept in order across a reopen, due
times made absolute on the call's clock and replayed as the delay left, bounded heads, one
client per file, and the typed errors of a file that is not a spool."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.errors import SpoolError, SpoolLockedError
from wheelq.producer.operations import SpoolStats
from wheelq.producer.spool import Spool
from wheelq.store.enqueue import JobWrite

CALL_MS = 1_700_000_000_000


def write(job_id: str, due: DueSpec, payload: bytes = b"p", replace: bool = False) -> JobWrite:
    return JobWrite(job_id, due, replace, Envelope(payload, 1, 5, CALL_MS).pack())


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "spool.db"


@pytest.fixture
def spool(path: Path) -> Iterator[Spool]:
    opened = Spool(path)
    yield opened
    opened.close()


def test_rows_come_back_in_order_with_their_envelopes_and_survive_a_reopen(path: Path) -> None:
    first = Spool(path)
    first.append("a", [write("j1", DueSpec("at", 5)), write("j2", DueSpec("delay", 0))], 10)
    first.append("b", [write("j3", DueSpec("delay", 7), replace=True)], 20)
    spool_id = first.spool_id
    first.close()

    again = Spool(path)
    rows = again.head(10, 1 << 20)
    again.close()

    assert [(r.topic, r.job_id, r.replace) for r in rows] == [
        ("a", "j1", False),
        ("a", "j2", False),
        ("b", "j3", True),
    ]
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    assert rows[2].envelope == write("j3", DueSpec("delay", 7)).envelope
    assert again.spool_id == spool_id


def test_a_delay_is_stored_as_the_calls_time_plus_the_delay(spool: Spool) -> None:
    spool.append("t", [write("d", DueSpec("delay", 60_000)), write("a", DueSpec("at", 42))], 99)

    delayed, at = spool.head(10, 1 << 20)

    assert (delayed.mode, delayed.due_ms) == ("d", CALL_MS + 60_000)
    assert (at.mode, at.due_ms) == ("a", 42)


def test_a_replay_sends_the_delay_left_by_the_same_clock_never_less_than_0(spool: Spool) -> None:
    spool.append("t", [write("d", DueSpec("delay", 60_000)), write("a", DueSpec("at", 42))], 99)
    delayed, at = spool.head(10, 1 << 20)

    early = delayed.replay_write(spool.spool_id, CALL_MS + 45_000)
    late = delayed.replay_write(spool.spool_id, CALL_MS + 90_000)

    assert early.due == DueSpec("delay", 15_000)
    assert late.due == DueSpec("delay", 0)
    assert at.replay_write(spool.spool_id, CALL_MS).due == DueSpec("at", 42)
    assert early.token == late.token == f"{spool.spool_id}:{delayed.seq}"
    assert early.token != at.replay_write(spool.spool_id, 0).token


def test_head_is_bounded_by_count_and_by_bytes_but_takes_at_least_one(spool: Spool) -> None:
    spool.append("t", [write(f"j{n}", DueSpec("delay", 0), b"x" * 100) for n in range(5)], 1)

    assert [r.job_id for r in spool.head(3, 1 << 20)] == ["j0", "j1", "j2"]
    assert [r.job_id for r in spool.head(5, 250)] == ["j0", "j1"]
    assert [r.job_id for r in spool.head(5, 1)] == ["j0"]


def test_depth_and_age_follow_appends_and_settles(spool: Spool, path: Path) -> None:
    assert spool.stats(1000).depth == 0
    spool.append("t", [write("j1", DueSpec("delay", 0))], 1000)
    spool.append("t", [write("j2", DueSpec("delay", 0)), write("j3", DueSpec("delay", 0))], 1500)

    assert (spool.stats(1800).depth, spool.stats(1800).age_ms) == (3, 800)
    first, *rest = spool.head(10, 1 << 20)
    spool.settle([first], [], 1900)
    assert (spool.stats(2000).depth, spool.stats(2000).age_ms) == (2, 500)
    spool.settle([], [(rest[0], "ScriptError: wrong type")], 2000)
    spool.settle([rest[1]], [], 2000)
    assert spool.stats(2100) == SpoolStats(str(path), 0, 0, 1, None)


def test_rejected_rows_are_kept_with_their_error(spool: Spool, path: Path) -> None:
    spool.append("t", [write("j1", DueSpec("delay", 0))], 1000)
    spool.settle([], [(spool.head(1, 1 << 20)[0], "ScriptError: wrong type")], 1500)
    spool.close()

    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT job_id, error, rejected_ms FROM rejected").fetchall()
    db.close()
    assert rows == [("j1", "ScriptError: wrong type", 1500)]
    again = Spool(path)
    assert (again.rejected, again.depth) == (1, 0)
    again.close()


def test_a_second_client_on_the_file_in_this_process_is_refused(spool: Spool, path: Path) -> None:
    with pytest.raises(SpoolLockedError, match="in use by another client"):
        Spool(path)


def test_a_client_in_another_process_is_refused(spool: Spool, path: Path) -> None:
    code = (
        "from wheelq.producer.spool import Spool\n"
        "from wheelq.errors import SpoolLockedError\n"
        f"try:\n    Spool({str(path)!r})\nexcept SpoolLockedError:\n    print('locked')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert done.stdout.strip() == "locked", done.stderr


def test_the_lock_goes_with_close(spool: Spool, path: Path) -> None:
    spool.append("t", [write("j1", DueSpec("delay", 0))], 1000)
    spool.close()

    again = Spool(path)
    assert again.depth == 1
    again.close()


def test_a_file_that_is_not_sqlite_is_a_spool_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database " * 100)

    with pytest.raises(SpoolError, match="not a wheelq spool"):
        Spool(bad)


def test_a_spool_of_another_format_is_refused(path: Path) -> None:
    Spool(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '9' WHERE key = 'format'")
    db.close()

    with pytest.raises(SpoolError, match="format '9'"):
        Spool(path)


def test_the_file_is_in_wal_mode_with_full_sync(spool: Spool, path: Path) -> None:
    spool.append("t", [write("j1", DueSpec("delay", 0))], 1000)

    assert (path.parent / f"{path.name}-wal").exists()
    assert spool._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert spool._db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
