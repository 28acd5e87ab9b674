"""Enqueue inside your PostgreSQL transaction, and apply a job's effects exactly once
(docs/guides/outbox.md; docs/architecture.md, "The outbox relay").

`enqueue` writes the job as a row of the ``wheelq_outbox`` table on the application's own
connection, so it exists if and only if the transaction commits; a `Relay` (``wheelq
relay``, or ``[relay]`` beside a scheduler node) places committed rows in Redis, each
exactly once. `once` records, in a handler's transaction, that a job's effects are applied.
This is the only package that imports a SQL driver (psycopg, for the relay and `install`).
"""

from wheelq.outbox.enqueue import aenqueue, enqueue
from wheelq.outbox.once import aonce, once
from wheelq.outbox.relay import Relay
from wheelq.outbox.schema import TABLES, install, schema_sql

__all__ = ["Relay", "TABLES", "aenqueue", "aonce", "enqueue", "install", "once", "schema_sql"]
