"""``module:attribute`` specs: the one loader of ``wheelq run MODULE:APP``, ``wheelq worker
MODULE:FUNCTION`` and Django's ``WHEELQ["APP"]``. A spec that names nothing is an
`InvalidSpecError` saying why in one line, the same line whichever face was given it; a
module that raises while it imports raises that (the CLI says it in one line, Django shows
its traceback).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import PurePath
from typing import Any

from wheelq.errors import InvalidSpecError
from wheelq.tasks.app import App


def load_object(spec: object, what: str, attribute: str = "attribute") -> Any:
    """The object `spec` names, its module imported from sys.path.

    Args:
        spec: ``module:attribute``; the attribute may be dotted (``module:obj.name``).
        what: The spec as its errors name it (``app``, ``handler``, ``WHEELQ['APP']``).
        attribute: What the attribute is, as the errors say the form (``module:function``).

    Raises:
        InvalidSpecError: `spec` is not of that form, or names no module or attribute.
        Exception: What the module raised while it imported (a missing dependency, say).
    """
    module_name, _, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not module_name or not attr:
        raise InvalidSpecError(what, f"{what} must be module:{attribute}, got {spec!r:.80}")
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise InvalidSpecError(what, f"{what} {spec!r}: {_file_hint(module_name, attr, what)}")
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise  # the module was found and failed to import: what it raised says why
        where = "looked in sys.path"
        if os.getcwd() in sys.path:
            where = f"looked in {os.getcwd()} and sys.path"
        if module_name.endswith(".py"):  # `handlers.py`: module `handlers`, submodule `py`
            where = _file_hint(module_name, attr, what)
        said = f"{what} {spec!r}: no module named {exc.name!r} ({where})"
        raise InvalidSpecError(what, said) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            said = f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}"
            raise InvalidSpecError(what, said)
        target = getattr(target, part)
    return target


def load_app(spec: object, what: str = "app") -> App:
    """The `App` `spec` (``module:app``) names (`load_object`).

    Raises:
        InvalidSpecError: `spec` names nothing, or an object that is not an `App`.
    """
    app = load_object(spec, what, "app")
    if not isinstance(app, App):
        raise InvalidSpecError(
            what,
            f"{what} {spec!r} is a {type(app).__name__}, not a wheelq.App "
            "(app = wheelq.App.from_url(url), with @app.task functions)",
        )
    return app


def _file_hint(module_name: str, attr: str, what: str) -> str:
    """What to pass instead of a file name: ``app/jobs.py`` -> ``app.jobs:audit``."""
    path = PurePath(module_name.removesuffix(".py"))
    parts = [part for part in path.parts if part != "."]
    if path.is_absolute() or not parts or not all(part.isidentifier() for part in parts):
        return f"the {what} is a module's dotted name, importable from the current directory"
    return f"{module_name!r} is a file name: drop '.py' and pass {'.'.join(parts)}:{attr}"
