"""What a job's options cost the client and the worker in CPU, on a baseline revision and on
this tree, in turns, in the same run; prints JSON (also written to --out).

    python loadtest/options_cost.py --baseline 184df4a --rounds 9
    python loadtest/options_cost.py --baseline 184df4a --only validate,client
    python loadtest/options_cost.py --child            # this tree alone, one round

Each case is a call of the public or the worker's own code with no I/O, its CPU µs per job
(`time.process_time`, the best of --repeats runs in one process, so another session's burst
on the shared cores costs a run, not the round):

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

The baseline is exported with `git archive` (as `feature_cost.py` does) and this script is
run once a round against each tree (PYTHONPATH), the order swapped every round. For each
case: the median over the rounds on each side, their ratio, the ratio round by round
(median, min, max) and in how many rounds this tree was the faster.
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


def child(only: str, repeats: int, scale: float) -> dict[str, Any]:
    """Each case's best µs per job in this process, with the tree's wheelq."""
    import wheelq

    measured = {
        name: case
        for name, case in cases(scale).items()
        if not only or any(part in name for part in only.split(","))
    }
    best: dict[str, float] = {}
    for name, case in measured.items():
        case()  # warm: packers, caches
        runs = []
        for _ in range(repeats):
            seconds, jobs = case()
            runs.append(seconds / jobs * 1e6)
        best[name] = round(min(runs), 4)
    return {"wheelq": wheelq.__file__, "us_per_job": best}


def export(rev: str, into: Path) -> Path:
    """`rev`'s wheelq/ in `into`."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "wheelq"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_child(tree: Path, only: str, repeats: int, scale: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--only", only]
    cmd += ["--repeats", str(repeats), "--scale", str(scale)]
    done = subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout)
    if not Path(result["wheelq"]).is_relative_to(tree):
        raise SystemExit(f"{tree}: wheelq was imported from {result['wheelq']}, not the tree")
    us: dict[str, float] = result["us_per_job"]
    return us


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def compare(baseline: str, rounds: int, only: str, repeats: int, scale: float) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="wheelq-options-cost-") as tmp:
        trees = {"baseline": export(baseline, Path(tmp) / "base"), "this": ROOT}
        for n in range(rounds):
            for name in ["baseline", "this"] if n % 2 == 0 else ["this", "baseline"]:
                print(f"round {n + 1}/{rounds}: {name} ...", file=sys.stderr, flush=True)
                runs[name].append(run_child(trees[name], only, repeats, scale))
    figures: dict[str, Any] = {}
    for case in runs["this"][0]:
        base = [r[case] for r in runs["baseline"]]
        this = [r[case] for r in runs["this"]]
        ratios = [t / b for t, b in zip(this, base, strict=True)]
        figures[case] = {
            "baseline_us_per_job": _summary(base),
            "this_us_per_job": _summary(this),
            "ratio_this_to_baseline": round(statistics.median(this) / statistics.median(base), 3),
            "ratio_by_round": _summary(ratios),
            "rounds_this_faster": sum(r < 1 for r in ratios),
        }
    return {"baseline": baseline, "rounds": rounds, "repeats": repeats, "figures": figures}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="git revision to compare against (else: --child)")
    p.add_argument("--child", action="store_true", help="measure the imported wheelq once")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeats", type=int, default=5, help="runs of a case in one process")
    p.add_argument("--scale", type=float, default=1.0, help="jobs per run, times this")
    p.add_argument("--only", default="", help="the cases whose name holds one of these (a,b)")
    p.add_argument("--out", type=Path, default=Path("options-cost.json"))
    args = p.parse_args()
    if args.child or not args.baseline:
        print(json.dumps(child(args.only, args.repeats, args.scale)))
        return
    report = compare(args.baseline, args.rounds, args.only, args.repeats, args.scale)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
