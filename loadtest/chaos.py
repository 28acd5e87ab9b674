"""A seeded chaos soak with an exact reconciliation at the end.

    python loadtest/chaos.py --minutes 10 --seed 1
    python loadtest/chaos.py --minutes 2 --seed 7 --rate 1000 --out chaos-out
    python loadtest/chaos.py --minutes 10 --seed 1 --cluster
    python loadtest/chaos.py --minutes 2 --seed 7 --exclude outbox_poison,relay_stop
    python loadtest/chaos.py --minutes 2 --seed 7 --no-outbox
    python loadtest/chaos.py --minutes 2 --seed 7 --flow-rate 0

Producers (2 processes, enqueueing through a spool, a steady due rate: `--rate` jobs/s
with delays of 1-4 s), 3 scheduler nodes and 3 workers run as real processes against an
embedded server with ``appendonly yes`` (``appendfsync everysec``, ``maxmemory-policy
noeviction``), every one of them connected through a proxy the soak can cut, stall and
slow. Beside the producers a flow producer writes `--flow-rate` joins and continuations a
second on the same topic (`benchlib/chaos_roles.py`), some with a child cancelled. For
`--minutes` the soak injects faults drawn from `--seed`
(`benchlib/chaos_faults.py`): each class once in turn, one at a time, then overlapping
pairs. `--exclude` leaves classes out.

Beside them runs the PostgreSQL outbox (`benchlib/chaos_outbox.py`; not with
`--no-outbox`): a PostgreSQL of the soak's own on a free loopback port, ``wheelq outbox
init``, a producer committing `--outbox-rate` jobs/s through `wheelq.outbox.enqueue` (some
rolled back on purpose, some ids written as several ``replace=True`` versions) on a topic
of its own that the nodes schedule too, and two relays. Its fault classes (frozen relays,
a relay's held path, a relay's crash between Redis and its commit, poison rows, racing
replaces, one shard refused to the relays) run on a second lane of the schedule, seeded
from `--seed` as well, at the same time as the first: so a 2-minute run has each of them.

Then it heals everything, lets the producers drain their spools, waits until every job
due has fired and been acked and the outbox has drained, and reconciles
(`benchlib/chaos_report.py`):

- lost: acknowledged, and neither fired, cancelled, dead-lettered nor pending;
- fired twice (one attempt twice in the streams), early (before due, Redis clock);
- handled never (fired, no handler ran it), handled too often (beyond the worker's
  ``max_deliveries``: more than at-least-once allows);
- the flows (`benchlib/chaos_flows.py`): no parent or continuation stuck, lost, fired
  twice, fired before every job it awaits had run, or fired although one was cancelled;
- per fault class: the lateness spike of jobs due while it held and the recovery time;
- the outbox: every committed job fired exactly once (a replaced id with its last committed
  version's payload), none of a rolled-back transaction, every poison row in
  ``wheelq_outbox_rejected`` and nothing else there, no row left in ``wheelq_outbox``.

It writes ``OUT/result.json``, ``OUT/result.md`` and ``OUT/lateness.png`` (with
matplotlib), the processes' logs and records (``OUT/outbox-fired.log``: every entry
of the outbox's topic), and prints the Markdown and then the JSON
as its last line. The exit status is 1 when any count that must be 0 is not, the run did
not settle, or a process died without being told to (the faults only signal processes
that are ready: `benchlib/chaos_fleet.py`); the JSON's ``failures`` says which, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import redis
from benchlib.chaos_faults import FAULTS, Arena, Event, Fault, run_schedule
from benchlib.chaos_fleet import Fleet
from benchlib.chaos_outbox import FAULT_NAMES as OUTBOX_FAULT_NAMES
from benchlib.chaos_outbox import Outbox, server_args, write_fired
from benchlib.chaos_report import (
    by_fault,
    collect,
    failures,
    markdown,
    plot,
    reconcile_outbox,
    timeline,
)
from benchlib.chaos_target import Cluster, Standalone
from benchlib.postgres import Postgres

from wheelq import Admin
from wheelq.core.keys import all_shards
from wheelq.testing import percentile
from wheelq.testing.proxy import ProxyThread

SHARDS = 8
NODE_SETTINGS = {"lease_ttl_ms": 5000}
WORKER_SETTINGS = {
    "concurrency": 100,
    "visibility_timeout_ms": 5000,
    "claim_interval_ms": 1000,
    "max_deliveries": 10,
}
JUMPS_MS = (2000, -2000, 500)
MAIN_ROLES = ("producer", "flow_producer", "node", "worker")
OUTBOX_ROLES = ("outbox_producer", "relay")
OUTBOX_DRAIN_S = 60.0
"""How long after its producer stopped the outbox may take to place and fire everything."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=2000.0, help="due jobs/s (default 2000)")
    parser.add_argument("--cluster", action="store_true", help="a 3-primary cluster, replicas")
    parser.add_argument("--out", type=Path, default=None, help="default: a new temp dir")
    parser.add_argument("--server", choices=("valkey", "redis"), default=None)
    parser.add_argument("--no-outbox", action="store_true", help="no PostgreSQL outbox")
    parser.add_argument(
        "--flow-rate", type=float, default=4.0, help="joins and continuations/s (default 4)"
    )
    parser.add_argument(
        "--outbox-rate", type=float, default=40.0, help="outbox jobs committed/s (default 40)"
    )
    parser.add_argument("--exclude", default="", help="comma-separated fault classes to leave out")
    args = parser.parse_args()
    args.exclude = set(filter(None, args.exclude.split(",")))
    if unknown := args.exclude - set(FAULTS) - set(OUTBOX_FAULT_NAMES) - {"slot_migration"}:
        parser.error(f"unknown fault classes {sorted(unknown)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="wheelq-chaos-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[chaos {time.monotonic() - started:7.1f}s] {message}", file=sys.stderr, flush=True)

    topic = f"chaos-{args.seed}"
    signal.signal(signal.SIGTERM, _interrupted)  # clean up the fleet and the servers
    if args.cluster:
        target: Any = Cluster(args.server, topic, SHARDS)
    else:
        target = Standalone(args.server, () if args.no_outbox else server_args())
    try:
        with contextlib.nullcontext() if args.no_outbox else Postgres(unix_socket=False) as pg:
            result = soak(args, target, topic, out, log, pg)
    finally:
        target.close()
    (out / "result.json").write_text(json.dumps(result, indent=1))
    (out / "result.md").write_text(markdown(result))
    if plot(result, out / "lateness.png"):
        result["plot"] = str(out / "lateness.png")
    print(markdown(result))
    shown = {k: v for k, v in result.items() if k not in ("timeline", "faults", "outbox_faults")}
    print(json.dumps(shown))
    return 0 if result["ok"] else 1


def _wait_firing(direct: Any, topic: str, log: Any, timeout_s: float = 60.0) -> None:
    """Until every shard has fired a job: a fault (a node's kill above all) is then measured
    against a fleet at work, not one still taking its leases."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if all(int(direct.xlen(keys.ready)) for keys in all_shards(topic, SHARDS)):
            log(f"every shard firing after {time.monotonic() - started:.1f} s")
            return
        time.sleep(0.1)
    log(f"not every shard fired within {timeout_s:.0f} s: faults start all the same")


def soak(
    args: argparse.Namespace, target: Any, topic: str, out: Path, log: Any, pg: Postgres | None
) -> dict[str, Any]:
    direct = target.connect()
    offset_ms = _redis_offset_ms(direct)
    now_ms = lambda: int(time.time() * 1000 + offset_ms)  # noqa: E731
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(ProxyThread(target.port))
        url = target.url_via(proxy.port)
        fleet = Fleet(url, topic, out)
        stack.callback(fleet.close)
        outbox = None
        if pg is not None:
            outbox = Outbox(pg.dsn, f"{topic}-outbox", target, proxy, out, args.cluster)
            stack.enter_context(outbox)
        with Admin.from_url(target.url) as admin:
            admin.create_topic(topic, shards=SHARDS)
        also = {"also_topics": [outbox.topic]} if outbox else {}
        for i, jump in enumerate(JUMPS_MS):
            fleet.add("node", f"n{i}", {**NODE_SETTINGS, "clock_jump_ms": jump, **also})
        for i in range(3):
            fleet.add("worker", f"w{i}", WORKER_SETTINGS)
        start_ms = now_ms()
        for i in range(2):
            fleet.add("producer", f"p{i}", str(args.rate / 2), str(out / f"spool-p{i}.db"))
        if args.flow_rate > 0:
            fleet.add("flow_producer", "f0", str(args.flow_rate))
        if outbox:
            outbox.start(fleet, args.outbox_rate)
        excluded = {*target.excluded(), *args.exclude}
        faults = {k: f for k, f in (FAULTS | target.extra_faults()).items() if k not in excluded}
        outbox_faults = {}
        if outbox:
            outbox_faults = {k: f for k, f in outbox.faults().items() if k not in excluded}
        log(
            f"soak of {args.minutes} min, seed {args.seed}, {len(faults)} fault classes"
            f" and {len(outbox_faults)} of the outbox's"
        )
        _wait_firing(direct, topic, log)
        lane = _Lane(Arena(fleet, target, proxy, now_ms, OUTBOX_ROLES), outbox_faults, args, log)
        arena = Arena(fleet, target, proxy, now_ms, MAIN_ROLES)
        events = run_schedule(arena, faults, args.seed, args.minutes * 60, log)
        outbox_events = lane.join()
        log("healing: every process continued, dead ones restarted, producers draining")
        for member in fleet.members.values():
            fleet.resume(member.name)
        proxy.unstall()
        proxy.slow(0)
        if outbox:
            outbox.heal(log)
        fleet.revive()
        drain_by = time.monotonic() + OUTBOX_DRAIN_S
        exits = {"outbox_producer": fleet.stop("outbox_producer", timeout_s=30)}
        exits["producers"] = fleet.stop("producer", timeout_s=180)
        exits["flow_producers"] = fleet.stop("flow_producer", timeout_s=30)
        settled = _settle(direct, topic, log)
        drained = outbox.drain(direct, log, drain_by) if outbox else True
        exits["relays"] = fleet.stop("relay", 30)
        exits["nodes"], exits["workers"] = fleet.stop("node", 30), fleet.stop("worker", 60)
        deaths = {m.name: m.deaths for m in fleet.members.values() if m.deaths}
    account, fired, flows = collect(
        target, topic, SHARDS, out, WORKER_SETTINGS["max_deliveries"], args.flow_rate > 0
    )
    outbox_account = None
    if outbox:
        outbox_fired = outbox.fired(direct)
        write_fired(out / "outbox-fired.log", outbox_fired)
        outbox_account = reconcile_outbox(
            outbox.records(),
            outbox_fired,
            poison=outbox.poison(),
            rejected=outbox.rejected(),
            rows_left=outbox.rows_left(),
        )
    failed = failures(account, settled, deaths, outbox_account, drained, flows)
    firsts = sorted(r.lateness_ms for r in fired if r.attempt == 1)
    result: dict[str, Any] = {
        "seed": args.seed,
        "minutes": args.minutes,
        "rate": args.rate,
        "deployment": target.describe(),
        "out": str(out),
        "settled": settled,
        "ok": not failed,
        "failures": failed,
        **{k: account.as_dict()[k] for k in ("lost", "fired_twice", "early")},
        "account": account.as_dict(),
        "lateness_ms": {
            p: percentile(firsts, q) for p, q in (("p50", 50), ("p99", 99), ("p99.9", 99.9))
        }
        | {"max": firsts[-1] if firsts else None},
        "start_ms": start_ms,
        "faults": by_fault(fired, events, SHARDS),
        "timeline": timeline(fired, start_ms),
        "exits": exits,
        "unexpected_deaths": deaths,
    }
    if flows is not None:
        result["flows"] = flows.as_dict()
    if outbox_account is not None:
        result["outbox"] = outbox_account.as_dict() | {"drained": drained}
        result["outbox_faults"] = [_event_row(e, start_ms) for e in outbox_events]
    return result


class _Lane:
    """The outbox's faults on a schedule of their own, in a thread, beside the main one."""

    def __init__(
        self,
        arena: Arena,
        faults: dict[str, Fault],
        args: argparse.Namespace,
        log: Callable[[str], None],
    ) -> None:
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        if faults:
            run = (arena, faults, args.seed + 1, args.minutes * 60, lambda m: log(f"outbox {m}"))
            self.thread = threading.Thread(target=self._run, args=run, daemon=True)
            self.thread.start()

    def _run(self, *run: Any) -> None:
        try:
            self.events = run_schedule(*run)
        except BaseException as exc:  # raised again in the soak's thread
            self.error = exc

    def join(self) -> list[Event]:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.events


def _event_row(event: Event, start_ms: int) -> dict[str, Any]:
    return {
        "fault": event.fault,
        "paired": event.paired,
        "at_s": round((event.start_ms - start_ms) / 1000, 1),
        "held_ms": event.end_ms - event.start_ms,
        "detail": event.detail,
    }


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt


def _redis_offset_ms(conn: redis.Redis) -> float:
    """Redis TIME - local wall clock, from the quickest of 20 round trips."""
    best: tuple[float, float] = (float("inf"), 0.0)
    for _ in range(20):
        before = time.time()
        seconds, micros = conn.time()
        after = time.time()
        best = min(best, (after - before, seconds * 1000 + micros / 1000 - (before + after) * 500))
    return best[1]


def _settle(conn: redis.Redis, topic: str, log: Any, timeout_s: float = 180) -> bool:
    """Wait until every sorted set is empty (the producers have stopped: every job is due
    within 4 s) and every group has read and acked every entry; False when that did not
    happen within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    left: dict[str, int] = {}
    while time.monotonic() < deadline:
        left = {"pending": 0, "unacked": 0, "unread": 0}
        for keys in all_shards(topic, SHARDS):
            left["pending"] += int(conn.zcard(keys.delayed))
            for group in conn.xinfo_groups(keys.ready):
                left["unacked"] += int(group["pending"])
                left["unread"] += int(group.get("lag") or 0)
        if not any(left.values()):
            log("settled: nothing pending, every entry acked")
            return True
        time.sleep(0.5)
    log(f"did not settle in {timeout_s} s: {left}")
    return False


if __name__ == "__main__":
    sys.exit(main())
