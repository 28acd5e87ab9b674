"""The ``WHEELQ`` Django setting: which `wheelq.App` holds the project's tasks, and the
Redis URL it runs on in this deployment (docs/guides/tasks.md, "In Django").
"""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

from wheelq.errors import InvalidSpecError
from wheelq.tasks import loading
from wheelq.tasks.app import App

KEYS = ("APP", "URL")
EXAMPLE = 'WHEELQ = {"APP": "myproject.tasks:app"}'


def load_app(setting: object) -> App:
    """The `App` that ``setting["APP"]`` (``module:attribute``) names, imported; with
    ``setting["URL"]``, the app's URL is replaced by it (as ``wheelq run --redis-url``).

    Raises:
        ImproperlyConfigured: No setting, an unknown key, an APP that names no `App`, a URL
            that is not a string.
    """
    if setting is None:
        raise ImproperlyConfigured(f"the WHEELQ setting is missing: add {EXAMPLE}")
    if not isinstance(setting, Mapping):
        raise ImproperlyConfigured(f"WHEELQ must be a dict such as {EXAMPLE}, got {setting!r:.60}")
    unknown = sorted(str(key) for key in setting if key not in KEYS)
    if unknown:
        raise ImproperlyConfigured(f"WHEELQ has no key {unknown[0]!r}: its keys are APP and URL")
    try:
        app = loading.load_app(setting.get("APP"), "WHEELQ['APP']")
    except InvalidSpecError as exc:  # the line `wheelq run MODULE:APP` would say
        raise ImproperlyConfigured(str(exc)) from None
    url = setting.get("URL")
    if url is not None:
        if not isinstance(url, str) or not url:
            raise ImproperlyConfigured(f"WHEELQ['URL'] must be a Redis URL, got {url!r:.60}")
        app.url = url
    return app
