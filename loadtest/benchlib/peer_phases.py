"""The phases of a peer benchmark: enqueue only, and enqueue + a worker handling the jobs.

Each phase has a `Run` of its own (queue, keys, record file) and deletes its keys at the
end. A timed phase starts the peer's worker processes, checks with a ping job that they
handle delayed jobs, enqueues every job from this process (one call each), then waits
until every job ran or `drain_s` after the last due time, whichever is first.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from benchlib.common import Bench, ServerLoad, lateness, wait_until
from benchlib.peer_base import Peer, Run, worker_argv, worker_env
from benchlib.peer_records import Records, group_cpu_seconds, stop_group

READY_TIMEOUT_S = 30.0
PING_INDEX = -1


def enqueue_phase(bench: Bench, peer: Peer, run: Run, n: int) -> dict[str, Any]:
    """Enqueue `n` jobs due in an hour, no worker running; the rate."""
    bench.log(f"peers:   enqueue {n} delayed jobs")
    now_ms = time.time() * 1000
    items = [(i, now_ms + 3_600_000.0 + i) for i in range(n)]
    try:
        seconds = peer.enqueue_all(run, items)
    finally:
        cleanup(peer, run)
    return {"jobs": n, "jobs_per_s": round(n / seconds), "seconds": round(seconds, 3)}


def timed_phase(
    bench: Bench,
    peer: Peer,
    run: Run,
    setting: str,
    planned: list[tuple[int, float]],
    drain_s: float,
) -> tuple[dict[str, Any], list[float]]:
    """Handle `planned` (index, due ms after the worker is ready) with a worker.

    Returns the summary (lateness over the jobs that ran; `missing` ones had not started
    `drain_s` after the last due time) and the handler start times (epoch ms).
    """
    records = Records(run.record_path)
    with _worker(bench, peer, run, setting) as procs:
        ready_s = _ping(peer, run, records, procs)
        base_ms = time.time() * 1000
        items = [(i, base_ms + offset) for i, offset in planned]
        n, first_due_ms = len(items), min(due for _, due in items)
        last_due_ms = max(due for _, due in items)
        bench.log(f"peers:   {n} jobs (worker ready in {ready_s:.1f} s)")
        enqueue_s = peer.enqueue_all(run, items)
        enqueued_ms = time.time() * 1000
        r = bench.redis()
        load0, cpu0 = ServerLoad.read(r), group_cpu_seconds(p.pid for p in procs)
        wait_until(
            lambda: records.poll() >= n or not _alive(procs),
            timeout_s=max(0.0, last_due_ms / 1000 + drain_s - time.time()),
        )
        load = ServerLoad.read(r).since(load0)
        load["worker_cpu_s"] = round(group_cpu_seconds(p.pid for p in procs) - cpu0, 3)
        exits = [p.poll() for p in procs]
        r.close()
    records.poll()
    cleanup(peer, run)
    late = [start - due for index, due, start in records.rows if index >= 0]
    out: dict[str, Any] = {
        "jobs": n,
        "handled": records.handled(),
        "missing": n - records.handled(),
        "duplicates": records.duplicates(),
        "early": sum(1 for v in late if v < 0),
        "earliest_ms": round(min(late), 3) if late else None,  # < 0: started before due
        "handler_start_lateness_ms": lateness(late) if late else None,
        "enqueue_s": round(enqueue_s, 3),
        "enqueued_before_first_due": enqueued_ms <= first_due_ms,
        "deadline_s": drain_s,
        "while_handling": load,
        "first_due_ms": first_due_ms,
    }
    if any(code is not None for code in exits):
        out["worker_exit_codes"] = exits
        out["worker_log_tail"] = _log_tail(run)
    if records.bad_lines:
        out["bad_record_lines"] = records.bad_lines
    return out, [start for index, _, start in records.rows if index >= 0]


def cleanup(peer: Peer, run: Run) -> None:
    r = redis.Redis.from_url(run.url)
    try:
        peer.cleanup(r, run)
    finally:
        r.close()


def _ping(peer: Peer, run: Run, records: Records, procs: list[subprocess.Popen[bytes]]) -> float:
    """Send one job due now through the delayed path; wait until a handler ran it."""
    started = time.monotonic()
    peer.enqueue_all(run, [(PING_INDEX, time.time() * 1000)])

    def pinged() -> bool:
        records.poll()
        return records.seen(PING_INDEX) or not _alive(procs)

    if wait_until(pinged, READY_TIMEOUT_S) and _alive(procs):
        return time.monotonic() - started
    raise RuntimeError(
        f"{peer.name} worker did not run a ping job within {READY_TIMEOUT_S:.0f} s "
        f"(exit codes {[p.poll() for p in procs]}); its log ends: {_log_tail(run)}"
    )


@contextmanager
def _worker(
    bench: Bench, peer: Peer, run: Run, setting: str
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The worker processes of one phase, each in a session of its own so that stopping
    also ends what it forked (rq's scheduler and work horses). Output goes to a log."""
    env = worker_env()
    env["PEER_RECORD_FILE"] = run.record_path
    procs: list[subprocess.Popen[bytes]] = []
    with open(run.record_path + ".log", "ab") as log:
        try:
            for args in peer.worker_commands(run, setting):
                procs.append(
                    bench.spawn(
                        worker_argv(args),
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        start_new_session=True,
                    )
                )
            yield procs
        finally:
            for proc in procs:
                bench.stop(proc, timeout_s=15)
                stop_group(proc.pid)


def _alive(procs: list[subprocess.Popen[bytes]]) -> bool:
    return all(p.poll() is None for p in procs)


def _log_tail(run: Run, lines: int = 3) -> str:
    try:
        with open(run.record_path + ".log", errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:])
    except OSError:
        return ""
