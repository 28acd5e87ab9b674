"""The outbox guide's examples (docs/guides/outbox.md) run as written, on a PostgreSQL and a
Redis of the test's own, and do what the page says: `wheelq outbox init` makes the tables,
each driver's enqueue writes its row only when its transaction commits (Django's in a
process of its own: its settings are global), the documented ``wheelq relay`` places every
row in Redis, a scheduler with the page's ``[relay]`` section relays and fires them, and the
page's handlers, under the documented worker and again in-process, invoice each order once.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import textwrap
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import wheelq
from tests.support.cli import PYTHON, clean_env
from tests.support.docs import Services, blocks, run_code, run_command, snippets, with_dsn
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually_sync
from wheelq import outbox
from wheelq.testing import ServerBinary

INVOICED = [1, 3, 4, 5, 6]  # the orders the Connections examples commit (2 rolls back)

DJANGO = """
    import json, os
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes", "django.contrib.auth", "wheelq.contrib.django"
        ],
        WHEELQ={"APP": "django_tasks:app"},
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql",
                               **json.loads(os.environ["DB"])}},
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)  # auth's tables, and wheelq's: the outbox again
    from signup import sign_up

    print(json.dumps({"job": sign_up("gus@example.com")}))
"""


def _query(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


def _outbox_rows(dsn: str) -> set[tuple[object, ...]]:
    return set(_query(dsn, "SELECT topic, job_id FROM wheelq_outbox"))


def _invoices(dsn: str) -> Counter[object]:
    return Counter(order for (order,) in _query(dsn, "SELECT order_id FROM invoices"))


def _section_block(page: str, lang: str, section: str) -> str:
    """The one `lang` block of `page`'s `section` (a language the docs tests do not run)."""
    (body,) = [b.body for b in blocks(page) if b.lang == lang and b.section == section]
    return body


def _django_sign_up(dsn: str, url: str, cwd: Path) -> str:
    """The page's ``signup.py`` called in a Django process set up as the page says; the id
    of the job it enqueued."""
    info = conninfo_to_dict(dsn)
    db = {"NAME": info["dbname"], "USER": info["user"], "HOST": info["host"],
          "PORT": str(info["port"])}  # fmt: skip
    (cwd / "django_tasks.py").write_text(f"import wheelq\n\napp = wheelq.App.from_url({url!r})\n")
    script = cwd / "django_signup.py"
    script.write_text(textwrap.dedent(DJANGO))
    env = clean_env({"DB": json.dumps(db), "PYTHONPATH": str(cwd)})
    done = subprocess.run(
        [PYTHON, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    job: str = json.loads(done.stdout.strip().splitlines()[-1])["job"]
    return job


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(order: int) -> wheelq.Job:
    return wheelq.Job(id=f"invoice-{order}", topic="invoices", payload={"order": order},
                      due_ms=0, attempt=1, max_attempts=5)  # fmt: skip


def test_outbox_guide_runs_as_written(
    server_binary: ServerBinary,
    postgres_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = "docs/guides/outbox.md"
    dsn = postgres_dsn
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        client = stack.enter_context(wheelq.Client.from_url(url))
        state = wheelq.JobState

        # Create the tables: init, then the same SQL printed for a migration tool.
        init = snippets(page, "Create the tables", url, dsn=dsn).commands
        assert [c[:3] for c in init] == [["wheelq", "outbox", "init"]] * 2
        assert "outbox tables ready" in run_command(init[0], tmp_path)
        assert run_command(init[1], tmp_path) == outbox.schema_sql()
        assert {t for (t,) in _query(dsn, "SELECT tablename FROM pg_tables")} >= set(outbox.TABLES)

        # Connections: the application's tables, then each driver's example.
        with psycopg.connect(dsn) as conn:
            conn.execute(_section_block(page, "sql", "Connections"))
        found = snippets(page, "Connections", url, dsn=dsn)
        assert list(found.files) == ["signup.py"]
        ns = run_code(found.code, url)
        stack.callback(ns["engine"].dispose)  # type: ignore[attr-defined]
        assert capsys.readouterr().out.splitlines() == ["invoice-1", "invoice-3"]
        assert [o for (o,) in _query(dsn, "SELECT id FROM orders ORDER BY id")] == INVOICED
        (tmp_path / "signup.py").write_text(found.files["signup.py"])
        welcome = _django_sign_up(dsn, url, tmp_path)
        invoices = {("invoices", f"invoice-{n}") for n in INVOICED}
        assert _outbox_rows(dsn) == invoices | {("emails", welcome)}  # none of order 2

        # Run the relay: the command moves every row into Redis, then stops on SIGTERM.
        relay = snippets(page, "Run the relay", url, dsn=dsn).commands
        assert [c[:2] for c in relay] == [["wheelq", "relay"], ["wheelq", "scheduler"]]
        (tmp_path / "relay").mkdir()
        alone = Services(tmp_path / "relay", stack)
        alone.start(relay[0])
        eventually_sync(
            lambda: alone.alive() and not _outbox_rows(dsn),
            timeout_s=60,
            what="the relay to take every row",
        )
        for topic, job_id in invoices:  # due now: fired at once, waiting for a worker
            assert client.get(topic, job_id).state == state.READY, job_id
        email = client.get("emails", welcome)
        assert email.state == state.PENDING and email.payload == {"welcome": "gus@example.com"}
        assert client.get("invoices", "invoice-2").state == state.UNKNOWN  # rolled back
        alone.stop()  # SIGTERM: exit 0

        # Effects exactly once: a scheduler with the page's [relay] section, and the worker.
        toml = _section_block(page, "toml", "Run the relay")
        assert toml.startswith("# wheelq.toml\n[relay]\n")
        (tmp_path / "wheelq.toml").write_text(with_dsn(toml, dsn))
        effects = snippets(page, "Effects exactly once", url, dsn=dsn)
        assert list(effects.files) == ["invoicing.py"]
        (tmp_path / "invoicing.py").write_text(effects.files["invoicing.py"])
        assert [c[:3] for c in effects.commands] == [["wheelq", "worker", "invoicing:make_invoice"]]
        services = Services(tmp_path, stack)
        services.start(relay[1])
        services.start(effects.commands[0])
        later = asyncio.run(ns["place_order"](7, "gil@example.com", 800))  # type: ignore[operator]
        assert later == "invoice-7"  # a row the scheduler's relay must place

        def every_job_handled() -> bool:
            services.alive()
            return all(
                client.get("invoices", f"invoice-{n}").state == state.SUCCEEDED
                for n in [*INVOICED, 7]
            )

        eventually_sync(every_job_handled, timeout_s=60, what="every invoice job handled")
        assert not _outbox_rows(dsn)
        services.stop()  # SIGTERM: each exits 0
    assert _invoices(dsn) == Counter([*INVOICED, 7])  # one invoice per order
    done = {j for (j,) in _query(dsn, "SELECT job_id FROM wheelq_outbox_done")}
    assert done == {f"invoice-{n}" for n in [*INVOICED, 7]}

    # A second delivery of a handled job applies nothing, through either handler; a new one
    # applies once.
    invoicing = _module(tmp_path / "invoicing.py")
    invoicing.make_invoice(_job(1))
    asyncio.run(invoicing.amake_invoice(_job(3)))
    assert _invoices(dsn) == Counter([*INVOICED, 7])
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO orders VALUES (9, 'hal@example.com', 100)")
    for _ in range(2):
        asyncio.run(invoicing.amake_invoice(_job(9)))
    assert _invoices(dsn) == Counter([*INVOICED, 7, 9])
