"""Redis work per job, counted in CPU instructions: a job's whole path (enqueue, fire, consume,
trim) against a `redis-server` run under valgrind's callgrind, for a baseline revision and for
this tree; prints the instructions per job of each phase and the ratios as JSON.

    python loadtest/redis_cost.py --baseline da7e8d3 [--jobs 5000] [--key-jobs 1]

With --key-jobs N every job carries a key shared by N jobs (the key index's cost: a key's
jobs noted as they are enqueued and leaving it as they fire).

With --python the process running the roles (producer, scheduler, worker, in turn) is run
under callgrind too, and its own instructions per job are counted the same way: the figure
that wall-clock worker and burst runs only estimate. About 50 times slower; a few thousand
jobs (--jobs 3000) are enough.

Why instructions: on a shared 2-core VM the wall-clock figures of `feature_cost.py` move by up
to 20% between identical runs, while the instructions the server executes for the same work
move by well under 1%.

Each phase runs the roles through their public API in one child process per tree (the
baseline exported with `git archive`, as in `feature_cost.py`); the counter is zeroed before a
phase and read after it, so setup is not counted. A first batch, not counted, brings the keys
to their working size (a hash past its listpack encoding, as in production); the trim phase
trims both batches and is halved. Timers (lease renewals, preload rounds) are counted with
the phase they run in: a few percent at a few thousand jobs per phase, except the worker's
under --python (consuming is counted less the same time idle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feature_cost import ROOT, export

from wheelq import AsyncAdmin

PHASES = ("enqueue", "fire", "consume", "trim")
SIDES = ("redis", "python")
SELF_OUT = "WHEELQ_COST_SELF_OUT"
"""Set by the parent with --python: where this child's own callgrind profile goes."""
PAYLOAD = b"x" * 100
SHARDS = 4


class Counter:
    """The instruction counter of a server process under callgrind."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = str(pid), out

    def zero(self) -> None:
        subprocess.run(["callgrind_control", "-z", self.pid], check=True, capture_output=True)

    def read(self) -> int:
        """Instructions since the last zero (dumps a profile and reads its summary)."""
        before = set(self.out.parent.glob(self.out.name + ".*"))
        subprocess.run(["callgrind_control", "-d", self.pid], check=True, capture_output=True)
        (dump,) = set(self.out.parent.glob(self.out.name + ".*")) - before
        for line in dump.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
        raise RuntimeError(f"{dump}: no summary line")


class Counters:
    """The server's counter and, with --python, this process's own (run under callgrind)."""

    def __init__(self, server: Counter) -> None:
        self.sides = {"redis": server}
        if own := os.environ.get(SELF_OUT):
            self.sides["python"] = Counter(os.getpid(), Path(own))

    def zero(self) -> None:
        for counter in self.sides.values():
            counter.zero()

    def read(self) -> dict[str, int]:
        return {side: counter.read() for side, counter in self.sides.items()}


async def child(
    url: str, pid: int, out: Path, jobs: int, key_jobs: int
) -> dict[str, dict[str, int]]:
    """Runs in the tree under test (PYTHONPATH): each phase, counted."""
    import redis.asyncio

    from wheelq import AsyncClient, EnqueueItem, Scheduler, Worker

    counter = Counters(Counter(pid, out))
    topic = f"cost-{time.time_ns()}"
    fast = {"preload_interval_ms": 200, "lease_ttl_ms": 10_000}
    counts: dict[str, dict[str, int]] = {}

    async def until(check: Any, what: str, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while not await check():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)

    async with AsyncClient.from_url(url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, SHARDS)
        r = redis.asyncio.Redis.from_url(url)
        shard_keys = [f"{{{topic}:{s}}}" for s in range(SHARDS)]

        async def in_stream() -> int:
            return sum([await r.xlen(f"{k}:ready") for k in shard_keys])

        async def batch(count: bool) -> None:
            """One batch of `jobs` enqueued, fired and consumed; counted if `count`."""
            zero = counter.zero if count else (lambda: None)
            zero()
            due_s = time.time() + 3600
            items = [
                EnqueueItem(
                    payload=PAYLOAD,
                    at=due_s,
                    key=f"k{count}-{i // key_jobs}" if key_jobs else None,
                )
                for i in range(jobs)
            ]
            for i in range(0, jobs, 1000):
                await client.enqueue_many(topic, items[i : i + 1000])
            if count:
                counts["enqueue"] = counter.read()
            now_ms = int(time.time() * 1000)
            for k in shard_keys:  # due now: the scheduler fires them at its first preload
                ids = await r.zrange(f"{k}:delayed", 0, -1)
                if ids:
                    await r.zadd(f"{k}:delayed", dict.fromkeys(ids, now_ms), xx=True)
            zero()
            node = Scheduler.from_url(url, [topic], **fast)
            await node.start()
            fired = jobs * (2 if count else 1)
            await until(lambda: _ge(in_stream(), fired), "every job in the stream")
            await node.stop()
            if count:
                counts["fire"] = counter.read()
            zero()
            started = time.monotonic()
            worker = Worker.from_url(url, topic, noop, concurrency=200)
            await worker.start()

            async def all_acked() -> bool:
                return int(worker.status()["acked"]) >= jobs

            await until(all_acked, "every job acked")
            took_s = time.monotonic() - started
            if count:
                counts["consume"] = counter.read()
                # The same time idle: what the worker's timers cost while it consumed (under
                # callgrind, 50 times slower, they weigh 50 times more per job).
                counter.zero()
                await asyncio.sleep(took_s)
                counts["consume_idle"] = counter.read()
            await worker.stop()

        async def noop(job: Any) -> None:
            return None

        await batch(count=False)  # the keys at their working size (hashes past listpack)
        await batch(count=True)

        counter.zero()
        node = Scheduler.from_url(url, [topic], retention_ms=0, trim_interval_ms=100, **fast)
        await node.start()
        await until(lambda: _eq(in_stream(), 0), "the streams trimmed")
        await node.stop()
        counts["trim"] = {k: v // 2 for k, v in counter.read().items()}  # both batches
    return counts


async def _ge(count: Any, n: int) -> bool:
    return int(await count) >= n


async def _eq(count: Any, n: int) -> bool:
    return int(await count) == n


def net(counts: dict[str, dict[str, int]], phase: str, side: str) -> int:
    """A phase's instructions on one side; consuming's less what the same time idle cost."""
    idle = counts["consume_idle"][side] if phase == "consume" else 0
    return max(0, counts[phase][side] - idle)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(server: str, tmp: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    """`server` under callgrind on a free loopback port, once it accepts connections:
    (its process, the port, the callgrind output path the counter dumps to)."""
    port = free_port()
    out = tmp / f"cg-{port}.out"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    proc = subprocess.Popen(
        [*valgrind, server, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port, out
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"{server} under valgrind did not start") from None
            time.sleep(0.2)


def script_variant(name: str, pieces: list[tuple[str, str]], label: str) -> str:
    """Script `name`'s text with each (piece, replacement) of `pieces` made at the piece's
    last place (the shared prelude comes first: a piece it shares with the script is
    replaced in the latter); a piece not found stops the run (`label` names the variant),
    so a changed script is noticed. The package's files are not touched."""
    from wheelq.store.scripts import script  # this tree's (the roles' children import theirs)

    source = script(name).source
    for old, new in pieces:
        head, found, tail = source.rpartition(old)
        if not found:
            raise SystemExit(f"variant {label!r}: the script no longer holds {old!r}")
        source = head + new + tail
    return source


def measure(
    tree: Path, jobs: int, key_jobs: int, server: str, tmp: Path, python: bool
) -> dict[str, dict[str, int]]:
    """One run of every phase with `tree`'s wheelq against a fresh server under callgrind
    (and, with `python`, the roles' process under callgrind too)."""
    proc, port, out = start_server(server, tmp)
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, __file__, "--child", f"redis://127.0.0.1:{port}"]
        cmd += [str(proc.pid), str(out), str(jobs), str(key_jobs)]
        if python:
            own = tmp / f"py-{port}.out"
            env[SELF_OUT] = str(own)
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={own}", *cmd]
        done = subprocess.run(cmd, check=False, env=env, cwd=tree, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the {tree} run failed:\n{done.stderr[-3000:]}")
        counts: dict[str, dict[str, int]] = json.loads(done.stdout.strip().splitlines()[-1])
        return counts
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="git revision to compare against (required)")
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--key-jobs", type=int, default=0, help="jobs a key (0: no keys)")
    p.add_argument("--server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument(
        "--python",
        action="store_true",
        help="count the roles' own instructions too (their process under callgrind: slow)",
    )
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        url, pid, out, jobs, key_jobs = args.child
        print(json.dumps(asyncio.run(child(url, int(pid), Path(out), int(jobs), int(key_jobs)))))
        return
    if not args.baseline:
        p.error("--baseline is required")
    if not shutil.which("valgrind"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="wheelq-rcost-") as tmp:
        trees = {"baseline": export(args.baseline, Path(tmp) / "base"), "this": ROOT}
        runs = {
            name: measure(tree, args.jobs, args.key_jobs, args.server, Path(tmp), args.python)
            for name, tree in trees.items()
        }
    report: dict[str, Any] = {
        "baseline": args.baseline,
        "jobs": args.jobs,
        "key_jobs": args.key_jobs,
        "server": args.server,
    }
    for side in SIDES if args.python else SIDES[:1]:
        report[side] = {}
        for phase in (*PHASES, "total"):
            per_job = {
                name: sum(net(c, p, side) for p in (PHASES if phase == "total" else (phase,)))
                / args.jobs
                for name, c in runs.items()
            }
            report[side][phase] = {
                "instructions_per_job": {name: round(v) for name, v in per_job.items()},
                "ratio_this_to_baseline": round(per_job["this"] / per_job["baseline"], 3),
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
