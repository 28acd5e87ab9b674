"""The cyclic garbage collector's policy for the long-lived `wheelq` processes.

`settle()` is called once a process has started (the node, the worker, the HTTP service
built): what it made so far lives as long as the process, so it is frozen out of the
collector's sight, and full passes are made rarer.

A full pass walks every container the process tracks. A scheduler node holds its
preloaded jobs in the timing wheel's dicts, so at 20,000 jobs/s with ~90,000 jobs in the
wheel one pass held the loop for 4-10 ms, and with CPython's default threshold (a full
pass every 10 middle ones) one came every 2-3 s: the entries due meanwhile fired that much
later, enough to set the p99.9 of the stream's lateness (`loadtest/fire_accuracy.py --rate
20000`; docs/architecture.md, Performance targets). With `FULL_PASS_EVERY` 100 a full
pass comes ~10x less often. The young generations are collected as before, so cycles that
die young (most: exceptions and their tracebacks) are freed as soon; only a cycle that has
lived through two young passes waits longer for its full pass.
"""

from __future__ import annotations

import gc

FULL_PASS_EVERY = 100
"""Middle-generation passes per full one (CPython's default: 10)."""


def settle() -> None:
    """Freeze what the process made so far and make full passes `FULL_PASS_EVERY` times
    rarer than the young ones' default rhythm."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_PASS_EVERY)
