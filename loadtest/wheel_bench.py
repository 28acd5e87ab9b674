"""Micro-benchmark: TimingWheel against heapq baselines, single thread, no I/O.

Adds N entries with due times spread uniformly over SPAN_MS, then drains them the way the
wheel driver does (sleep until ``next_expiry_ms()``, ``advance_to`` it, repeat). Prints JSON.
The heap baselines are ``heapq`` of ``(due_ms, seq, key)``: "plain" has no cancel/replace;
"indexed" adds the key -> seq dict that cancel/replace/contains need (lazy deletion), which is
the feature set the wheel offers. Best of REPEATS runs.

Run: ``PYTHONPATH=. python loadtest/wheel_bench.py``
"""

from __future__ import annotations

import heapq
import json
import platform
import random
import time
from collections.abc import Callable

from wheelq.scheduler.wheel import TimingWheel

N = 200_000
SPAN_MS = 5_000
TICK_MS = 1
WHEEL_SIZE = 512
REPEATS = 3


def bench_wheel(items: list[tuple[str, int]]) -> tuple[float, float]:
    wheel: TimingWheel[str] = TimingWheel(tick_ms=TICK_MS, wheel_size=WHEEL_SIZE)
    add = wheel.add
    t0 = time.perf_counter()
    for key, due in items:
        add(key, due)
    t1 = time.perf_counter()
    fired = 0
    while (wake_ms := wheel.next_expiry_ms()) is not None:
        fired += len(wheel.advance_to(wake_ms))
    t2 = time.perf_counter()
    assert fired == len(items)
    return t1 - t0, t2 - t1


def bench_heap_plain(items: list[tuple[str, int]]) -> tuple[float, float]:
    heap: list[tuple[int, int, str]] = []
    push, pop = heapq.heappush, heapq.heappop
    t0 = time.perf_counter()
    for seq, (key, due) in enumerate(items):
        push(heap, (due, seq, key))
    t1 = time.perf_counter()
    fired = 0
    while heap:
        now_ms = heap[0][0]
        batch = []
        while heap and heap[0][0] <= now_ms:
            due, _, key = pop(heap)
            batch.append((key, due))
        fired += len(batch)
    t2 = time.perf_counter()
    assert fired == len(items)
    return t1 - t0, t2 - t1


def bench_heap_indexed(items: list[tuple[str, int]]) -> tuple[float, float]:
    heap: list[tuple[int, int, str]] = []
    live: dict[str, int] = {}
    push, pop = heapq.heappush, heapq.heappop
    t0 = time.perf_counter()
    for seq, (key, due) in enumerate(items):
        live[key] = seq
        push(heap, (due, seq, key))
    t1 = time.perf_counter()
    fired = 0
    while heap:
        now_ms = heap[0][0]
        batch = []
        while heap and heap[0][0] <= now_ms:
            due, seq, key = pop(heap)
            if live.get(key) == seq:
                del live[key]
                batch.append((key, due))
        fired += len(batch)
    t2 = time.perf_counter()
    assert fired == len(items)
    return t1 - t0, t2 - t1


def best(
    fn: Callable[[list[tuple[str, int]]], tuple[float, float]], items: list[tuple[str, int]]
) -> dict[str, int]:
    runs = [fn(items) for _ in range(REPEATS)]
    add_s = min(add for add, _ in runs)
    expire_s = min(expire for _, expire in runs)
    return {"adds_per_s": round(len(items) / add_s), "expiries_per_s": round(len(items) / expire_s)}


def main() -> None:
    rng = random.Random(42)
    items = [(f"job-{i:07d}", rng.randrange(0, SPAN_MS)) for i in range(N)]
    wheel = best(bench_wheel, items)
    plain = best(bench_heap_plain, items)
    indexed = best(bench_heap_indexed, items)
    result = {
        "entries": N,
        "span_ms": SPAN_MS,
        "tick_ms": TICK_MS,
        "wheel_size": WHEEL_SIZE,
        "python": platform.python_version(),
        "wheel": wheel,
        "heapq_plain": plain,
        "heapq_indexed": indexed,
        "wheel_vs_heapq_plain": {
            k: round(wheel[k] / plain[k], 2) for k in ("adds_per_s", "expiries_per_s")
        },
        "wheel_vs_heapq_indexed": {
            k: round(wheel[k] / indexed[k], 2) for k in ("adds_per_s", "expiries_per_s")
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
