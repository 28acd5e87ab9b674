"""What every bench scenario shares: the server, clocks, process accounting, Redis counters.

A scenario is a function ``run_<name>(bench: Bench, ...) -> dict`` that prints
progress with `bench.log` and returns plain JSON-able data. Lateness lists
are summarised with `lateness`, so every scenario reports the same
percentiles. Processes started with `bench.spawn` are killed when the bench
ends, whatever happens.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from wheelq.testing import percentile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Bench:
    """One bench run: the server under test and the processes started for it."""

    url: str
    quick: bool = False
    server_pid: int | None = None
    """The server's pid when the bench started it (for its RSS); None for --redis-url."""
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)

    def log(self, message: str) -> None:
        elapsed = time.monotonic() - self._started
        print(f"[bench {elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def topic(self, name: str) -> str:
        """A topic of its own for one scenario."""
        return f"bench-{name}-{secrets.token_hex(3)}"

    def spawn(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a process that `close()` kills if the scenario did not stop it."""
        proc = subprocess.Popen(list(args), cwd=ROOT, **kwargs)
        self._procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._procs.clear()

    def drop(self, r: redis.Redis, pattern_prefix: str) -> None:
        """Delete every key starting with `pattern_prefix` (bench data only)."""
        batch = []
        for key in r.scan_iter(match=f"{pattern_prefix}*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                r.delete(*batch)
                batch.clear()
        if batch:
            r.delete(*batch)


def wheelq_cmd(*args: str) -> list[str]:
    """The `wheelq` CLI as a subprocess command line (quiet logs)."""
    return [sys.executable, "-m", "wheelq", "--log-level", "WARNING", *args]


def drop_topic(r: redis.Redis, topic: str) -> None:
    """Remove a wheelq topic's keys (every shard) and its registry entries."""
    from wheelq.core.keys import TOPICS_KEY, all_shards, nodes_key

    shards = int(r.hget(TOPICS_KEY, topic) or 0)
    for keys in all_shards(topic, shards):
        r.delete(*keys.data_keys)
    r.delete(nodes_key(topic))
    r.hdel(TOPICS_KEY, topic)


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def lateness(values_ms: Iterable[float]) -> dict[str, float | int]:
    """p50 / p90 / p99 / p99.9 / max (nearest rank) and count of a list of lateness values."""
    ordered = sorted(values_ms)
    out: dict[str, float | int] = {
        q: round(percentile(ordered, float(q[1:])), 3) for q in ("p50", "p90", "p99", "p99.9")
    }
    out["max"] = round(float(ordered[-1]), 3) if ordered else float("nan")
    out["count"] = len(ordered)
    return out


@dataclass(frozen=True)
class ServerLoad:
    """Redis's own counters at one instant: commands by name and CPU seconds."""

    calls: dict[str, int]
    cpu_s: float
    at: float

    @classmethod
    def read(cls, r: redis.Redis) -> ServerLoad:
        stats = r.info("commandstats")
        cpu = r.info("cpu")
        calls = {
            name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()
        }
        return cls(
            calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), time.monotonic()
        )

    def calls_since(self, earlier: ServerLoad) -> dict[str, int]:
        """Calls of each command since `earlier` (those called at all), most first."""
        delta = {
            k: n - earlier.calls.get(k, 0)
            for k, n in self.calls.items()
            if n - earlier.calls.get(k, 0) > 0
        }
        return dict(sorted(delta.items(), key=lambda kv: -kv[1]))

    def since(self, earlier: ServerLoad) -> dict[str, Any]:
        """Commands (total and per second, top five by count) and CPU since `earlier`."""
        seconds = max(1e-9, self.at - earlier.at)
        delta = self.calls_since(earlier)
        total = sum(delta.values())
        return {
            "seconds": round(seconds, 3),
            "commands": total,
            "commands_per_s": round(total / seconds, 1),
            "redis_cpu_s": round(self.cpu_s - earlier.cpu_s, 3),
            "top_commands": dict(list(delta.items())[:5]),
        }


def wait_until(check: Any, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Poll `check()` until truthy or `timeout_s`; returns whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(poll_s)
    return bool(check())
