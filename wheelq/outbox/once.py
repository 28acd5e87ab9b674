"""`once`: the record, in the handler's own transaction, that a job's effects were applied,
so a delivery after a crash between that commit and the ack applies nothing twice
(docs/guides/outbox.md, "Effects exactly once").
"""

from __future__ import annotations

from typing import Any

from wheelq.core import keys as k
from wheelq.core.context import current_job
from wheelq.core.job import Job
from wheelq.errors import InvalidArgumentError
from wheelq.outbox import connection

RECORD = (
    "INSERT INTO wheelq_outbox_done (topic, job_id) VALUES (%(topic)s, %(job_id)s) "
    "ON CONFLICT (topic, job_id) DO NOTHING"
)
PRUNE = (  # on the database's clock, which wrote done_ms
    "DELETE FROM wheelq_outbox_done WHERE ctid = ANY (ARRAY(SELECT ctid FROM wheelq_outbox_done "
    "WHERE done_ms < (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint "
    "- %(retention_ms)s LIMIT %(limit)s))"
)


def once(conn: Any, job: Job | None = None) -> bool:
    """Record in `conn`'s transaction that `job`'s effects are applied; True when this is
    the first time (apply them), False when a committed record says they were.

    Inside a handler or a task, `job` is the running one unless given
    (`wheelq.current_job()`): ``once(conn)``.

    Write the handler's effects on the same connection, in the same transaction, and
    commit it before the handler returns: the record then exists if and only if the
    effects do. A redelivery after the record's retention (the relay's
    ``done_retention_ms``) applies the effects again.

    Raises:
        NoCurrentJobError: No `job` given, outside a handler or task.
        NotInTransactionError: `conn` is in autocommit mode outside a transaction.
        OutboxNotInstalledError: The outbox's tables are missing.
        UnsupportedConnectionError: `conn` is no connection the outbox knows.
    """
    params = _params(job)
    driver = connection.driver_of(conn, connection.SYNC)
    connection.require_transaction(conn, driver, "conn")
    return connection.execute(conn, driver, RECORD, params) == 1


async def aonce(conn: Any, job: Job | None = None) -> bool:
    """`once` on an async connection (psycopg's `AsyncConnection`, SQLAlchemy's
    `AsyncConnection` or `AsyncSession`); `job` the running one unless given."""
    params = _params(job)
    driver = connection.driver_of(conn, connection.ASYNC)
    await connection.arequire_transaction(conn, driver, "conn")
    return await connection.aexecute(conn, driver, RECORD, params) == 1


def _params(job: Job | None) -> dict[str, str]:
    if job is None:
        job = current_job()
    elif not isinstance(job, Job):
        raise InvalidArgumentError(
            "job", f"job must be the handler's Job, got {type(job).__name__}"
        )
    return {"topic": k.validate_topic(job.topic), "job_id": k.validate_job_id(job.id)}
