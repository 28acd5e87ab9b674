"""``manage.py wheelq run|worker|scheduler|relay``: the project's tasks run as ``wheelq run
MODULE:APP`` runs them (`wheelq.cli.run.run_app`), the app the ``WHEELQ`` setting names, or
one role of it apart; the outbox relay of the project's database (docs/guides/tasks.md,
"In Django"). Each job's handler closes stale database connections before and after it
runs (`wheelq.contrib.django.database`). A command line, so it stands on the CLI's code and
flags: the one import of `wheelq.cli` from `wheelq.contrib` (pyproject.toml, the layers
contract).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from wheelq.cli.context import CliError
from wheelq.cli.outbox import add_relay_flags, relay_given, serve_relay
from wheelq.cli.run import (
    SCHEDULER_ROLE,
    WORKER_ROLE,
    add_flags,
    client_options,
    run_app,
    run_scheduler,
    worker_flags,
)
from wheelq.contrib.django.database import closing_connections, relay_dsn

LEVELS = {0: logging.WARNING, 1: logging.INFO}
DSN = (
    "the PostgreSQL whose outbox to relay, postgresql://user:password@host:5432/db "
    "(default: DATABASES['default'])"
)


class Command(BaseCommand):
    help = (
        "Run the project's wheelq tasks (the app the WHEELQ setting names). run: a worker "
        "and a scheduler node in one process, until SIGINT/SIGTERM; worker, scheduler: "
        "one of them; relay: the outbox relay of the project's database."
    )

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        run = actions.add_parser(
            "run",
            help="a worker of the app's tasks and a scheduler node, until SIGINT/SIGTERM",
        )
        add_flags(run)
        worker = actions.add_parser(
            "worker",
            help="a worker of the app's tasks (no scheduler node), until SIGINT/SIGTERM",
        )
        add_flags(worker, WORKER_ROLE)
        worker.set_defaults(no_scheduler=True, relay_dsn=None)
        scheduler = actions.add_parser(
            "scheduler",
            help="a scheduler node leading the app's tasks' topics, until SIGINT/SIGTERM",
        )
        add_flags(scheduler, SCHEDULER_ROLE)
        relay = actions.add_parser(
            "relay",
            help="the outbox relay of the project's database, until SIGINT/SIGTERM",
        )
        add_relay_flags(relay, DSN)

    def handle(self, *args: Any, **options: Any) -> None:
        app = apps.get_app_config("wheelq").app
        label = settings.WHEELQ["APP"]
        # the project's LOGGING, else the lines `wheelq run` writes (-v 0: warnings only)
        logging.basicConfig(
            level=LEVELS.get(options["verbosity"], logging.DEBUG),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        flags = argparse.Namespace(**options)  # every flag the action defines, as given
        action = options["action"]
        try:
            if action == "relay":
                values = {k: v for k, v in relay_given(flags).items() if v is not None}
                values["dsn"] = values.get("dsn") or relay_dsn(settings.DATABASES)
                status = serve_relay(app.url, client_options(app), values)
            elif action == "scheduler":
                given = {k: options[k] for k in ("metrics_port", "metrics_host")}
                given = {k: v for k, v in given.items() if v is not None}
                status = run_scheduler(app, flags, given, label=label)
            else:
                given = {k: v for k, v in worker_flags(flags).items() if v is not None}
                status = run_app(app, flags, given, {}, label=label, around=closing_connections)
        except CliError as exc:
            raise CommandError(str(exc), returncode=exc.code) from None
        except ImproperlyConfigured as exc:  # no PostgreSQL database to relay
            raise CommandError(str(exc), returncode=2) from None
        if status and action == "relay":
            raise CommandError("rows failed to relay", returncode=status)
        if status:
            raise CommandError("the worker abandoned entries on the way out", returncode=status)
