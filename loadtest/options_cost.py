"""What a job's options cost the client and the worker in CPU, on a baseline revision and on
this tree, in turns, in the same run; prints JSON (also written to --out).

    python loadtest/options_cost.py --baseline 184df4a --rounds 9
    python loadtest/options_cost.py --baseline 184df4a --only validate,client
    python loadtest/options_cost.py --child            # this tree alone

Each case is a call of the public or the worker's own code with no I/O, its CPU µs per job
(`time.process_time`):

- ``validate_*``: `validate_batch` of 20,000 prebuilt items (`enqueue_many`'s work before
  anything is sent): plain, with their own ids, own ids and keys, callbacks and traceparents;
  ``item_build``: making those plain `EnqueueItem`s;
- ``client_*``, ``async_*``: `Client.enqueue` / `AsyncClient.enqueue` with an executor that
  answers every call at once (what `takes()`, the keywords, validation, the envelope and the
  script call built cost a call); ``bulk``: `Client.enqueue_bulk` of 1,000 payloads a call,
  the same way;
- ``pack_*``, ``unpack_*``: `Envelope.pack` / `Envelope.unpack` of a plain envelope and of a
  retry's with every stored option; ``from_entry_*``: `Job.from_entry` (a worker's decode of
  each entry) of both kinds; ``retry_*``: `retry_envelope` of both kinds.

The baseline's wheelq is exported with `git archive` (as `feature_cost.py` does). Each round
starts one process a tree (PYTHONPATH), which runs this script's cases a run at a time, the
two in turns and the one to start swapped every run, so a burst of another session's load on
the shared cores costs both sides; a new pair each round, as one process's own layout moves
a case by up to 10% for as long as it lives. A round's figure is each side's best of
--repeats runs. For each case: each side's
median and range over the rounds, the ratio this/baseline round by round (its median is
``ratio_this_to_baseline``), the ratio of the two best runs, and in how many rounds this tree
was the faster.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"x" * 100
DELAY_S = 3600
NOW_MS = 1_700_000_000_000
SHARDS = 4
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CALLBACK = "https://example.com/hook"
ITEMS = 20_000
"""Items per `validate_batch` call."""
BULK = 1000
"""Payloads per `enqueue_bulk` call."""

Case = Callable[[], tuple[float, int]]
"""One run of a case: (CPU seconds, jobs)."""


def _cpu(fn: Callable[[], Any], jobs: int) -> tuple[float, int]:
    gc.collect()
    t = time.process_time()
    fn()
    return time.process_time() - t, jobs


def cases(scale: float) -> dict[str, Case]:
    """Every case of the tree that is imported (each API both trees have)."""
    import redis
    import redis.asyncio

    from wheelq import AsyncClient, Client, EnqueueItem
    from wheelq.core.callback import validate_callback
    from wheelq.core.job import Envelope, Field, Job
    from wheelq.core.payload import encode_payload
    from wheelq.core.retry import retry_envelope
    from wheelq.core.settings import ClientSettings
    from wheelq.producer.items import validate_batch
    from wheelq.store.call import Call
    from wheelq.store.enqueue import job_ids
    from wheelq.store.scripts import Placed

    n_items = max(100, int(ITEMS * scale))
    n_calls = max(100, int(5000 * scale))
    n_fast = max(1000, int(50_000 * scale))
    settings = ClientSettings()
    out: dict[str, Case] = {}

    def items(**options: Any) -> list[Any]:
        made = []
        for i in range(n_items):
            kw = {k: (v(i) if callable(v) else v) for k, v in options.items()}
            made.append(EnqueueItem(payload=PAYLOAD, delay=DELAY_S, **kw))
        return made

    kinds: dict[str, dict[str, Any]] = {
        "validate_plain": {},
        "validate_own_id": {"job_id": lambda i: f"job-{i:08d}"},
        "validate_own_id_key": {"job_id": lambda i: f"job-{i:08d}", "key": lambda i: f"k{i % 100}"},
        "validate_callback_trace": {"callback": CALLBACK, "traceparent": TRACEPARENT},
    }
    for name, options in kinds.items():
        batch = items(**options)
        out[name] = lambda batch=batch: _cpu(  # type: ignore[misc]
            lambda: validate_batch(settings, batch, None, NOW_MS), len(batch)
        )

    def build() -> None:
        for _ in range(n_items):
            EnqueueItem(payload=PAYLOAD, delay=DELAY_S)

    out["item_build"] = lambda: _cpu(build, n_items)

    def answer(calls: list[Call[Any]], **_: Any) -> list[Any]:
        return [
            c.parse([0] + [int(Placed.SCHEDULED)] * len(job_ids(c))) if c.script == "enqueue" else 1
            for c in calls
        ]

    async def answer_async(calls: list[Call[Any]], **_: Any) -> list[Any]:
        return answer(calls)

    client = Client(redis.Redis())
    client._executor.run = answer  # type: ignore[method-assign]
    aclient = AsyncClient(redis.asyncio.Redis())
    aclient._executor.run = answer_async  # type: ignore[method-assign]
    for c in (client, aclient):
        c._producer._shards["t"] = SHARDS
        c._producer._callback_topics.add("t")
    calls: dict[str, dict[str, Any]] = {
        "plain": {"delay": DELAY_S},
        "own_id_key": {"delay": DELAY_S, "key": "tenant-1"},  # an id a call: below
        "callback_trace": {"delay": DELAY_S, "callback": CALLBACK, "traceparent": TRACEPARENT},
    }
    for name, options in calls.items():
        own_id = name == "own_id_key"

        def sync(options: dict[str, Any] = options, own_id: bool = own_id) -> None:
            enqueue = client.enqueue
            if own_id:
                for i in range(n_calls):
                    enqueue("t", PAYLOAD, job_id=f"job-{i:08d}", replace=True, **options)
            else:
                for _ in range(n_calls):
                    enqueue("t", PAYLOAD, **options)

        async def run_async(options: dict[str, Any] = options, own_id: bool = own_id) -> None:
            enqueue = aclient.enqueue
            if own_id:
                for i in range(n_calls):
                    await enqueue("t", PAYLOAD, job_id=f"job-{i:08d}", replace=True, **options)
            else:
                for _ in range(n_calls):
                    await enqueue("t", PAYLOAD, **options)

        out[f"client_{name}"] = lambda sync=sync: _cpu(sync, n_calls)  # type: ignore[misc]
        if name != "callback_trace":
            out[f"async_{name}"] = lambda run_async=run_async: _cpu(  # type: ignore[misc]
                lambda: asyncio.run(run_async()), n_calls
            )

    payloads = [PAYLOAD] * BULK
    n_bulk = max(2, n_items // BULK)

    def bulk() -> None:
        for _ in range(n_bulk):
            client.enqueue_bulk("t", payloads, delay=DELAY_S)

    out["bulk"] = lambda: _cpu(bulk, n_bulk * BULK)

    packed_cb = validate_callback(CALLBACK).pack()
    envelopes = {
        "plain": Envelope(PAYLOAD, 1, 5, NOW_MS),
        "options": Envelope(
            PAYLOAD, 2, 5, NOW_MS, "g", "job-1", TRACEPARENT, packed_cb, "tenant-1", True
        ),
    }
    entry = {
        Field.ID: b"01HZX3V8Q4M5N6P7R8S9T0VWXY",
        Field.TOPIC: b"t",
        Field.DUE: b"1700000000000",
        Field.ATTEMPT: b"1",
        Field.MAX_ATTEMPTS: b"5",
        Field.PAYLOAD: encode_payload(PAYLOAD, 1 << 20),
        Field.ENQUEUED: b"1700000000000",
    }
    entries = {
        "plain": entry,
        "options": {
            **entry,
            Field.TRACE: TRACEPARENT.encode(),
            Field.CALLBACK: packed_cb,
            Field.KEY: b"tenant-1",
            Field.ORDERED: b"1",
        },
    }
    for kind in ("plain", "options"):
        envelope = envelopes[kind]
        data = envelope.pack()
        fields = entries[kind]
        job = Job.from_entry("1700000000000-0", fields, 1, 1)

        def pack(envelope: Any = envelope) -> None:
            p = envelope.pack
            for _ in range(n_fast):
                p()

        def unpack(data: bytes = data) -> None:
            u = Envelope.unpack
            for _ in range(n_fast):
                u(data)

        def from_entry(fields: Any = fields) -> None:
            read = Job.from_entry
            for _ in range(n_fast):
                read("1700000000000-0", fields, 1, 1)

        def retry(job: Any = job) -> None:
            for _ in range(n_fast):
                retry_envelope(job, PAYLOAD, NOW_MS, "g")

        out[f"pack_{kind}"] = lambda pack=pack: _cpu(pack, n_fast)  # type: ignore[misc]
        out[f"unpack_{kind}"] = lambda unpack=unpack: _cpu(unpack, n_fast)  # type: ignore[misc]
        out[f"from_entry_{kind}"] = lambda f=from_entry: _cpu(f, n_fast)  # type: ignore[misc]
        out[f"retry_{kind}"] = lambda retry=retry: _cpu(retry, n_fast)  # type: ignore[misc]
    return out


def serve(scale: float) -> None:
    """Answer the parent: the names of the cases, then for each name read from stdin one run's
    CPU µs per job, with the tree's wheelq (the first line says which one)."""
    import wheelq

    measured = cases(scale)
    print(json.dumps({"wheelq": wheelq.__file__, "cases": list(measured)}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        seconds, jobs = measured[name]()
        print(seconds / jobs * 1e6, flush=True)


def once(only: str, repeats: int, scale: float) -> dict[str, Any]:
    """Each case's best µs per job in this process (``--child``: this tree alone)."""
    import wheelq

    best: dict[str, float] = {}
    for name, case in cases(scale).items():
        if only and not any(part in name for part in only.split(",")):
            continue
        case()  # warm: packers, caches
        timed = [case() for _ in range(repeats)]
        best[name] = round(min(seconds / jobs for seconds, jobs in timed) * 1e6, 4)
    return {"wheelq": wheelq.__file__, "us_per_job": best}


def export(rev: str, into: Path) -> Path:
    """`rev`'s wheelq/ in `into`."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "wheelq"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


class Side:
    """A process measuring with one tree's wheelq, a run at a time."""

    def __init__(self, tree: Path, scale: float) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", "--scale", str(scale)]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout
        hello = json.loads(self._out.readline())
        if not Path(hello["wheelq"]).is_relative_to(tree):
            raise SystemExit(f"{tree}: wheelq was imported from {hello['wheelq']}, not the tree")
        self.cases: list[str] = hello["cases"]

    def run(self, case: str) -> float:
        self._in.write(case + "\n")
        self._in.flush()
        return float(self._out.readline())

    def close(self) -> None:
        self._in.close()
        self.proc.wait(timeout=60)


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def compare(baseline: str, rounds: int, only: str, repeats: int, scale: float) -> dict[str, Any]:
    """Each round, a new process on each side (a process's own layout, its hash seed and
    where its memory fell, moves a case by up to 10% for as long as it lives), each case run
    `repeats` times on each in turns, the one to start swapped every run; a round's figure
    is a side's best run."""
    runs: dict[str, dict[str, list[float]]] = {"baseline": {}, "this": {}}
    with tempfile.TemporaryDirectory(prefix="wheelq-options-cost-") as tmp:
        trees = {"baseline": export(baseline, Path(tmp) / "base"), "this": ROOT}
        turn = 0
        for n in range(rounds):
            print(f"round {n + 1}/{rounds} ...", file=sys.stderr, flush=True)
            sides = {which: Side(tree, scale) for which, tree in trees.items()}
            try:
                names = [c for c in sides["this"].cases if c in sides["baseline"].cases]
                names = [c for c in names if not only or any(p in c for p in only.split(","))]
                for name in names:
                    for side in sides.values():
                        side.run(name)  # warm: packers, caches
                    best: dict[str, float] = {}
                    for _ in range(repeats):
                        turn += 1
                        for which in ("baseline", "this") if turn % 2 else ("this", "baseline"):
                            us = sides[which].run(name)
                            best[which] = min(best.get(which, us), us)
                    for which, us in best.items():
                        runs[which].setdefault(name, []).append(us)
            finally:
                for side in sides.values():
                    side.close()
    figures: dict[str, Any] = {}
    for name in runs["this"]:
        base, this = runs["baseline"][name], runs["this"][name]
        ratios = [t / b for t, b in zip(this, base, strict=True)]
        figures[name] = {
            "baseline_us_per_job": _summary(base),
            "this_us_per_job": _summary(this),
            "ratio_this_to_baseline": round(statistics.median(ratios), 3),
            "ratio_of_bests": round(min(this) / min(base), 3),
            "ratio_by_round": _summary(ratios),
            "rounds_this_faster": sum(r < 1 for r in ratios),
        }
    return {
        "baseline": baseline,
        "rounds": rounds,
        "repeats": repeats,
        "scale": scale,
        "figures": figures,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="git revision to compare against (else: --child)")
    p.add_argument("--child", action="store_true", help="measure the imported wheelq once")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeats", type=int, default=5, help="runs of a case in one process")
    p.add_argument("--scale", type=float, default=1.0, help="jobs per run, times this")
    p.add_argument("--only", default="", help="the cases whose name holds one of these (a,b)")
    p.add_argument("--out", type=Path, default=Path("options-cost.json"))
    args = p.parse_args()
    if args.serve:
        serve(args.scale)
        return
    if args.child or not args.baseline:
        print(json.dumps(once(args.only, args.repeats, args.scale)))
        return
    report = compare(args.baseline, args.rounds, args.only, args.repeats, args.scale)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
