"""Task modules as a user writes them: a file in a folder of its own, imported here and run
by ``wheelq run MODULE:app`` in a process of its own."""

from __future__ import annotations

import importlib
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import IO

from tests.support.cli import start_wheelq

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


class Log:
    """A process's stdout and stderr, each read on a thread of its own as it comes."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.started = threading.Event()
        self._threads = [
            threading.Thread(target=self._read, args=(proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(proc.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        with stream:  # closed at its end
            for line in stream:
                into.append(line)
                if "wheelq.worker.worker: worker " in line and " started on " in line:
                    self.started.set()

    def texts(self) -> tuple[str, str]:
        """(stdout, stderr), all of them once the process has exited."""
        for thread in self._threads:
            thread.join(30)
        return "".join(self.out), "".join(self.err)


@contextmanager
def running(folder: Path, name: str, url: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`start_run`, once its worker says it started (its signal handlers are in place by
    then, so a stop is graceful however soon it comes); stopped with SIGTERM at the end,
    it must exit 0 without a traceback."""
    proc = start_run(folder, name, url, "--log-level", "INFO", *args)
    log = Log(proc)
    try:
        if not log.started.wait(30):
            raise AssertionError(f"wheelq run did not start in 30 s: {''.join(log.err)}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    out, err = log.texts()
    assert proc.returncode == 0, (proc.returncode, out, err)
    assert "Traceback" not in err, err
