"""The application's own connection, whatever its driver: one statement run on it, inside
whatever transaction it is in (docs/guides/outbox.md, "Connections").

Supported: psycopg 3 (`Connection`, `AsyncConnection`), SQLAlchemy 2 (`Connection`,
`Session`, `AsyncConnection`, `AsyncSession`) and Django's connection (`django.db.connection`
or `connections[alias]`). Nothing here imports a driver at module level: each is looked up
by the type of the connection given, so the outbox needs none of the others installed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from wheelq.errors import (
    NotInTransactionError,
    OutboxError,
    OutboxNotInstalledError,
    UnsupportedConnectionError,
)

Params = Mapping[str, Any]

_UNDEFINED_TABLE = "42P01"
_NAMED = re.compile(r"%\((\w+)\)s")

INSTALL_HINT = (
    "run `wheelq outbox init --dsn DSN`, or apply the SQL `wheelq outbox init --sql` prints "
    "(Django: `manage.py migrate wheelq`)"
)

SYNC, ASYNC = "sync", "async"


def psycopg() -> ModuleType:
    """The psycopg package, which the relay and `install` connect with (the ``postgres``
    extra); `OutboxError` saying what to install when it is missing."""
    try:
        import psycopg  # noqa: PLC0415 (enqueue and once work on other drivers without it)
    except ModuleNotFoundError as exc:
        raise OutboxError(
            "the outbox relay needs psycopg 3: pip install 'wheelq[postgres]'"
        ) from exc
    return psycopg


def kind(conn: object) -> tuple[str, str]:
    """(driver, SYNC | ASYNC) of `conn`; `UnsupportedConnectionError` for anything else."""
    for cls in type(conn).__mro__:
        module, name = cls.__module__, cls.__qualname__
        if module.startswith("psycopg"):
            if name == "Connection":
                return "psycopg", SYNC
            if name == "AsyncConnection":
                return "psycopg", ASYNC
        elif module.startswith("sqlalchemy"):
            if name in ("Connection", "Session"):
                return "sqlalchemy", SYNC
            if name in ("AsyncConnection", "AsyncSession"):
                return "sqlalchemy", ASYNC
        elif module.startswith("django") and name in ("ConnectionProxy", "BaseDatabaseWrapper"):
            return "django", SYNC
    raise UnsupportedConnectionError(
        f"conn must be a psycopg 3 connection, a SQLAlchemy 2 Connection or Session (or their "
        f"async forms) or a Django connection, got {type(conn).__module__}."
        f"{type(conn).__qualname__}"
    )


def driver_of(conn: object, mode: str) -> str:
    """The driver of `conn`, which must be of `mode` (SYNC or ASYNC)."""
    driver, found = kind(conn)
    if found != mode:
        use = "aenqueue / aonce" if found == ASYNC else "enqueue / once"
        raise UnsupportedConnectionError(
            f"conn is an {'asynchronous' if found == ASYNC else 'synchronous'} connection: "
            f"use {use}"
        )
    return driver


def execute(conn: Any, driver: str, sql: str, params: Params) -> int:
    """Run `sql` (``%(name)s`` parameters) on `conn`; returns the rows it changed."""
    require_postgresql(conn, driver)
    try:
        if driver == "psycopg":
            return int(conn.execute(sql, params).rowcount)
        if driver == "sqlalchemy":
            from sqlalchemy import text  # noqa: PLC0415 (only when a SQLAlchemy connection is given)

            return int(conn.execute(text(_NAMED.sub(r":\1", sql)), params).rowcount)
        with conn.cursor() as cursor:  # django
            cursor.execute(sql, params)
            return int(cursor.rowcount)
    except Exception as exc:
        _raise_if_not_installed(exc)
        raise


async def aexecute(conn: Any, driver: str, sql: str, params: Params) -> int:
    """`execute` on an async connection."""
    require_postgresql(conn, driver)
    try:
        if driver == "psycopg":
            return int((await conn.execute(sql, params)).rowcount)
        from sqlalchemy import text  # noqa: PLC0415 (only when a SQLAlchemy connection is given)

        return int((await conn.execute(text(_NAMED.sub(r":\1", sql)), params)).rowcount)
    except Exception as exc:
        _raise_if_not_installed(exc)
        raise


def require_postgresql(conn: Any, driver: str) -> None:
    """`OutboxNotInstalledError` when `conn` is to another database than PostgreSQL (SQLite
    in a project's tests): the outbox's tables cannot exist there (`wheelq outbox init` and
    the Django migration make them on PostgreSQL only)."""
    if driver == "psycopg":
        return
    if driver == "django":
        name = conn.vendor
    else:
        engine = conn if hasattr(conn, "dialect") else conn.get_bind()  # a session's bind
        name = engine.dialect.name
    if name != "postgresql":
        raise OutboxNotInstalledError(
            f"the outbox's tables are PostgreSQL's, and this connection is to {name}, where "
            "they cannot be installed; in tests on another database, run tasks in eager mode "
            "(`with app.eager():`, docs/guides/testing.md), which runs a task enqueued with "
            "outbox= when its transaction commits and needs no tables"
        )


def require_transaction(conn: Any, driver: str, parameter: str) -> None:
    """`NotInTransactionError` when a statement on `conn` would commit on its own."""
    if driver == "django":
        if conn.get_autocommit() and not conn.in_atomic_block:
            raise NotInTransactionError(
                parameter,
                f"{parameter} is in autocommit mode outside a transaction: call it inside "
                "`with transaction.atomic():`, with the handler's own writes",
            )
        return
    raw = _psycopg_of(conn, driver)
    if raw is not None:
        _check_psycopg(raw, parameter)


async def arequire_transaction(conn: Any, driver: str, parameter: str) -> None:
    """`require_transaction` for an async connection."""
    raw: Any = conn
    if driver == "sqlalchemy":
        if type(conn).__name__ == "AsyncSession":
            conn = await conn.connection()
        raw = (await conn.get_raw_connection()).driver_connection
    if type(raw).__module__.startswith("psycopg"):
        _check_psycopg(raw, parameter)


def _psycopg_of(conn: Any, driver: str) -> Any:
    if driver == "psycopg":
        return conn
    if type(conn).__name__ == "Session":
        conn = conn.connection()
    raw = conn.connection.dbapi_connection  # sqlalchemy: the pooled driver connection
    return raw if type(raw).__module__.startswith("psycopg") else None


def _check_psycopg(raw: Any, parameter: str) -> None:
    statuses = psycopg().pq.TransactionStatus
    status = raw.info.transaction_status
    if status == statuses.INERROR:
        raise NotInTransactionError(
            parameter, f"{parameter}'s transaction has failed: roll it back before using it"
        )
    if raw.autocommit and status == statuses.IDLE:
        raise NotInTransactionError(
            parameter,
            f"{parameter} is in autocommit mode outside a transaction: call it inside "
            "`with conn.transaction():`, with the handler's own writes",
        )


def _raise_if_not_installed(exc: BaseException) -> None:
    """`OutboxNotInstalledError` when `exc` (or what a driver wrapper wraps) is a missing table."""
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if code == _UNDEFINED_TABLE:
            raise OutboxNotInstalledError(
                f"the outbox's tables are missing from this database: {INSTALL_HINT}"
            ) from exc
        seen = getattr(seen, "orig", None) or seen.__cause__
