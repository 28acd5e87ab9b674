"""What every bench scenario shares: the server, clocks, process accounting, Redis counters.

A scenario is a function ``run_<name>(bench: Bench, ...) -> dict`` that prints
progress with `bench.log` and returns plain JSON-able data. Lateness lists
are summarised with `lateness`, so every scenario reports the same
percentiles. Processes started with `bench.spawn` are killed when the bench
ends, whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
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
    """Remove a wheelq topic's keys (every shard, its far tier too, with UNLINK: a backlog of
    millions is freed off the server's main thread) and its registry entries."""
    from wheelq.core.keys import TOPICS_KEY, all_shards, nodes_key
    from wheelq.store import topics
    from wheelq.store.executor import SyncExecutor

    left = all_shards(topic, int(r.hget(TOPICS_KEY, topic) or 0))
    while left:  # drop_shard deletes a far tier in steps
        done = SyncExecutor(r).run([topics.drop_shard(keys, "force") for keys in left])
        left = [keys for keys, d in zip(left, done, strict=True) if d.more]
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


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds used so far by each server (INFO ``used_cpu_sys`` + ``used_cpu_user``), by
    named groups of processes (/proc), by this process and by the whole machine (/proc/stat);
    and the bytes every server has read and written on its connections (INFO stats)."""

    servers: list[float]
    net_bytes: float
    groups: dict[str, float]
    bench: float
    machine: float
    at: float

    @classmethod
    def read(
        cls,
        servers: Sequence[redis.Redis],
        groups: Mapping[str, Sequence[subprocess.Popen[bytes]]],
    ) -> CpuSnapshot:
        cpu_s, net = [], 0
        for r in servers:
            cpu, stats = r.info("cpu"), r.info("stats")
            cpu_s.append(float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]))
            net += int(stats["total_net_input_bytes"]) + int(stats["total_net_output_bytes"])
        used = {name: sum(cpu_seconds(p.pid) for p in procs) for name, procs in groups.items()}
        return cls(cpu_s, net, used, cpu_seconds(os.getpid()), machine_busy_s(), time.monotonic())

    def since(self, earlier: CpuSnapshot) -> dict[str, Any]:
        """CPU seconds used since `earlier` (``redis_per_primary``: each server's; each group
        under its name), the bytes, and over how many wall seconds."""
        return {
            "seconds": max(1e-9, self.at - earlier.at),
            "redis_per_primary": [
                b - a for a, b in zip(earlier.servers, self.servers, strict=True)
            ],
            "net_bytes": self.net_bytes - earlier.net_bytes,
            **{name: used - earlier.groups[name] for name, used in self.groups.items()},
            "bench": self.bench - earlier.bench,
            "machine": self.machine - earlier.machine,
        }


def wait_until(check: Any, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Poll `check()` until truthy or `timeout_s`; returns whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(poll_s)
    return bool(check())


def wait_freed(r: redis.Redis, timeout_s: float = 600.0) -> None:
    """Wait until the server has freed every deleted key.

    Valkey frees deleted keys on a background thread (lazyfree-lazy-user-del, on by default
    since Valkey 8), and UNLINK does so on Redis too: until it is done, that thread competes
    for the cores and ``used_memory`` still counts what is about to go."""
    if not wait_until(
        lambda: int(r.info("memory").get("lazyfree_pending_objects", 0)) == 0, timeout_s
    ):
        raise TimeoutError(f"the server had not freed deleted keys after {timeout_s:.0f} s")


def machine_busy_s() -> float:
    """CPU seconds the machine's cores have spent busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, *rest = (int(x) for x in f.readline().split()[1:])
    return (user + nice + system + sum(rest[:3])) / os.sysconf("SC_CLK_TCK")


def wait_quiet(max_s: float = 10.0, below_cores: float = 0.3) -> float:
    """Wait up to `max_s` for the machine's busy cores (over 0.5 s) to fall below
    `below_cores` (other engineers' test suites share it); returns the last reading."""
    deadline = time.monotonic() + max_s
    while True:
        t, busy = time.monotonic(), machine_busy_s()
        time.sleep(0.5)
        cores = (machine_busy_s() - busy) / (time.monotonic() - t)
        if cores < below_cores or time.monotonic() > deadline:
            return round(cores, 2)


SATURATED = 0.9
"""A process busy this share of one core, or a machine this share of all its cores, is at
its limit."""


def at_limit(single: Mapping[str, float], machine_cores_busy: float) -> list[str]:
    """What was at its limit: each of `single` (cores busy of a process or a Redis primary,
    each of which runs its work on one core) at `SATURATED` of a core or more, and the
    machine when `SATURATED` of its cores were busy; empty when nothing was."""
    cores = os.cpu_count() or 1
    out = [f"{name}: {busy:.2f} cores" for name, busy in single.items() if busy >= SATURATED]
    if machine_cores_busy >= SATURATED * cores:
        out.append(f"machine: {machine_cores_busy:.2f} of {cores} cores busy")
    return out


def machine(**versions: str) -> dict[str, Any]:
    """The machine a run measured on (CPU, cores, memory, load before the run), with the
    `versions` of what else the run used."""
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        **versions,
        "load_average_before": round(os.getloadavg()[0], 2),
    }


def server_version(r: redis.Redis) -> str:
    """``valkey 9.1.2`` or ``redis 7.0.15``: the server's name and version (INFO server)."""
    info = r.info("server")
    return (
        f"{info.get('server_name', 'redis')} "
        f"{info.get('valkey_version') or info.get('redis_version')}"
    )


def git_head() -> str | None:
    """The short commit of the checkout the bench runs from (None outside git)."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None
