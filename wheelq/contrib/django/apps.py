"""The Django app: loads the `wheelq.App` the ``WHEELQ`` setting names when Django starts
(docs/guides/tasks.md, "In Django").
"""

from __future__ import annotations

import atexit

from django.apps import AppConfig
from django.conf import settings

from wheelq.contrib.django.conf import load_app
from wheelq.tasks.app import App


class WheelqConfig(AppConfig):
    """``"wheelq.contrib.django"`` in INSTALLED_APPS: at startup, imports the app the
    ``WHEELQ`` setting names (and so its tasks) and gives it the setting's URL; Django
    has no shutdown hook, so its blocking client is closed at interpreter exit (an
    asyncio client, per loop, goes with its loop)."""

    name = "wheelq.contrib.django"
    label = "wheelq"
    verbose_name = "wheelq"
    app: App
    """The project's `App`, once Django is set up (``apps.get_app_config("wheelq").app``)."""

    def ready(self) -> None:
        self.app = load_app(getattr(settings, "WHEELQ", None))
        atexit.register(self.app.close)
