"""Task modules as a user writes them: a file in a folder of its own, imported here and run
by ``wheelq run MODULE:app`` in a process of its own."""

from __future__ import annotations

import importlib
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from tests.support.cli import start_wheelq, stop

URL_VARIABLE = "WHEELQ_TEST_APP_URL"
"""The variable a test's task module reads its Redis URL from."""


def module_name(topic: str) -> str:
    """A module name of its own for the test whose topic is `topic` (its tasks' topics
    follow from it, so no two tests share one)."""
    return "tasks_" + re.sub(r"\W", "_", topic)


def write_module(folder: Path, name: str, body: str) -> ModuleType:
    """Write ``folder/name.py`` (`body`, dedented) and import it here."""
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def start_run(folder: Path, name: str, url: str, *args: str) -> subprocess.Popen[str]:
    """``wheelq run name:app ARGS`` in `folder`, its app on `url`."""
    return start_wheelq("run", f"{name}:app", *args, cwd=folder, env={URL_VARIABLE: url})


@contextmanager
def running(folder: Path, name: str, url: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`start_run`, stopped with SIGTERM at the end; it must exit 0 without a traceback."""
    proc = start_run(folder, name, url, *args)
    try:
        yield proc
    finally:
        out, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, (proc.returncode, out, err)
    assert "Traceback" not in err, err
