"""Running the `wheelq` command as a user does: ``python -m wheelq ...`` in a process of its own.

The child gets this environment minus every ``WHEELQ_*`` variable (a developer's
own settings must not leak into a test), plus what the test passes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``WHEELQ_*``, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELQ_")}
    return {**env, **(extra or {})}


PYTHON = os.environ.get("WHEELQ_TEST_PYTHON") or sys.executable
"""The interpreter the tests' ``wheelq`` and ``python`` commands run: this one, or with
``WHEELQ_TEST_PYTHON`` another environment's (`.ci/installed`: a venv holding the built
wheel, not this tree)."""


def wheelq_argv(*args: str) -> list[str]:
    """The argv that runs the CLI with `PYTHON`."""
    return [PYTHON, "-m", "wheelq", *args]


def run_wheelq(
    *args: str,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout_s: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``wheelq ARGS`` to completion; stdout and stderr captured as text."""
    return subprocess.run(
        wheelq_argv(*args),
        cwd=cwd,
        env=clean_env(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def start_wheelq(
    *args: str,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    signal_race: bool = False,
) -> subprocess.Popen[str]:
    """Start ``wheelq ARGS`` in the background (a scheduler, a worker, a server): stdout and
    stderr are pipes, as text. Stop it with a signal, then `communicate()`. `signal_race`:
    run it under `tests.support.signal_race` (its stop signal handled inside its wait)."""
    argv = wheelq_argv(*args)
    if signal_race:
        argv[1:3] = ["-m", "tests.support.signal_race", "wheelq"]
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[str, str]:
    """Send `sig` (default SIGTERM) and wait for the process; returns (stdout, stderr)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    return out, err


def assert_one_line_error(
    done: subprocess.CompletedProcess[str], code: int, *fragments: str
) -> str:
    """The command failed with `code` and said why in exactly one stderr line holding each of
    `fragments` (and no traceback); returns that line."""
    err = done.stderr
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert done.returncode == code, (done.returncode, err)
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def free_port() -> int:
    """A loopback port nothing listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
