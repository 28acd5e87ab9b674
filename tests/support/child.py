"""A test's child process (a node or a worker): its stdout to ``OUT_DIR/NAME.jsonl`` (one
JSON line per event), its log (stderr) to ``OUT_DIR/NAME.log``. Always call `finish()`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from wheelq.runtime import crash

ROOT = Path(__file__).resolve().parents[2]
CRASH_ENV = "WHEELQ_CRASH_AT"


def arm_crash_points() -> None:
    """In a child's entry point: arm what the parent asked for in ``WHEELQ_CRASH_AT``."""
    if spec := os.environ.get(CRASH_ENV):
        crash.arm_from_spec(spec)


class ChildProcess:
    """Runs ``python -m MODULE *ARGS`` from the repository root."""

    def __init__(
        self,
        module: str,
        args: list[str],
        name: str,
        out_dir: Path,
        crash_at: str | None = None,
    ) -> None:
        """`crash_at` arms crash points in the child (``point:hits,...``, read by its entry
        point from ``WHEELQ_CRASH_AT``; see `wheelq.runtime.crash`)."""
        self.out = out_dir / f"{name}.jsonl"
        self.log = out_dir / f"{name}.log"
        self._out = self.out.open("w")
        self._log = self.log.open("w")
        env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
        if crash_at:
            env[CRASH_ENV] = crash_at
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            stdout=self._out,
            stderr=self._log,
            env=env,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def lines(self) -> list[dict[str, Any]]:
        """Every complete line printed so far."""
        text = self.out.read_text()
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def log_text(self) -> str:
        return self.log.read_text()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    def finish(self) -> None:
        """Kill the process if it still runs, reap it, close its files."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._out.close()
        self._log.close()
