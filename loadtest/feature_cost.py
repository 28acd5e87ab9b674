"""What a change costs: `bench.py`'s enqueue, accuracy, burst and worker scenarios on a baseline
revision and on this tree, in turns, in the same run; prints the medians and the ratios as
JSON (also written to --out).

    python loadtest/feature_cost.py --baseline da7e8d3 --rounds 3
    python loadtest/feature_cost.py --baseline 1e431b7 --rounds 5 --scenarios limit,enqueue

With ``limit`` among the scenarios, `enqueue_many` is also divided by raw redis-py's
ZADD+HSET pipelines of the same run (``enqueue_many_to_raw_pipeline``) and by its raw Lua
batch (``enqueue_many_to_raw_lua``; a tree whose bench has none gives none), and the no-op
worker by raw XREADGROUP+XACK (``worker_to_raw_consume``).

The baseline is exported with `git archive` into a temporary directory and imported from
there (PYTHONPATH), so nothing in this checkout changes. The order alternates each round
(baseline first, then this tree first, ...) so a drift of the machine does not favour one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

AT_10K = {"rate_per_s": 10_000}
"""In a list of per-rate results: the one at 10,000 jobs/s."""

FIGURES: dict[str, tuple[Any, ...]] = {
    "enqueue_many_jobs_per_s": ("enqueue", "enqueue_many", "jobs_per_s"),
    "raw_pipeline_enqueue_jobs_per_s": ("limit", "enqueue_jobs_per_s"),
    "raw_lua_enqueue_jobs_per_s": ("limit", "enqueue_lua_jobs_per_s"),
    "raw_consume_jobs_per_s": ("limit", "consume_jobs_per_s"),
    "single_enqueue_p50_ratio_to_raw": ("enqueue", "single_sync", "p50_ratio_to_raw"),
    "single_enqueue_calls_per_s": ("enqueue", "single_sync", "calls_per_s"),
    "async_enqueue_calls_per_s": ("enqueue", "async", "calls_per_s"),
    "burst_all_in_stream_after_s": ("burst", "all_in_stream_after_s"),
    "burst_all_handlers_started_after_s": ("burst", "all_handlers_started_after_s"),
    "worker_jobs_per_s": ("worker", "jobs_per_s"),
    "fire_10k_entry_p99_ms": ("accuracy", AT_10K, "entry_lateness_ms", "p99"),
    "fire_10k_handler_start_p99_ms": (
        "accuracy",
        AT_10K,
        "handled",
        "handler_start_lateness_ms",
        "p99",
    ),
    "fire_10k_redis_cpu_ms_per_1000": ("accuracy", AT_10K, "redis_cpu_ms_per_1000_fired"),
    "fire_10k_scheduler_cpu_s": ("accuracy", AT_10K, "scheduler_cpu_s"),
    "worker_cpu_us_per_job": ("worker", "worker_cpu_us_per_job"),
}
"""Figure name -> its path in bench.py's results.json."""

PER_RUN_RATIOS = {
    "enqueue_many_to_raw_pipeline": ("enqueue_many_jobs_per_s", "raw_pipeline_enqueue_jobs_per_s"),
    "enqueue_many_to_raw_lua": ("enqueue_many_jobs_per_s", "raw_lua_enqueue_jobs_per_s"),
    "worker_to_raw_consume": ("worker_jobs_per_s", "raw_consume_jobs_per_s"),
}
"""Ratio name -> (figure, figure it is divided by), both from the same run (with ``limit`` in
--scenarios: raw redis-py moving the same data in that run)."""


def export(rev: str, into: Path) -> Path:
    """`rev`'s tree (wheelq/ and loadtest/) in `into`."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "wheelq", "loadtest"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def bench(tree: Path, scenarios: str, out: Path, quick: bool) -> dict[str, Any]:
    """One bench.py run with `tree`'s wheelq; its results.json."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    where = subprocess.run(
        [sys.executable, "-c", "import wheelq; print(wheelq.__file__)"],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(where).is_relative_to(tree):
        raise SystemExit(f"{tree}: wheelq was imported from {where}, not from the tree")
    cmd = [sys.executable, str(tree / "loadtest" / "bench.py"), "--only", scenarios]
    cmd += ["--out", str(out)] + (["--quick"] if quick else [])
    subprocess.run(cmd, check=True, cwd=tree, env=env, stdout=subprocess.DEVNULL)
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results.get("results", results)


def figure(results: dict[str, Any], path: tuple[Any, ...]) -> float | None:
    value: Any = results
    for part in path:
        if isinstance(part, dict) and isinstance(value, list):  # the item that matches
            value = next((v for v in value if part.items() <= v.items()), None)
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    return float(value) if isinstance(value, int | float) else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="git revision to compare against")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scenarios", default="enqueue,accuracy,burst,worker")
    p.add_argument("--full", action="store_true", help="bench.py's full sizes (default --quick)")
    p.add_argument("--out", type=Path, default=Path("feature-cost.json"))
    args = p.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="wheelq-cost-") as tmp:
        trees = {"baseline": export(args.baseline, Path(tmp) / "base"), "this": ROOT}
        for n in range(args.rounds):
            order = ["baseline", "this"] if n % 2 == 0 else ["this", "baseline"]
            for name in order:
                out = Path(tmp) / f"{name}-{n}"
                print(f"round {n + 1}/{args.rounds}: {name} ...", file=sys.stderr, flush=True)
                runs[name].append(bench(trees[name], args.scenarios, out, not args.full))
    report: dict[str, Any] = {"baseline": args.baseline, "rounds": args.rounds, "figures": {}}
    per_run = {
        fig: {name: [figure(r, path) for r in rs] for name, rs in runs.items()}
        for fig, path in FIGURES.items()
    }
    for ratio, (top, bottom) in PER_RUN_RATIOS.items():
        per_run[ratio] = {
            name: [
                round(a / b, 3) if a is not None and b else None
                for a, b in zip(per_run[top][name], per_run[bottom][name], strict=True)
            ]
            for name in runs
        }
    for fig, values in per_run.items():
        if all(v is None for vs in values.values() for v in vs):
            continue
        medians = {
            name: statistics.median([v for v in vs if v is not None]) if any(vs) else None
            for name, vs in values.items()
        }
        base, this = medians["baseline"], medians["this"]
        report["figures"][fig] = {
            "baseline": values["baseline"],
            "this": values["this"],
            "median_baseline": base,
            "median_this": this,
            "ratio_this_to_baseline": round(this / base, 3) if base and this else None,
        }
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
