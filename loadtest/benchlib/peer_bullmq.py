"""BullMQ adapter: the Node.js queue, driven through `loadtest/peers/bullmq/bench.js`.

BullMQ keeps a delayed job in a hash of its own (``bull:<queue>:<id>``) and the queue's
``bull:<queue>:delayed`` sorted set. It has no scheduler process and no poll interval:
its Worker moves due delayed jobs to the wait list itself and, with nothing to do,
blocks on the queue's marker key until the next delayed job is due (`Worker`'s options,
docs.bullmq.io). One Node process runs the Worker at `concurrency` jobs at once (1 by
default). The versions are pinned in ``loadtest/peers/bullmq/package.json`` and its lock;
`ensure_installed` runs ``npm ci`` there when ``node_modules`` is missing or holds
another version, and raises `NodeUnavailable` (with what to install) without node or npm.

A run's keys are those of its queue (``bull:<queue>:*``), deleted by pattern.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import redis

from benchlib.peer_base import LOADTEST, Run, drop_matching

BULLMQ_DIR = os.path.join(LOADTEST, "peers", "bullmq")
SCRIPT = os.path.join(BULLMQ_DIR, "bench.js")
MIN_NODE_MAJOR = 18
BUSY_CONCURRENCY = 50
"""The Worker's concurrency in the "aggressive" setting (and the side-by-side run's)."""
NODE_TIMEOUT_S = 600.0
PACKAGES = ("bullmq", "ioredis")
"""What ``package.json`` pins: BullMQ, and the Redis client it uses (a peer dependency)."""


class NodeUnavailable(RuntimeError):
    """Node.js or npm is missing or too old, or ``npm ci`` failed: BullMQ cannot run."""


def pinned_version(package: str = "bullmq") -> str:
    """The exact version of `package` that ``package.json`` pins."""
    with open(os.path.join(BULLMQ_DIR, "package.json")) as f:
        return str(json.load(f)["dependencies"][package])


def installed_version(package: str = "bullmq") -> str | None:
    """The version of `package` in ``node_modules``, or None when it is not installed."""
    path = os.path.join(BULLMQ_DIR, "node_modules", package, "package.json")
    try:
        with open(path) as f:
            return str(json.load(f)["version"])
    except (OSError, ValueError, KeyError):
        return None


def node_binary() -> str:
    """The `node` on PATH, at least `MIN_NODE_MAJOR` (NodeUnavailable otherwise)."""
    node = shutil.which("node")
    if node is None:
        raise NodeUnavailable(
            f"node not found on PATH: BullMQ needs Node.js >= {MIN_NODE_MAJOR} and npm "
            "(https://nodejs.org, or your system's nodejs and npm packages)"
        )
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    match = re.match(r"v(\d+)\.", out.stdout.strip())
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        raise NodeUnavailable(
            f"{node} reports {out.stdout.strip() or out.stderr.strip()!r}: "
            f"BullMQ needs Node.js >= {MIN_NODE_MAJOR}"
        )
    return node


def ensure_installed(log: Callable[[str], None] | None = None) -> str:
    """BullMQ's pinned version, installed with ``npm ci`` into ``loadtest/peers/bullmq`` if
    ``node_modules`` lacks it; NodeUnavailable without node/npm or when npm fails."""
    node_binary()
    wanted = pinned_version()
    if all(installed_version(name) == pinned_version(name) for name in PACKAGES):
        return wanted
    npm = shutil.which("npm")
    if npm is None:
        raise NodeUnavailable("npm not found on PATH: it installs BullMQ (npm ci)")
    if log:
        log(f"bullmq: npm ci in {os.path.relpath(BULLMQ_DIR)} (bullmq {wanted})")
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=BULLMQ_DIR,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0 or installed_version() != wanted:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise NodeUnavailable(f"npm ci failed in {BULLMQ_DIR} (exit {done.returncode}): {tail}")
    return wanted


def node_command(command: str, *args: str) -> list[str]:
    """The command line of `bench.js` `command` with `args`."""
    return [node_binary(), SCRIPT, command, *args]


def run_node(command: str, *args: str, stdin: str = "") -> dict[str, Any]:
    """Run `bench.js` `command` to the end; the JSON object it printed last."""
    done = subprocess.run(
        node_command(command, *args),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"bench.js {command} exited {done.returncode}: {tail}")
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def add_bulk(
    url: str,
    queue: str,
    jobs: int,
    *,
    per_call: int,
    delay_ms: int,
    data_bytes: int,
    ids: str = "default",
) -> dict[str, Any]:
    """`Queue.addBulk` of `jobs` delayed jobs, `per_call` a call: {"jobs", "seconds",
    "jobs_per_s"}; `ids` "default" (BullMQ's counter) or "26" (26 random characters)."""
    return run_node(
        "add-bulk",
        *("--url", url, "--queue", queue, "--jobs", str(jobs), "--per-call", str(per_call)),
        *("--delay-ms", str(delay_ms), "--data-bytes", str(data_bytes), "--ids", ids),
    )


def queue_patterns(queue: str) -> list[str]:
    """SCAN patterns of every key of BullMQ queue `queue` (default prefix)."""
    return [f"bull:{queue}:*"]


class BullmqPeer:
    name = "bullmq"
    db: int | None = None

    def __init__(self, busy_concurrency: int = BUSY_CONCURRENCY) -> None:
        self.busy_concurrency = busy_concurrency
        self.concurrency = "one Node process running BullMQ's Worker at the setting's concurrency"

    def version(self) -> str:
        return ensure_installed()

    def setting(self, name: str) -> str:
        if name == "default":
            return "concurrency=1 (default); no poll knob: it blocks until the next due job"
        return f"concurrency={self.busy_concurrency}"

    def worker_concurrency(self, setting: str) -> int:
        return 1 if setting == "default" else self.busy_concurrency

    def worker_commands(self, run: Run, setting: str) -> list[list[str]]:
        # benchlib.peer_tasks execs `node bench.js worker` with these
        args = ["bullmq", "--url", run.url, "--queue", run.queue]
        return [[*args, "--concurrency", str(self.worker_concurrency(setting))]]

    def enqueue_all(self, run: Run, items: Sequence[tuple[int, float]]) -> float:
        lines = "".join(f"[{index}, {due_ms:.3f}]\n" for index, due_ms in items)
        out = run_node("enqueue", "--url", run.url, "--queue", run.queue, stdin=lines)
        return float(out["seconds"])

    def cleanup(self, r: redis.Redis, run: Run) -> int:
        return drop_matching(r, queue_patterns(run.queue))
