"""`enqueue` into the outbox: the job validated and encoded as `Client.enqueue` does it,
then written as one row on the application's connection, in its transaction
(docs/guides/outbox.md).
"""

from __future__ import annotations

from typing import Any, Unpack

from wheelq.core import keys as k
from wheelq.core.options import ItemOptions, takes
from wheelq.core.settings import ClientSettings
from wheelq.outbox import connection
from wheelq.producer.items import EncodeBatch, EnqueueItem, validate_item
from wheelq.runtime.clock import WallClock

INSERT = (
    "INSERT INTO wheelq_outbox (topic, job_id, mode, value_ms, replace, order_key, envelope) "
    "VALUES (%(topic)s, %(job_id)s, %(mode)s, %(value_ms)s, %(replace)s, %(order_key)s, "
    "%(envelope)s)"
)

_DEFAULTS = ClientSettings()
_CLOCK = WallClock()


def row(
    topic: str, payload: Any, settings: ClientSettings | None, options: ItemOptions | None = None
) -> dict[str, Any]:
    """The row of one job: every argument checked and the job encoded, nothing written."""
    topic = k.validate_topic(topic)
    batch = EncodeBatch(_CLOCK.now_ms())
    item = EnqueueItem(payload=payload, **(options or ItemOptions()))
    write = validate_item(settings or _DEFAULTS, item, batch)
    mode, value = write.due.wire
    return {
        "topic": topic,
        "job_id": write.id,
        "mode": mode,
        "value_ms": value,
        "replace": write.replace,
        "order_key": write.order_key,
        "envelope": write.envelope,
    }


@takes(ItemOptions)
def enqueue(
    conn: Any,
    topic: str,
    payload: Any,
    *,
    settings: ClientSettings | None = None,
    **options: Unpack[ItemOptions],
) -> str:
    """Enqueue `payload` on `topic` inside `conn`'s transaction: the job exists if and only
    if that transaction commits (a relay then places it in Redis, due when the row says).

    The arguments mean what `Client.enqueue`'s mean and are checked the same way, before
    the row is written; a delay counts from this call (the database's clock), so a relay
    that runs late fires the job at its time, or at once if that has passed. Outside a
    transaction (autocommit) the row commits at once: a durable enqueue. The relay's
    ``ack`` level applies to every row; a debounce needs Redis and is not offered here.

    Args:
        conn: The application's connection: psycopg 3, a SQLAlchemy 2 `Connection` or
            `Session`, or Django's connection (`aenqueue` for async ones).
        settings: The `max_payload_bytes` and `default_max_attempts` to apply (the
            defaults of `ClientSettings` when None).

    Returns:
        The job id (yours, or a generated one): what `Client.get` and `cancel` take once
        the job is in Redis.

    Raises:
        InvalidArgumentError: A bad argument (named); nothing was written.
        PayloadTypeError: The payload cannot be serialised; nothing was written.
        OutboxNotInstalledError: The outbox's table is missing (the message says what to run).
        UnsupportedConnectionError: `conn` is no connection the outbox knows.
    """
    driver = connection.driver_of(conn, connection.SYNC)
    params = row(topic, payload, settings, options)
    connection.execute(conn, driver, INSERT, params)
    return str(params["job_id"])


@takes(ItemOptions)
async def aenqueue(
    conn: Any,
    topic: str,
    payload: Any,
    *,
    settings: ClientSettings | None = None,
    **options: Unpack[ItemOptions],
) -> str:
    """`enqueue` on an async connection: psycopg's `AsyncConnection`, SQLAlchemy's
    `AsyncConnection` or `AsyncSession`."""
    driver = connection.driver_of(conn, connection.ASYNC)
    params = row(topic, payload, settings, options)
    await connection.aexecute(conn, driver, INSERT, params)
    return str(params["job_id"])
