"""A test's child process (a node or a worker): its stdout to ``OUT_DIR/NAME.jsonl`` (one
JSON line per event), its log (stderr) to ``OUT_DIR/NAME.log``. Always call `finish()`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class ChildProcess:
    """Runs ``python -m MODULE *ARGS`` from the repository root."""

    def __init__(self, module: str, args: list[str], name: str, out_dir: Path) -> None:
        self.out = out_dir / f"{name}.jsonl"
        self.log = out_dir / f"{name}.log"
        self._out = self.out.open("w")
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=ROOT, stdout=self._out, stderr=self._log
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
