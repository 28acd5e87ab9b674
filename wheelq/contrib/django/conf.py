"""The ``WHEELQ`` Django setting: which `wheelq.App` holds the project's tasks, and the
Redis URL it runs on in this deployment (docs/guides/tasks.md, "In Django").
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

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
    app = _named(setting.get("APP"))
    url = setting.get("URL")
    if url is not None:
        if not isinstance(url, str) or not url:
            raise ImproperlyConfigured(f"WHEELQ['URL'] must be a Redis URL, got {url!r:.60}")
        app.url = url
    return app


def _named(spec: object) -> App:
    module_name, _, attribute = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not module_name or not attribute:
        raise ImproperlyConfigured(
            f"WHEELQ['APP'] must be 'module:attribute' naming a wheelq.App, got {spec!r:.60}"
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise  # the module was found and failed to import: its traceback says why
        missing = f"WHEELQ['APP'] {spec!r}: no module named {exc.name!r}"
        raise ImproperlyConfigured(missing) from None
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if not isinstance(target, App):
        got = "nothing" if target is None else f"a {type(target).__name__}"
        raise ImproperlyConfigured(
            f"WHEELQ['APP'] {spec!r} names {got}, not a wheelq.App "
            "(app = wheelq.App.from_url(url), with @app.task functions)"
        )
    return target
