"""The chaos soak's processes: producers, scheduler nodes and workers, and the outbox's
producer and relays, each a real process the soak can kill -9, SIGSTOP or arm at a crash
point.

    python loadtest/benchlib/chaos_roles.py producer URL TOPIC NAME OUT_DIR RATE SPOOL
    python loadtest/benchlib/chaos_roles.py node URL TOPIC NAME OUT_DIR SETTINGS_JSON
    python loadtest/benchlib/chaos_roles.py worker URL TOPIC NAME OUT_DIR SETTINGS_JSON
    python loadtest/benchlib/chaos_roles.py flow_producer URL TOPIC NAME OUT_DIR RATE
    python loadtest/benchlib/chaos_roles.py outbox_producer URL TOPIC NAME OUT_DIR DSN RATE
    python loadtest/benchlib/chaos_roles.py relay URL TOPIC NAME OUT_DIR DSN SETTINGS_JSON

Each appends what it was told to files in OUT_DIR with one unbuffered ``write`` per record,
so a kill -9 loses no record of something that happened (at most the line being written,
which the reader skips):

- a producer writes ``acked-NAME.log`` (one job id per line, after `enqueue_many`
  returned: the id is acknowledged) and ``cancelled-NAME.log`` (ids whose `cancel`
  returned True, or whose cancel's outcome is unknown: then Redis may have applied it);
- a worker writes ``runs-NAME.log``: ``job_id attempt ms`` per handler start (`ms`: the
  wall clock's, this machine's as Redis's);
- a flow producer writes ``flows-NAME.log``: ``J parent child,child,...`` per join
  `enqueue_flow` returned, ``C job after`` per continuation `enqueue(after=)` returned,
  ``U parent`` per call whose outcome is unknown (it raised: children or the parent may be
  written), and ``X job 1`` / ``X job ?`` per cancel of a child or a followed job that
  returned True / whose outcome is unknown (``X job 0``: it returned False);
- an outbox producer writes ``outbox-jobs-NAME.log``: ``C job_id version ms`` per job of a
  transaction that committed (`ms`: when it ended, on the wall clock), ``R ...`` of one it
  rolled back on purpose, ``U ...`` of one whose commit's outcome is unknown (its
  connection failed), after the transaction ended.

A producer enqueues `RATE` jobs/s with explicit ids (``NAME-SEQ``) and delays of 1-4 s, so
the due rate is the enqueue rate, through a spool (`SPOOL`): an enqueue Redis cannot take
is spooled and replayed, and the call still returns. About 1 % of the jobs are cancelled
while pending. On SIGTERM it stops enqueueing, waits until its spool is empty and exits.

A flow producer writes `RATE` flows/s on TOPIC beside the producers, through no spool:
joins (``NAME-jSEQ`` awaiting 2-6 children ``NAME-jSEQ-cK`` due in 1-3 s, on_child_failure
``fail``) and continuations (``NAME-bSEQ`` after ``NAME-aSEQ``, due 1-3 s ahead, with
`delay` 0); `FLOW_CANCEL_SHARE` of them has a child or its followed job cancelled while
pending, so its parent must never run. On SIGTERM it stops and exits.

An outbox producer commits `RATE` jobs/s into the outbox (`wheelq.outbox.enqueue` on
psycopg), 1-4 a transaction, due in 1-4 s, with ids ``NAME-SEQ`` and the payload ``[id,
version]``; `ROLLBACK_SHARE` of its transactions roll back on purpose. Beside them it
writes replace series: ids ``NAME-rSEQ`` written 3-4 times with ``replace=True``, a version
in each of its next transactions, each version due later than the one before
(`replace_delay_s`), so an older version placed last fires early, with its own payload. A relay runs
`wheelq.outbox.Relay` (SETTINGS are its `RelaySettings`) until SIGTERM.

A node runs `Scheduler` on a `SkewedClock`: SIGUSR1 toggles a jump of its clock
(``clock_jump_ms`` in SETTINGS, default +2000), SIGUSR2 toggles slowed lease renewals;
``also_topics`` in SETTINGS are scheduled beside TOPIC (the outbox's topic).
``WHEELQ_CRASH_AT`` (``point:hits,...``) arms crash points in nodes, workers and relays.

Once a process has installed every signal handler it has (SIGTERM, and a node's SIGUSR1
and SIGUSR2), it writes its pid to ``OUT_DIR/ready-NAME`` (`announce_ready`): before
that, such a signal would end it. The soak sends none before (`Fleet.wait_ready`).
"""

from __future__ import annotations

import asyncio
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

from wheelq import Client, Job, JobSpec, RedisUnavailableError, Scheduler, Worker
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
ROLLBACK_SHARE = 0.1
"""Of the outbox producer's transactions: rolled back on purpose (none of their jobs fires)."""
SERIES_SHARE = 0.3
"""Of its transactions: one that begins a replace series (at most `SERIES_LIVE` at once)."""
SERIES_LIVE = 5
FLOW_CANCEL_SHARE = 0.1
"""Of the flow producer's flows: one whose child (or followed job) it cancels while pending."""


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
    topics = [topic, *settings.pop("also_topics", [])]
    clock = SkewedClock()
    executor = connect.async_executor(url, TIMEOUTS, None)
    scheduler = Scheduler(
        executor, topics, SchedulerSettings.from_kwargs(settings), node_id=name, clock=clock
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
        runs.write([f"{job.id} {job.attempt} {int(time.time() * 1000)}"])

    role = Worker.from_url(url, topic, handle, consumer=name, redis_options=TIMEOUTS, **settings)
    run_worker(role, _ready_beside(out, name))


def flow_producer(url: str, topic: str, name: str, out: Path, rate: float) -> None:
    records = Log(out / f"flows-{name}.log")
    client = Client.from_url(url, redis_options=TIMEOUTS)
    stop = SignalFlag(signal.SIGTERM)
    announce_ready(out, name)
    rng = random.Random(name)
    seq, errors, started = 0, 0, time.monotonic()
    while not stop.is_set():
        while seq < (time.monotonic() - started) * rate and not stop.is_set():
            seq += 1
            try:
                records.write(_one_flow(client, topic, f"{name}-", seq, rng))
            except Exception as exc:
                errors += 1
                logging.warning("flow %d failed: %r", seq, exc)
                records.write([f"U {name}-{'j' if seq % 2 else 'b'}{seq}"])
        stop.wait(TICK_S)
    client.close()
    print(json.dumps({"role": "flow_producer", "flows": seq, "errors": errors}))


def _one_flow(client: Client, topic: str, prefix: str, seq: int, rng: random.Random) -> list[str]:
    """A join (odd `seq`) or a continuation (even), and perhaps a cancel: its records."""
    if seq % 2:
        parent = f"{prefix}j{seq}"
        children = [f"{parent}-c{k}" for k in range(rng.randint(2, 6))]
        client.enqueue_flow(
            JobSpec(topic, seq, job_id=parent),
            [JobSpec(topic, seq, job_id=c, delay=rng.uniform(1.0, 3.0)) for c in children],
        )
        lines, followed = [f"J {parent} {','.join(children)}"], children
    else:
        first, then = f"{prefix}a{seq}", f"{prefix}b{seq}"
        client.enqueue(topic, seq, job_id=first, delay=rng.uniform(1.0, 3.0))
        client.enqueue(topic, seq, job_id=then, after=first)
        lines, followed = [f"C {then} {first}"], [first]
    if rng.random() < FLOW_CANCEL_SHARE:
        victim = rng.choice(followed)
        try:
            lines.append(f"X {victim} {int(client.cancel(topic, victim))}")
        except Exception:
            lines.append(f"X {victim} ?")
    return lines


def replace_delay_s(version: int) -> float:
    """The delay of a replace series' `version`: each later than the one before, and long
    enough that every version is placed before the first is due, relay faults and all."""
    return 8.0 + 2.0 * version


def outbox_producer(topic: str, name: str, out: Path, dsn: str, rate: float) -> None:
    import psycopg

    from wheelq import outbox

    records = Log(out / f"outbox-jobs-{name}.log")
    stop = SignalFlag(signal.SIGTERM)
    announce_ready(out, name)
    rng = random.Random(name)
    conn: psycopg.Connection[Any] | None = None
    series: list[list[Any]] = []  # [job id, its next version, versions left]
    counts = {"C": 0, "R": 0, "U": 0}
    seq, sent, started = 0, 0, time.monotonic()
    while not stop.is_set():
        while sent < (time.monotonic() - started) * rate and not stop.is_set():
            jobs: list[tuple[str, int, float, bool]] = []  # id, version, delay (s), replace
            for _ in range(rng.randint(1, 4)):
                jobs.append((f"{name}-{seq}", 1, rng.uniform(1.0, 4.0), False))
                seq += 1
            if len(series) < SERIES_LIVE and rng.random() < SERIES_SHARE:
                series.append([f"{name}-r{seq}", 1, rng.randint(3, 4)])
                seq += 1
            for one in series:  # a version a transaction: back to back, for the relays to race
                jobs.append((one[0], one[1], replace_delay_s(one[1]), True))
                one[1], one[2] = one[1] + 1, one[2] - 1
            series = [one for one in series if one[2] > 0]
            rollback = rng.random() < ROLLBACK_SHARE
            try:
                conn = conn or psycopg.connect(dsn, autocommit=True, connect_timeout=5)
                with conn.transaction():
                    for job_id, version, delay, replace in jobs:
                        outbox.enqueue(
                            conn, topic, [job_id, version], delay=delay, job_id=job_id,
                            replace=replace,
                        )  # fmt: skip
                    if rollback:
                        raise psycopg.Rollback
                outcome = "R" if rollback else "C"
            except psycopg.Error as exc:
                logging.warning("outbox transaction failed: %r", exc)
                outcome = "U"
                if conn is not None:
                    conn.close()
                conn = None
            ended_ms = int(time.time() * 1000)
            records.write([f"{outcome} {j} {v} {ended_ms}" for j, v, _, _ in jobs])
            counts[outcome] += len(jobs)
            sent += len(jobs)
        stop.wait(TICK_S)
    if conn is not None:
        conn.close()
    print(json.dumps({"role": "outbox_producer", "sent": sent, **counts}))


def relay(url: str, name: str, out: Path, dsn: str, settings: dict[str, Any]) -> None:
    from wheelq.core.settings import RelaySettings
    from wheelq.outbox import Relay
    from wheelq.producer.async_client import AsyncClient

    async def run() -> dict[str, object]:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        client = AsyncClient.from_url(url, redis_options=TIMEOUTS)
        part = Relay(client, dsn, RelaySettings(**settings))
        await part.start()
        announce_ready(out, name)
        await stop.wait()
        await part.stop()
        await client.aclose()
        return {k: part.status()[k] for k in ("relayed", "duplicates", "rejected")}

    print(json.dumps({"role": "relay", **asyncio.run(run())}))


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
    elif role == "flow_producer":
        flow_producer(url, topic, name, Path(out), float(rest[0]))
    elif role == "outbox_producer":
        outbox_producer(topic, name, Path(out), rest[0], float(rest[1]))
    elif role == "relay":
        relay(url, name, Path(out), rest[0], json.loads(rest[1]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
