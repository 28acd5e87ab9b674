"""`on_commit`: run something once the application's transaction commits, never if it rolls
back, on whichever driver the connection is (`App.eager`'s outbox; docs/guides/outbox.md,
"Eager mode").

Each driver's own hook, where it has one that fires after the database committed:

- Django: ``transaction.on_commit`` on the connection's alias (at once outside an atomic
  block, as Django does; a rollback to a savepoint drops what was added inside it).
- SQLAlchemy `Session` and `AsyncSession`: the session's ``after_commit`` event; its
  ``after_soft_rollback`` drops what was added in the transaction (or savepoint) rolled back.
- psycopg 3: no commit hook. In autocommit mode outside a transaction an outbox row would
  commit at once, so it runs at once; inside a transaction `EagerModeError` says so.
- SQLAlchemy `Connection` and `AsyncConnection`: their ``commit`` event fires before the
  database commits (a failed COMMIT would have run it), so `EagerModeError` says to pass a
  `Session` instead.

Nothing is run, and nothing is dropped, silently: every other case raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wheelq.errors import EagerModeError
from wheelq.outbox import connection

Run = Callable[[], None]

_PENDING = "wheelq.on_commit"
"""The key of a SQLAlchemy session's ``info`` holding what waits for its commit."""


def on_commit(conn: Any, run: Run) -> None:
    """Call `run` once `conn`'s transaction commits (never if it rolls back).

    Raises:
        EagerModeError: `conn` has no hook that fires after a commit (psycopg inside a
            transaction, a SQLAlchemy `Connection`).
        UnsupportedConnectionError: `conn` is no sync connection the outbox knows.
    """
    driver = connection.driver_of(conn, connection.SYNC)
    if driver == "django":
        from django.db import transaction  # noqa: PLC0415 (only for a Django connection)

        transaction.on_commit(run, using=conn.alias)
    elif driver == "psycopg":
        _psycopg_now(conn, run)
    else:
        session = _session(conn)
        session.connection()  # begin its transaction, as the outbox's INSERT would
        _after_commit(session, run)


async def aon_commit(conn: Any, run: Run) -> None:
    """`on_commit` for an async connection (psycopg's `AsyncConnection`, SQLAlchemy's
    `AsyncSession`); `run` is called from the commit, on the connection's event loop."""
    driver = connection.driver_of(conn, connection.ASYNC)
    if driver == "psycopg":
        _psycopg_now(conn, run)
        return
    session = _session(conn)
    await conn.connection()  # begin its transaction, as the outbox's INSERT would
    _after_commit(session.sync_session, run)


def _session(conn: Any) -> Any:
    """`conn` when it is a SQLAlchemy (async) session; `EagerModeError` for a connection."""
    if any(cls.__name__ in ("Session", "AsyncSession") for cls in type(conn).__mro__):
        return conn
    raise EagerModeError(
        f"eager mode runs a task enqueued with outbox= once its transaction commits, and a "
        f"SQLAlchemy {type(conn).__name__}'s commit event fires before the database commits: "
        "pass a Session (or AsyncSession) as outbox= in eager mode"
    )


def _psycopg_now(conn: Any, run: Run) -> None:
    """Run at once on a psycopg connection outside a transaction (an outbox row would commit
    at once); `EagerModeError` inside one: psycopg has no hook after a commit."""
    idle = connection.psycopg().pq.TransactionStatus.IDLE
    if conn.autocommit and conn.info.transaction_status == idle:
        run()
        return
    raise EagerModeError(
        "eager mode runs a task enqueued with outbox= once its transaction commits, and "
        "psycopg has no hook after a commit: in eager mode enqueue on a psycopg connection "
        "in autocommit mode outside a transaction, or pass a SQLAlchemy Session or Django's "
        "connection"
    )


def _after_commit(session: Any, run: Run) -> None:
    """Add `run` to what `session`'s commit runs, under its innermost transaction."""
    from sqlalchemy import event  # noqa: PLC0415 (only for a SQLAlchemy session)

    pending: list[tuple[Any, Run]] | None = session.info.get(_PENDING)
    if pending is None:
        pending = session.info[_PENDING] = []
        event.listen(session, "after_commit", _committed)
        event.listen(session, "after_soft_rollback", _rolled_back)
    pending.append((session.get_nested_transaction() or session.get_transaction(), run))


def _committed(session: Any) -> None:
    """The outermost transaction committed: run what waited for it, in order (the event
    fires for a savepoint's release too, while the savepoint is still the session's)."""
    if session.get_nested_transaction() is not None:
        return
    pending = session.info.get(_PENDING, [])
    waiting, pending[:] = list(pending), []
    for _, run in waiting:
        run()


def _rolled_back(session: Any, previous_transaction: Any) -> None:
    """Drop what was added inside the transaction (or savepoint) rolled back."""
    pending = session.info.get(_PENDING, [])
    pending[:] = [(t, run) for t, run in pending if not _inside(t, previous_transaction)]


def _inside(transaction: Any, outer: Any) -> bool:
    while transaction is not None:
        if transaction is outer:
            return True
        transaction = transaction.parent
    return False
