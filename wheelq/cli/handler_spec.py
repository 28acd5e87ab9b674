"""`wheelq worker MODULE:FUNC`: the handler a command line names, imported and checked.

Every mistake is one line: a file name given for a module (``handlers.py:audit``) names
the spec to pass instead, and a module that raises while importing is said as the file,
line and error (the user runs the module to see the whole traceback).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import PurePath
from typing import Any

from wheelq.cli.errors import CliError, usage_error


def load_handler(spec: str) -> Any:
    """Import ``module:function`` (the current directory is importable, as with uvicorn).

    Raises:
        CliError: (exit 2) A malformed spec, a file name for the module, no such module or
            attribute, or not callable; (exit 1) the module raised while importing.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise usage_error(f"handler must be module:function, got {spec!r}")
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise usage_error(f"handler {spec!r}: {_file_hint(module_name, attr)}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise _import_failure(module_name, exc) from None
        where = f"looked in {os.getcwd()} and sys.path"
        if module_name.endswith(".py"):  # `handlers.py`: module `handlers`, submodule `py`
            where = _file_hint(module_name, attr)
        raise usage_error(f"no module named {exc.name!r} (handler {spec!r}; {where})") from None
    except Exception as exc:
        raise _import_failure(module_name, exc) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise usage_error(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise usage_error(
            f"handler {spec!r} is not callable (type {type(target).__name__}): "
            "it must be a def or async def taking a wheelq.Job"
        )
    from wheelq.errors import InvalidHandlerError
    from wheelq.worker.handler_runner import check_handler

    try:
        return check_handler(target)  # the worker's own rules (generators, signature)
    except InvalidHandlerError as exc:
        raise usage_error(f"handler {spec!r}: {exc}") from exc


def _file_hint(module_name: str, attr: str) -> str:
    """What to pass instead of a file name: ``handlers.py`` -> ``handlers:audit``,
    ``app/jobs.py`` -> ``app.jobs:audit`` (run from the directory holding ``app``)."""
    path = PurePath(module_name.removesuffix(".py"))
    parts = [part for part in path.parts if part != "."]
    if path.is_absolute() or not parts or not all(part.isidentifier() for part in parts):
        return "the handler is a module's dotted name, importable from the current directory"
    return f"{module_name!r} is a file name: drop '.py' and pass {'.'.join(parts)}:{attr}"


def _import_failure(module_name: str, exc: BaseException) -> CliError:
    """Exit 1 with one line for a module that raised while importing: the file and line a
    SyntaxError names, else the innermost frame in the handler's own module (or package),
    else the innermost frame; then the error's type and message."""
    if isinstance(exc, SyntaxError):
        what, file, line = f"SyntaxError: {exc.msg}", exc.filename, exc.lineno
    else:
        what = "".join(traceback.format_exception_only(exc)).strip().splitlines()[0]
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename[:1] != "<"]
        own = [f for f in frames if _is_within(f.filename, _source_of(module_name))]
        chosen = own or frames
        file, line = (chosen[-1].filename, chosen[-1].lineno) if chosen else (None, None)
    where = f"{_shown(file)}:{line}: " if file else ""
    return CliError(f"importing handler module {module_name!r} failed: {where}{what}")


def _source_of(module_name: str) -> str | None:
    """The file of `module_name`'s top-level module, or the directory of its package."""
    top = module_name.partition(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None or found.origin is None:
        return None
    if found.submodule_search_locations is not None:
        return os.path.dirname(found.origin)
    return found.origin


def _is_within(filename: str, source: str | None) -> bool:
    if source is None:
        return False
    filename, source = os.path.abspath(filename), os.path.abspath(source)
    return filename == source or filename.startswith(source + os.sep)


def _shown(filename: str) -> str:
    """`filename` relative to the current directory when it lies under it, else as is."""
    absolute = os.path.abspath(filename)
    return os.path.relpath(absolute) if _is_within(absolute, os.getcwd()) else filename
