"""The outbox's tables: the SQL (one file, ``schema.sql``, for every way of applying it)
and `install`, which applies it to a database (docs/guides/outbox.md).
"""

from __future__ import annotations

from importlib import resources

from wheelq.errors import OutboxError
from wheelq.outbox.connection import psycopg
from wheelq.outbox.relay import redacted, scrubbed, unreachable

TABLES = ("wheelq_outbox", "wheelq_outbox_done", "wheelq_outbox_meta", "wheelq_outbox_rejected")


def schema_sql() -> str:
    """The SQL that creates the outbox's tables and trigger; running it again changes nothing."""
    return resources.files("wheelq.outbox").joinpath("schema.sql").read_text(encoding="utf-8")


def install(dsn: str, *, connect_timeout_s: int = 5) -> None:
    """Apply `schema_sql()` to the database of `dsn`, in one transaction (several at once,
    as pods starting together, take turns: the SQL's first statement is a lock).

    Raises:
        OutboxUnavailableError: The database cannot be reached (the DSN, the server).
        OutboxError: It refused the SQL (a missing privilege, say); nothing was created.
    """
    pg = psycopg()
    try:
        conn = pg.connect(dsn, connect_timeout=connect_timeout_s)
    except (pg.OperationalError, pg.ProgrammingError) as exc:  # Programming: a bad DSN
        raise unreachable("cannot connect to", dsn, exc) from exc
    try:
        with conn:
            conn.execute(schema_sql().encode())
    except pg.Error as exc:
        raise OutboxError(
            f"cannot create the outbox's tables in {redacted(dsn)}: {scrubbed(str(exc), dsn)}"
        ) from exc
