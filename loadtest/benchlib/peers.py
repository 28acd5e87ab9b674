"""Peers: arq, rq, dramatiq and BullMQ on the same machine and Redis, default and aggressive.

    python loadtest/benchlib/peers.py [--quick] [--redis-url URL] [--only arq,rq] [--rate 50]

For each peer and two settings, "default" (its default poll / scheduler setting) and
"aggressive" (its poll knob turned down; `setting` in the result names knob and value):

- arq: `Worker(poll_delay=)`, "duration between polling the queue for new jobs" (arq API
  reference, `arq.worker.Worker`): 0.5 s by default, aggressive 0.01 s;
- rq: the scheduler's interval, "Active schedulers will check for scheduled jobs once
  every second" (RQ docs, Scheduling Jobs); `rq.scheduler.RQScheduler(interval=)` takes
  whole seconds only, so aggressive is 0: no sleep between passes, a busy loop;
- dramatiq: `Worker(worker_timeout=)`, "the number of milliseconds workers should wake up
  after if the queue is idle" (dramatiq API reference, `dramatiq.Worker`): 1000 ms by
  default, aggressive 10 ms;
- bullmq (Node.js, `benchlib.peer_bullmq`): no poll knob, its Worker blocks until the next
  delayed job is due; "default" is its default `concurrency` of 1, "aggressive" 50 (its
  no-op handler does nothing but record, so one at a time is what bounds it);

three phases, each on a queue (and keys) of its own with a fresh worker: the library's
own worker class, one process, the library's default concurrency (`concurrency`):

- enqueue: `enqueue_n` delayed jobs (due in an hour) from one process, one call each
  (arq: awaited one by one, it has no sync API); no worker runs;
- accuracy: `rate` x `duration_s` jobs due at a steady rate, all enqueued before the first
  is due; lateness = handler start - due, both `time.time()` on this machine;
- burst: `burst` jobs all due at one instant T; `all_started_s` = last handler start - T
  (None if some never started), `drain_jobs_per_s` = jobs started / (last start - T).

Handlers are no-ops that append (index, due, start) to a file, read back afterwards. A
phase waits for its jobs until `deadline_s` after the last due time, so a peer that falls
behind reports `missing` jobs instead of stretching the run; lateness percentiles cover
the jobs that ran (the missing ones were later still). `early` counts jobs started before
their due time. `while_handling` is Redis's load and the workers' CPU from the end of
the enqueue to the end of the wait. Benchmarks measure; nothing is asserted.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from typing import Any

_LOADTEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _LOADTEST not in sys.path:
    sys.path.insert(0, _LOADTEST)

from benchlib.common import Bench  # noqa: E402
from benchlib.peer_base import SETTINGS, Peer, Run, with_db  # noqa: E402
from benchlib.peer_phases import enqueue_phase, timed_phase  # noqa: E402

PEERS = ("arq", "rq", "dramatiq", "bullmq")


def load_peer(name: str) -> Peer:
    """The adapter of `name`; raises ImportError when the library is not installed
    (`NodeUnavailable` for BullMQ without Node.js and npm)."""
    if name == "arq":
        import arq  # noqa: F401

        from benchlib.peer_arq import ArqPeer

        return ArqPeer()
    if name == "rq":
        import rq  # noqa: F401

        from benchlib.peer_rq import RqPeer

        return RqPeer()
    if name == "dramatiq":
        import dramatiq  # noqa: F401
        from dramatiq.brokers.redis import RedisBroker  # noqa: F401

        from benchlib.peer_dramatiq import DramatiqPeer

        return DramatiqPeer()
    if name == "bullmq":
        from benchlib.peer_bullmq import BullmqPeer, ensure_installed

        ensure_installed()  # NodeUnavailable without node and npm
        return BullmqPeer()
    raise ValueError(f"unknown peer {name!r}; expected one of {', '.join(PEERS)}")


def run_peers(
    bench: Bench,
    *,
    rate: int = 1000,
    duration_s: float = 10.0,
    burst: int = 20_000,
    enqueue_n: int = 20_000,
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """{peer: {"default": {...}, "aggressive": {...}} or {"error": ...}} (see the module doc)."""
    if bench.quick:
        duration_s, burst, enqueue_n = min(duration_s, 3.0), min(burst, 2000), min(enqueue_n, 2000)
    sizes = {"rate": rate, "duration_s": duration_s, "burst": burst, "enqueue_n": enqueue_n}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="wheelq-peers-") as record_dir:
        for name in only or PEERS:
            try:
                peer = load_peer(name)
                version = peer.version()
            except Exception as exc:  # not installed (ImportError) or broken
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
                bench.log(f"peers: {name} unavailable: {exc}")
                continue
            results[name] = {}
            for setting in SETTINGS:
                bench.log(f"peers: {name} {setting} ({peer.setting(setting)})")
                try:
                    out = run_setting(bench, peer, setting, record_dir, **sizes)
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    out = {"error": f"{type(exc).__name__}: {exc}"}
                results[name][setting] = {
                    "setting": peer.setting(setting),
                    "version": version,
                    "concurrency": peer.concurrency,
                    **out,
                }
    return results


def run_setting(
    bench: Bench,
    peer: Peer,
    setting: str,
    record_dir: str,
    *,
    rate: int,
    duration_s: float,
    burst: int,
    enqueue_n: int,
    drain_s: float | None = None,
) -> dict[str, Any]:
    """The three phases of one peer at one setting: {"enqueue", "accuracy", "burst"}.

    A phase waits `drain_s` after its last due time at most (3 s quick, 15 s full)."""
    url = with_db(bench.url, peer.db)
    enqueue = enqueue_phase(bench, peer, Run.new(peer.name, url, record_dir, "enqueue"), enqueue_n)
    enqueue_rate = max(100.0, enqueue["jobs_per_s"])
    # Deadlines are generous but bounded, so that a peer that falls behind reports missing
    # jobs instead of stretching the run (quick: all peers well under 2 minutes).
    if drain_s is None:
        drain_s = 3.0 if bench.quick else 15.0
    n = max(1, round(rate * duration_s))
    first = _lead_ms(n, enqueue_rate)
    steady = [(i, first + i * 1000.0 / rate) for i in range(n)]
    run = Run.new(peer.name, url, record_dir, "accuracy")
    accuracy, _ = timed_phase(bench, peer, run, setting, steady, drain_s)
    at = _lead_ms(burst, enqueue_rate)
    run = Run.new(peer.name, url, record_dir, "burst")
    same_instant = [(i, at) for i in range(burst)]
    spike, starts_ms = timed_phase(bench, peer, run, setting, same_instant, drain_s)
    due_ms = spike.pop("first_due_ms")
    accuracy.pop("first_due_ms")
    if starts_ms:
        last_s = (max(starts_ms) - due_ms) / 1000
        spike["first_started_s"] = round((min(starts_ms) - due_ms) / 1000, 3)
        spike["all_started_s"] = round(last_s, 3) if spike["missing"] == 0 else None
        spike["last_started_s"] = round(last_s, 3)
        spike["drain_jobs_per_s"] = round(spike["handled"] / max(last_s, 1e-3))
    return {"enqueue": enqueue, "accuracy": {"rate_per_s": rate, **accuracy}, "burst": spike}


def _lead_ms(n: int, enqueue_rate: float) -> float:
    """How far ahead the first job is due so that all `n` enqueues finish before it:
    0.5 s + 1.5 x the time the enqueue phase's rate predicts."""
    return 500.0 + 1.5 * n / enqueue_rate * 1000.0


def main() -> int:
    import argparse
    import json

    from wheelq.testing import EmbeddedServer, find_server_binaries

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--quick", action="store_true", help="3 s, 2,000-job burst and enqueue")
    p.add_argument("--only", help=f"comma-separated peers (default: {','.join(PEERS)})")
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--burst", type=int, default=20_000)
    p.add_argument("--enqueue-n", type=int, default=20_000)
    args = p.parse_args()
    server = None
    url = args.redis_url
    if url is None:
        server = EmbeddedServer(find_server_binaries()[0])
        server.start()
        url = server.url
    bench = Bench(url, quick=args.quick, server_pid=server.pid if server else None)
    try:
        result = run_peers(
            bench,
            rate=args.rate,
            duration_s=args.duration,
            burst=args.burst,
            enqueue_n=args.enqueue_n,
            only=args.only.split(",") if args.only else None,
        )
    finally:
        bench.close()
        if server is not None:
            server.stop()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
