"""The outbox's tables, from the one SQL file `wheelq outbox init` runs
(`wheelq.outbox.schema_sql()`), on PostgreSQL only: another database (SQLite in a
project's tests) gets none, and `outbox.enqueue` on it says the tables are missing.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations

from wheelq.outbox.schema import TABLES, schema_sql


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(schema_sql(), params=None)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP TABLE IF EXISTS {', '.join(TABLES)}", params=None)
        schema_editor.execute("DROP FUNCTION IF EXISTS wheelq_outbox_notify()", params=None)


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [migrations.RunPython(create, drop)]
