"""The outbox's tables: the SQL (one file, ``schema.sql``, for every way of applying it)
and `install`, which applies it to a database (docs/guides/outbox.md).
"""

from __future__ import annotations

from importlib import resources

from wheelq.errors import OutboxUnavailableError
from wheelq.outbox.connection import psycopg
from wheelq.outbox.relay import redacted

TABLES = ("wheelq_outbox", "wheelq_outbox_done", "wheelq_outbox_meta", "wheelq_outbox_rejected")


def schema_sql() -> str:
    """The SQL that creates the outbox's tables and trigger; running it again changes nothing."""
    return resources.files("wheelq.outbox").joinpath("schema.sql").read_text(encoding="utf-8")


def install(dsn: str, *, connect_timeout_s: int = 5) -> None:
    """Apply `schema_sql()` to the database of `dsn`, in one transaction.

    Raises:
        OutboxUnavailableError: The database cannot be reached (the DSN, the server).
    """
    pg = psycopg()
    try:
        with pg.connect(dsn, connect_timeout=connect_timeout_s) as conn:
            conn.execute(schema_sql().encode())
    except pg.OperationalError as exc:
        raise OutboxUnavailableError(
            f"cannot connect to PostgreSQL ({redacted(dsn)}): {str(exc).strip()[:300]}"
        ) from exc
