"""The project's database as wheelq's roles use it: its DSN for the outbox relay
(`relay_dsn`: ``manage.py wheelq relay``), and its stale connections closed around each job
(`closing_connections`), as Celery's Django fixup does:
Django's ``close_old_connections()`` before and after each handler run, in the thread the
handler's queries run in, so a job never starts on a connection the server closed, nor
holds one past ``CONN_MAX_AGE`` (docs/guides/tasks.md, "In Django").

A sync handler runs on a worker's handler thread, and the calls run there. An async
handler's ORM calls (``await Model.objects.aget()``) run in the thread Django's
``sync_to_async`` gives them, thread-sensitive: one shared thread outside a request; the
calls are made through ``sync_to_async`` too, so they reach that thread's connections.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections

from wheelq.core.job import Job
from wheelq.worker.handler_runner import Handler, is_async

LIBPQ = {"NAME": "dbname", "USER": "user", "PASSWORD": "password", "HOST": "host", "PORT": "port"}
"""Django's ``DATABASES`` keys and the libpq parameters they are."""
DJANGO_ONLY = frozenset({"isolation_level", "server_side_binding", "assume_role", "pool"})
"""``OPTIONS`` keys Django reads itself, never passed to libpq."""


def relay_dsn(databases: Mapping[str, Any], alias: str = "default") -> str:
    """The libpq DSN (``key='value' ...``) of the PostgreSQL database `alias` of Django's
    ``DATABASES``: its NAME, USER, PASSWORD, HOST and PORT, and its ``OPTIONS`` that are
    libpq's (``sslmode``, ``service`` ...), as Django connects.

    Raises:
        ImproperlyConfigured: No such database, or not a PostgreSQL one.
    """
    database = databases.get(alias)
    engine = str((database or {}).get("ENGINE", ""))
    if not isinstance(database, Mapping) or "postgresql" not in engine:
        raise ImproperlyConfigured(
            f"the outbox relay needs DATABASES[{alias!r}] to be a PostgreSQL database "
            f"(django.db.backends.postgresql), got {engine or 'none'}: pass --dsn"
        )
    params = {libpq: database.get(key) for key, libpq in LIBPQ.items()}
    options = database.get("OPTIONS") or {}
    params |= {k: v for k, v in options.items() if k not in DJANGO_ONLY}
    return " ".join(f"{k}={_quoted(v)}" for k, v in params.items() if v not in (None, ""))


def _quoted(value: object) -> str:
    """A libpq connection-string value, quoted: a backslash and a quote escaped."""
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def closing_connections(handler: Handler) -> Handler:
    """`handler` with ``close_old_connections()`` called before and after each run, in
    the thread its queries run in (`App.worker`'s ``around``)."""
    if is_async(handler):

        @functools.wraps(handler)
        async def run_async(job: Job) -> Any:
            await sync_to_async(close_old_connections)()
            try:
                return await handler(job)
            finally:
                await sync_to_async(close_old_connections)()

        return run_async

    @functools.wraps(handler)
    def run(job: Job) -> Any:
        close_old_connections()
        try:
            return handler(job)
        finally:
            close_old_connections()

    return run
