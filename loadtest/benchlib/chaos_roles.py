"""The chaos soak's processes: producers, scheduler nodes and workers, each a real process
the soak can kill -9, SIGSTOP or arm at a crash point.

    python loadtest/benchlib/chaos_roles.py producer URL TOPIC NAME OUT_DIR RATE SPOOL
    python loadtest/benchlib/chaos_roles.py node URL TOPIC NAME OUT_DIR SETTINGS_JSON
    python loadtest/benchlib/chaos_roles.py worker URL TOPIC NAME OUT_DIR SETTINGS_JSON

Each appends what it was told to files in OUT_DIR with one unbuffered ``write`` per record,
so a kill -9 loses no record of something that happened (at most the line being written,
which the reader skips):

- a producer writes ``acked-NAME.log`` (one job id per line, after `enqueue_many`
  returned: the id is acknowledged) and ``cancelled-NAME.log`` (ids whose `cancel`
  returned True, or whose cancel's outcome is unknown: then Redis may have applied it);
- a worker writes ``runs-NAME.log``: ``job_id attempt`` per handler start.

A producer enqueues `RATE` jobs/s with explicit ids (``NAME-SEQ``) and delays of 1-4 s, so
the due rate is the enqueue rate, through a spool (`SPOOL`): an enqueue Redis cannot take
is spooled and replayed, and the call still returns. About 1 % of the jobs are cancelled
while pending. On SIGTERM it stops enqueueing, waits until its spool is empty and exits.

A node runs `Scheduler` on a `SkewedClock`: SIGUSR1 toggles a jump of its clock
(``clock_jump_ms`` in SETTINGS, default +2000), SIGUSR2 toggles slowed lease renewals.
``WHEELQ_CRASH_AT`` (``point:hits,...``) arms crash points in nodes and workers.

Once a process has installed every signal handler it has (SIGTERM, and a node's SIGUSR1
and SIGUSR2), it writes its pid to ``OUT_DIR/ready-NAME`` (`announce_ready`): before
that, such a signal would end it. The soak sends none before (`Fleet.wait_ready`).
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import random
import signal
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from wheelq import Client, Job, RedisUnavailableError, Scheduler, Worker
from wheelq.cli.services import run_worker
from wheelq.cli.signals import SignalFlag, run_until_signal
from wheelq.core.settings import SchedulerSettings
from wheelq.runtime import crash
from wheelq.store import connect
from wheelq.testing import faults
from wheelq.testing.faults import SkewedClock

TIMEOUTS = {"socket_timeout": 2, "socket_connect_timeout": 2}
TICK_S = 0.05
CANCEL_SHARE = 0.01
SPOOL_DRAIN_S = 120.0


class Log:
    """An append-only record file: one unbuffered write per record."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, lines: list[str]) -> None:
        if lines:
            os.write(self._fd, ("\n".join(lines) + "\n").encode())


def ready_path(out: Path, name: str) -> Path:
    """Where process `name` writes its pid once its signal handlers are installed."""
    return out / f"ready-{name}"


def announce_ready(out: Path, name: str) -> None:
    """Write this process's pid to `ready_path` (whole, or not at all)."""
    path = ready_path(out, name)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(str(os.getpid()))
    os.replace(partial, path)


def _ready_beside(out: Path, name: str) -> Callable[[], AbstractAsyncContextManager[None]]:
    """`run_until_signal`'s `beside`: entered once its SIGTERM handler is installed."""

    @asynccontextmanager
    async def beside() -> AsyncIterator[None]:
        announce_ready(out, name)
        yield

    return beside


def read_log(path: Path) -> list[str]:
    """The complete lines of a record file (a line cut by a kill -9 is skipped)."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    return [line for line in lines[:-1] if line]  # the last piece has no newline yet


def producer(url: str, topic: str, name: str, out: Path, rate: float, spool: str) -> None:
    acked, cancelled = Log(out / f"acked-{name}.log"), Log(out / f"cancelled-{name}.log")
    client = Client.from_url(url, spool=spool, redis_options=TIMEOUTS)
    stop = SignalFlag(signal.SIGTERM)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung one's stacks, to its log
    announce_ready(out, name)
    rng = random.Random(name)
    recent: deque[tuple[float, str]] = deque(maxlen=2000)  # (monotonic due, id): to cancel
    seq, sent, errors, started = 0, 0, 0, time.monotonic()
    while not stop.is_set():
        target = int((time.monotonic() - started) * rate)
        if target > sent:
            items = []
            for _ in range(min(target - sent, 2000)):
                delay = rng.uniform(1.0, 4.0)
                items.append({"payload": seq, "delay": delay, "job_id": f"{name}-{seq}"})
                recent.append((time.monotonic() + delay, f"{name}-{seq}"))
                seq += 1
            sent += len(items)
            try:
                ids = client.enqueue_many(topic, items)
            except Exception as exc:
                errors += 1
                logging.warning("enqueue_many failed: %r", exc)
            else:
                acked.write(ids)
            _cancel_some(client, topic, rng, recent, cancelled, len(items))
        stop.wait(TICK_S)
    deadline = time.monotonic() + SPOOL_DRAIN_S
    while client.spool_stats().depth and time.monotonic() < deadline:
        time.sleep(0.1)
    depth = client.spool_stats().depth
    client.close()
    print(json.dumps({"role": "producer", "sent": sent, "errors": errors, "spool_left": depth}))


def _cancel_some(
    client: Client,
    topic: str,
    rng: random.Random,
    recent: deque[tuple[float, str]],
    log: Log,
    batch: int,
) -> None:
    """Cancel about `CANCEL_SHARE` of a batch's worth among jobs due in more than 0.5 s."""
    now = time.monotonic()
    for _ in range(int(batch * CANCEL_SHARE + rng.random())):
        due, job_id = rng.choice(recent) if recent else (0.0, "")
        if due - now < 0.5:
            continue
        try:
            if client.cancel(topic, job_id):
                log.write([job_id])
        except RedisUnavailableError as exc:
            if exc.reason != "breaker_open":  # sent: it may have been applied
                log.write([job_id])
        except Exception:
            log.write([job_id])


def node(url: str, topic: str, name: str, out: Path, settings: dict[str, Any]) -> None:
    jump_ms = int(settings.pop("clock_jump_ms", 2000))
    clock = SkewedClock()
    executor = connect.async_executor(url, TIMEOUTS, None)
    scheduler = Scheduler(
        executor, [topic], SchedulerSettings.from_kwargs(settings), node_id=name, clock=clock
    )
    scheduler.owns_connection = True

    def toggle_jump(*_: object) -> None:
        clock.jump_ms = 0 if clock.jump_ms else jump_ms

    undo: list[Callable[[], None]] = []

    def toggle_slow_renewals(*_: object) -> None:
        if undo:
            undo.pop()()
        else:
            undo.append(faults.slow_renewals(scheduler))

    signal.signal(signal.SIGUSR1, toggle_jump)
    signal.signal(signal.SIGUSR2, toggle_slow_renewals)
    run_until_signal(scheduler, logging.getLogger("chaos.node"), beside=_ready_beside(out, name))


def worker(url: str, topic: str, name: str, out: Path, settings: dict[str, Any]) -> None:
    runs = Log(out / f"runs-{name}.log")

    async def handle(job: Job) -> None:
        runs.write([f"{job.id} {job.attempt}"])

    role = Worker.from_url(url, topic, handle, consumer=name, redis_options=TIMEOUTS, **settings)
    run_worker(role, _ready_beside(out, name))


def main() -> None:
    role, url, topic, name, out = sys.argv[1:6]
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    if spec := os.environ.get("WHEELQ_CRASH_AT"):
        crash.arm_from_spec(spec)
    rest = sys.argv[6:]
    if role == "producer":
        producer(url, topic, name, Path(out), float(rest[0]), rest[1])
    elif role == "node":
        node(url, topic, name, Path(out), json.loads(rest[0]))
    elif role == "worker":
        worker(url, topic, name, Path(out), json.loads(rest[0]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
