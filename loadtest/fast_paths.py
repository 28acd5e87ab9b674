"""What each fast path (docs/architecture.md, "Fast paths") saves against the plain code it
stands for, measured in the same run; prints JSON.

    python loadtest/fast_paths.py [--rounds 7] [--jobs 20000] [--part python,lua]

``python``: the CPU per job of the call each path sits in: `enqueue_many` of 100-byte jobs
due in an hour (its items' path, and a batch of alike items as `Producer.enqueue_many` takes
it) and `enqueue_bulk` of the same, with an executor answering every call at once
(its replies still parsed, its commands still packed by redis-py); a worker's
`Job.from_entry` and its handler runner's `run` of a no-op async handler; a replay's depth
check of a 1 KB dead letter; a single HTTP enqueue through the service's ASGI app
(`HttpEnqueues`: an embedded server's CPU is not this process's). Each path's plain twin is
the same call with that one piece swapped for the plain code (below, `PLAIN`); fast and
plain are run in turns, the order swapped every round (the VM has 2 busy cores: CPU time,
not wall time, and no figure from a run of its own). A gain is within the noise unless the
fast path was the faster of the pair in at least 80% of the rounds; ``plain_over_fast`` is
the pair's ratio, round by round (median, range); ``under_min_gain`` when its median is
under 1.05. A path within the noise or under 5% goes: no throughput figure of the bench
could show it.

``lua``: Redis's CPU instructions per job under valgrind's callgrind (as `emit_cost.py`,
which moves by well under 1% between runs): `enqueue.lua` in calls of 500 jobs in each of
its layouts against the general one (five arguments a job), and `emit_due.lua` in calls of
100 ids with one piece of the prelude or the script made plain at a time (within the noise:
the ranges over the rounds overlap).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import redis
from redis.connection import Connection

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emit_cost import emit_rounds
from redis_cost import Counter, script_variant, start_server

from wheelq import Admin, AsyncClient, EnqueueItem
from wheelq.core import job as job_module
from wheelq.core import payload as payload_module
from wheelq.core.job import Envelope, Field, Job
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import ClientSettings
from wheelq.producer import enqueue_bulk as bulk
from wheelq.producer import items
from wheelq.store import enqueue
from wheelq.store.call import Call
from wheelq.store.scripts import Placed, check, script_keys
from wheelq.testing import EmbeddedServer, find_server_binaries
from wheelq.web import api_jobs
from wheelq.web.app import WebService, create_app
from wheelq.worker.handler_runner import HandlerRunner

PAYLOAD = b"x" * 100
DELAY_S = 3600
NOW_MS = 1_700_000_000_000
SHARDS = 4
MAX_DEPTH = payload_module.MAX_PAYLOAD_DEPTH
NOISE_SHARE = 0.8
"""A gain is within the noise unless the fast path won at least this share of the rounds
(fast and plain run back to back in each)."""
MIN_GAIN = 0.05
"""A path stays when its median gain is at least this share of its call's CPU: less is a
gain no figure of the bench can show (its medians move by more between runs)."""


# --- python: one call's client work per job, each piece fast and plain ----------------------


def _plain_bulk_envelopes(
    packed: list[bytes], max_attempts: int, now_ms: int, traceparent: str | None
) -> list[bytes]:
    packer = items._packers()[1]
    return [
        job_module.pack_envelope(p, 1, max_attempts, now_ms, packer, traceparent=traceparent)
        for p in packed
    ]


def _plain_placed(reply: Any) -> list[Placed]:
    return [Placed(code) for code in check("enqueue", reply)[1:]]


def _plain_encode_payload(payload: Any, max_bytes: int, packer: Any = None) -> bytes:
    """`encode_payload` without the strict packer: every payload packed, then decoded back."""
    data = payload_module._encode_careful(payload)
    if len(data) > max_bytes:
        raise payload_module.PayloadTooLargeError("payload", "too large")
    if len(data) > payload_module.MAX_PAYLOAD_DEPTH and isinstance(payload, payload_module._NESTED):
        payload_module.check_depth(payload, data)
    return data


def _plain_built(**values: Any) -> Job:
    return Job(**values)


def _plain_stored_too_deep(data: bytes) -> bool:
    """`stored_too_deep` without counting list and map headers first: every payload decoded."""
    try:
        return payload_module._deeper_than(payload_module.decode_payload(data), MAX_DEPTH)
    except msgpack.StackError:
        return True
    except Exception:
        return False


async def _plain_run(self: HandlerRunner, job: Job) -> Any:
    """`HandlerRunner.run`'s way for a no-op handler, in a timeout context without a limit."""
    async with asyncio.timeout(self.timeout_s):
        value = await self._await(job)
    return None if value is None else self._kept(value)


@contextmanager
def swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


PLAIN: dict[str, tuple[str, Callable[[], Any]]] = {
    # name: (the call it is measured in, what makes its piece plain)
    "bulk: envelopes spliced from a shared head and tail": (
        "bulk",
        lambda: swapped(bulk, "_envelopes", _plain_bulk_envelopes),
    ),
    "items: alike items encoded as enqueue_bulk's columns": (
        "many_alike",
        lambda: swapped(items, "columns_of", lambda settings, chunk, batch: None),
    ),
    "items: a plain item's short path": (
        "many",
        lambda: swapped(items, "_PLAIN_TAIL", ("never",)),
    ),
    "store.enqueue: _PLACED table": ("many", lambda: swapped(enqueue, "_placed", _plain_placed)),
    "job: encode_payload's strict packer": (
        "many",
        lambda: swapped(items, "encode_payload", _plain_encode_payload),
    ),
    "enqueue.lua's shared layout (client side)": (
        "many",
        lambda: swapped(enqueue, "_shared_layout", lambda jobs: None),
    ),
    "job: Job built without __init__": (
        "from_entry",
        lambda: swapped(job_module, "_built", _plain_built),
    ),
    "web: fast_enqueue answered from ASGI": (
        "http",
        lambda: swapped(api_jobs, "topic_of", lambda scope: None),
    ),
    "handler_runner: no timeout context without a limit": (
        "run",
        lambda: swapped(HandlerRunner, "run", _plain_run),
    ),
    "job: stored_too_deep counts headers before decoding": (
        "replay_check",
        lambda: swapped(payload_module, "_may_be_deep", lambda data: True),
    ),
}


class InstantExecutor:
    """Answers each enqueue call at once: its commands packed as redis-py would send them,
    its reply (every job scheduled) parsed by the call's own parser."""

    def __init__(self) -> None:
        self._packer = Connection()

    def run(self, calls: list[Call[Any]], **_: Any) -> list[Any]:
        self._packer.pack_commands([c.wire() for c in calls])
        return [c.parse([0] + [int(Placed.SCHEDULED)] * _jobs_in(c)) for c in calls]


def _jobs_in(call: Call[Any]) -> int:
    return len(enqueue.job_ids(call))


class HttpEnqueues:
    """Single enqueues (``POST /v1/topics/T/jobs``, 100-byte string payloads due in an hour)
    sent to the HTTP service's ASGI app in this process, 64 in flight, against an embedded
    server (its CPU is not this process's): no sockets, no HTTP parsing, both the same for
    either path."""

    TOPIC = "fast-paths-http"

    def __init__(self) -> None:
        self.url = ""
        self._server: Any = None

    def url_of_server(self) -> str:
        if self._server is None:
            binary = next(iter(find_server_binaries()))
            self._server = EmbeddedServer(binary)
            self.url = self._server.__enter__().url
            with Admin.from_url(self.url) as admin:
                admin.create_topic(self.TOPIC, SHARDS)
        return self.url

    def close(self) -> None:
        if self._server is not None:
            self._server.__exit__(None, None, None)

    def cpu_seconds(self, jobs: int) -> float:
        return asyncio.run(self._run(jobs))

    async def _run(self, jobs: int) -> float:
        service = WebService(AsyncClient.from_url(self.url_of_server()))
        service.owns_client = True
        app = create_app(service)
        body = json.dumps({"payload": "x" * 100, "delay_ms": DELAY_S * 1000}).encode()
        scope = {
            "type": "http",
            "method": "POST",
            "path": f"/v1/topics/{self.TOPIC}/jobs",
            "raw_path": f"/v1/topics/{self.TOPIC}/jobs".encode(),
            "query_string": b"",
            "root_path": "",
            "scheme": "http",
            "http_version": "1.1",
            "server": ("127.0.0.1", 8080),
            "client": ("127.0.0.1", 50000),
            "headers": [
                (b"host", b"127.0.0.1:8080"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
        statuses: list[int] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await service.start()
        try:
            await app(dict(scope), receive, send)  # warm: the topic's shard count
            t = time.process_time()
            for i in range(0, jobs, 64):
                await asyncio.gather(
                    *(app(dict(scope), receive, send) for _ in range(min(64, jobs - i)))
                )
            seconds = time.process_time() - t
        finally:
            await service.stop()
        assert set(statuses) == {201}, set(statuses)
        return seconds


HTTP = HttpEnqueues()


def _calls(jobs: int) -> dict[str, Callable[[], float]]:
    """Each measured call: CPU seconds for `jobs` jobs."""
    from wheelq.producer import operations

    settings = ClientSettings()
    executor = InstantExecutor()
    size = settings.batch_size

    def place(writes: list[enqueue.JobWrite]) -> None:
        for _, call in operations.enqueue_calls("t", writes, SHARDS, size):
            executor.run([call])

    def many() -> float:
        t = time.process_time()
        for i in range(0, jobs, 20_000):
            chunk = [EnqueueItem(payload=PAYLOAD, delay=DELAY_S) for _ in range(20_000)]
            place(items.validate_batch(settings, chunk, None, NOW_MS + i))
        return time.process_time() - t

    def many_alike() -> float:
        # as Producer._enqueue_many: alike items as columns, else the items' path
        t = time.process_time()
        for i in range(0, jobs, 20_000):
            chunk = [EnqueueItem(payload=PAYLOAD, delay=DELAY_S) for _ in range(20_000)]
            batch = items.EncodeBatch(NOW_MS + i)
            columns = items.columns_of(settings, chunk, batch)
            if columns is None:
                place(items.validate_batch(settings, chunk, None, batch.now_ms, batch))
                continue
            due, ids, envelopes, lined = columns
            shards = bulk.by_shard(ids, envelopes, SHARDS, lined)
            for _, call in bulk.enqueue_calls("t", due, shards, size):
                executor.run([call])
        return time.process_time() - t

    def bulk_call() -> float:
        due = items.EncodeBatch(NOW_MS).due(DELAY_S, None)
        t = time.process_time()
        for i in range(0, jobs, 20_000):
            columns = bulk.encode([PAYLOAD] * 20_000, settings.max_payload_bytes, 5, NOW_MS + i,
                                  (), SHARDS)  # fmt: skip
            for _, call in bulk.enqueue_calls("t", due, columns, size):
                executor.run([call])
        return time.process_time() - t

    entry = {
        Field.ID: b"01HZX3V8Q4M5N6P7R8S9T0VWXY",
        Field.TOPIC: b"t",
        Field.DUE: b"1700000000000",
        Field.ATTEMPT: b"1",
        Field.MAX_ATTEMPTS: b"5",
        Field.PAYLOAD: payload_module.encode_payload(PAYLOAD, 1 << 20),
        Field.ENQUEUED: b"1700000000000",
    }

    def from_entry() -> float:
        read = Job.from_entry
        t = time.process_time()
        for i in range(jobs):
            read(f"1700000000000-{i}", entry, 1, 1)
        return time.process_time() - t

    async def noop(job: Job) -> None:
        return None

    runner = HandlerRunner(noop, timeout_ms=0, threads=1)
    job = Job.from_entry("1700000000000-0", entry)

    async def runs() -> None:
        run = runner.run
        for _ in range(jobs):
            await run(job)

    def run_call() -> float:
        t = time.process_time()
        asyncio.run(runs())
        return time.process_time() - t

    dead_payload = msgpack.packb({f"field-{i:02d}": "v" * 40 for i in range(20)})  # ~1 KB

    def replay_check() -> float:
        check = payload_module.stored_too_deep
        t = time.process_time()
        for _ in range(jobs):
            check(dead_payload)
        return time.process_time() - t

    def http() -> float:
        return HTTP.cpu_seconds(max(1, jobs // 20))

    return {
        "http": http,
        "many": many,
        "many_alike": many_alike,
        "bulk": bulk_call,
        "from_entry": from_entry,
        "run": run_call,
        "replay_check": replay_check,
    }


def python_part(rounds: int, jobs: int, only: str) -> dict[str, Any]:
    calls = _calls(jobs)
    names = [n for n in PLAIN if not only or any(part in n for part in only.split(","))]
    for call in {PLAIN[n][0] for n in names}:
        calls[call]()  # warm: packers, caches, imports
    times: dict[str, dict[str, list[float]]] = {n: {"fast": [], "plain": []} for n in names}
    for r in range(rounds):
        for name in names:
            call, plain = PLAIN[name]
            order = ["fast", "plain"] if r % 2 == 0 else ["plain", "fast"]
            for side in order:
                if side == "fast":
                    seconds = calls[call]()
                else:
                    with plain():
                        seconds = calls[call]()
                times[name][side].append(seconds / (jobs // 20 if call == "http" else jobs) * 1e6)
    out: dict[str, Any] = {}
    for name in names:
        call = PLAIN[name][0]
        fast, plain_us = times[name]["fast"], times[name]["plain"]
        ratios = [p / f for p, f in zip(plain_us, fast, strict=True)]  # round by round
        out[name] = {
            "call": call,
            "fast_us_per_job": _summary(fast),
            "plain_us_per_job": _summary(plain_us),
            "saved_us_per_job": round(statistics.median(plain_us) - statistics.median(fast), 3),
            "plain_over_fast": _summary(ratios),
            "rounds_faster": sum(r > 1 for r in ratios),
            "within_noise": sum(r > 1 for r in ratios) < NOISE_SHARE * rounds,
            "under_min_gain": statistics.median(ratios) < 1 + MIN_GAIN,
        }
    return out


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


# --- lua: Redis instructions per job, each piece fast and plain ------------------------------

ENQUEUE_LAYOUTS = {"general": None, "shared ''": "d0", "shared 'u'": "d0u", "shared 'n'": "d0n"}
"""Layout -> ARGV[5] (None: each job carries its mode and replace)."""

EMIT_PLAIN: dict[str, list[tuple[str, str]]] = {
    "as is": [],
    "wq_envelope: checks unrolled": [
        (
            "  local a, m, t = env[3], env[4], env[5]\n  if ",
            "  local a, m, t = nil\n  if false and ",
        )
    ],
    "emit_due: wq_fired's usual case inline": [
        (
            "if (env[6] == nil or env[6] == '') and (env[7] == nil or env[7] == '') then\n"
            "            n_rec = n_rec + 2",
            "if false then\n            n_rec = n_rec + 2",
        )
    ],
    "wq_counts: spelled counts kept": [
        (
            "local attempt, max_attempts = wq_counts(env[3], env[4])",
            "local attempt, max_attempts = tostring(env[3]), tostring(env[4])",
        )
    ],
    "wq_fmt: whole numbers by %d": [
        ("    return string.format('%d', n)\n", "    return string.format('%.0f', n)\n")
    ],
}
"""Variant -> (piece of `emit_due.lua` with its prelude, the plain code in its place)."""


def enqueue_rounds(
    r: redis.Redis, counter: Counter, jobs: int, layout: str | None, tag: str
) -> int:
    """Instructions to enqueue `jobs` new jobs due in an hour, 500 a call, in `layout`."""
    sha = r.script_load(script_variant("enqueue", [], "as is"))
    keys = script_keys("enqueue", ShardKeys("fast-paths", 0))
    envelope = Envelope(PAYLOAD, 1, 5, NOW_MS).pack()
    counter.zero()
    for i in range(0, jobs, 500):
        args: list[Any] = ["fast-paths", "w", 0, "", "" if layout is None else layout]
        for j in range(i, min(i + 500, jobs)):
            job_id = f"{tag}-{j:020d}"
            if layout is None:
                args += [job_id, "d", DELAY_S * 1000, "0", envelope]
            else:
                args += [job_id, DELAY_S * 1000, envelope]
        r.evalsha(sha, len(keys), *keys, *args)
    count = counter.read()
    return count


def lua_part(rounds: int, jobs: int, server: str) -> dict[str, Any]:
    enqueue: dict[str, list[float]] = {name: [] for name in ENQUEUE_LAYOUTS}
    emit: dict[str, list[float]] = {name: [] for name in EMIT_PLAIN}
    with tempfile.TemporaryDirectory(prefix="wheelq-fast-paths-") as tmp:
        proc, port, out = start_server(server, Path(tmp))
        try:
            r = redis.Redis(port=port)
            counter = Counter(proc.pid, out)
            shas = {
                name: r.script_load(script_variant("emit_due", pieces, name))
                for name, pieces in EMIT_PLAIN.items()
            }
            enqueue_rounds(r, counter, jobs, None, "warm")  # the hash past its listpack
            for n in range(rounds):
                names = list(ENQUEUE_LAYOUTS)
                for name in names if n % 2 == 0 else names[::-1]:
                    count = enqueue_rounds(r, counter, jobs, ENQUEUE_LAYOUTS[name], f"{n}{name}")
                    enqueue[name].append(count / jobs)
                names = list(EMIT_PLAIN)
                for name in names if n % 2 == 0 else names[::-1]:
                    emit[name].append(emit_rounds(r, counter, shas[name], jobs, 100) / jobs)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    general = statistics.median(enqueue["general"])
    as_is = statistics.median(emit["as is"])
    return {
        "enqueue_per_job": {
            name: {
                **_summary(values),
                "general_over_this": round(general / statistics.median(values), 3),
                "within_noise": max(values) >= min(enqueue["general"]),
            }
            for name, values in enqueue.items()
        },
        "emit_per_job": {
            name: {
                **_summary(values),
                "plain_over_fast": round(statistics.median(values) / as_is, 3),
                "within_noise": min(values) <= max(emit["as is"]),
            }
            for name, values in emit.items()
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per call measured (python)")
    p.add_argument("--lua-jobs", type=int, default=3000, help="jobs per round (lua)")
    p.add_argument("--part", default="python,lua", help="python, lua or both")
    p.add_argument(
        "--only", default="", help="python: the paths whose name holds one of these (a,b)"
    )
    p.add_argument("--server", default=shutil.which("redis-server") or "redis-server")
    args = p.parse_args()
    report: dict[str, Any] = {"rounds": args.rounds}
    parts = args.part.split(",")
    if "python" in parts:
        try:
            report["python"] = {
                "jobs": args.jobs,
                "http_requests": args.jobs // 20,
                **python_part(args.rounds, args.jobs, args.only),
            }
        finally:
            HTTP.close()
    if "lua" in parts:
        if not shutil.which("valgrind"):
            raise SystemExit("--part lua needs valgrind (apt-get install valgrind)")
        report["lua"] = {
            "jobs": args.lua_jobs,
            "server": args.server,
            **lua_part(args.rounds, args.lua_jobs, args.server),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
