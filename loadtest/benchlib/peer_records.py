"""Reading what peer handlers recorded, and accounting for the worker processes.

`Records` tails the append-only file the handlers of `peer_tasks` write (one
``<index> <due ms> <start ms>`` line per run of a job). `group_cpu_seconds` and
`stop_group` work on whole process groups: each worker is started in a session of its
own, so its group also holds what it forks (rq's scheduler and work horses).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterable


class Records:
    """The lines of one record file, read incrementally with `poll()`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[tuple[int, float, float]] = []
        self.bad_lines = 0
        self._counts: Counter[int] = Counter()
        self._distinct = 0
        self._offset = 0
        self._partial = b""

    def poll(self) -> int:
        """Read what was appended since the last call; `handled()` afterwards."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return self._distinct
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next poll
        for line in lines:
            try:
                index_s, due_s, start_s = line.split()
                row = (int(index_s), float(due_s), float(start_s))
            except ValueError:
                self.bad_lines += 1
                continue
            self.rows.append(row)
            self._counts[row[0]] += 1
            if row[0] >= 0 and self._counts[row[0]] == 1:
                self._distinct += 1
        return self._distinct

    def seen(self, index: int) -> bool:
        return self._counts[index] > 0

    def handled(self) -> int:
        """Distinct job indexes (≥ 0) that a handler started."""
        return self._distinct

    def duplicates(self) -> int:
        """Extra runs of jobs (≥ 0) that ran more than once."""
        return sum(n - 1 for index, n in self._counts.items() if index >= 0 and n > 1)


def _stat_fields(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def group_cpu_seconds(pgids: Iterable[int]) -> float:
    """CPU seconds (user + system, own + reaped children) of every process in `pgids`."""
    wanted = {str(g) for g in pgids}
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fields = _stat_fields(pid)
        if fields is not None and fields[2] in wanted:
            ticks += sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def stop_group(pgid: int, timeout_s: float = 5.0) -> None:
    """SIGTERM what is left of process group `pgid` (a worker we started), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
