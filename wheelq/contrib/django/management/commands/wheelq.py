"""``manage.py wheelq run``: the project's tasks run as ``wheelq run MODULE:APP`` runs
them (`wheelq.cli.run.run_app`), the app the ``WHEELQ`` setting names (docs/guides/tasks.md,
"In Django"). A command line, so it stands on the CLI's code: the one import of
`wheelq.cli` from `wheelq.contrib` (pyproject.toml, the layers contract).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from wheelq.cli.context import CliError
from wheelq.cli.run import add_flags, run_app, worker_flags

LEVELS = {0: logging.WARNING, 1: logging.INFO}


class Command(BaseCommand):
    help = (
        "Run the project's wheelq tasks (the app the WHEELQ setting names). run: a worker "
        "and a scheduler node in one process, until SIGINT/SIGTERM."
    )

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        run = actions.add_parser(
            "run",
            help="a worker of the app's tasks and a scheduler node, until SIGINT/SIGTERM",
        )
        add_flags(run)

    def handle(self, *args: Any, **options: Any) -> None:
        app = apps.get_app_config("wheelq").app
        label = settings.WHEELQ["APP"]
        # the project's LOGGING, else the lines `wheelq run` writes (-v 0: warnings only)
        logging.basicConfig(
            level=LEVELS.get(options["verbosity"], logging.DEBUG),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        flags = argparse.Namespace(**options)  # every flag `add_flags` defines, as given
        given = {key: value for key, value in worker_flags(flags).items() if value is not None}
        try:
            status = run_app(app, flags, given, {}, label=label)
        except CliError as exc:
            raise CommandError(str(exc), returncode=exc.code) from None
        if status:
            raise CommandError("the worker abandoned entries on the way out", returncode=status)
