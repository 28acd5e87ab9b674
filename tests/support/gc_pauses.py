"""How long the cyclic garbage collector stopped this process, per test, and `settle`,
which keeps those pauses short.

Scheduler nodes and workers run inside the pytest process in the integration tests, so a
full collection of the heap thousands of tests have left behind stops them too: a timing
test that fails late in a long run may have waited for the collector, not for wheelq (a
full run reached 6 million objects and 5 s pauses before FastAPI's caches were cleared,
and 0.6 s after). The conftest attaches each test's longest pause to its report when it is
long, and lists the longest at the end of the run.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
import warnings
from typing import Any

NOTABLE_MS = 100.0  # a pause this long is named in the test's report


class GcPauses:
    """Collector pauses (ms) since the last `reset`, by generation."""

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self.longest_gen = -1
        self.total_ms = 0.0
        self._started = 0.0

    def install(self) -> None:
        gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def reset(self) -> None:
        self.longest_ms, self.longest_gen, self.total_ms = 0.0, -1, 0.0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        paused_ms = (time.perf_counter() - self._started) * 1000
        self.total_ms += paused_ms
        if paused_ms > self.longest_ms:
            self.longest_ms, self.longest_gen = paused_ms, int(info.get("generation", -1))

    def describe(self) -> str:
        return (
            f"longest collector pause {self.longest_ms:.0f} ms (generation {self.longest_gen}), "
            f"{self.total_ms:.0f} ms in all; {len(gc.get_objects())} tracked objects"
        )


LEAKED: list[str] = []
"""ResourceWarnings of objects the collections in `settle` freed (sockets an earlier module
left open): listed at the end of the run, not raised in the next module's first test."""


def settle(where: str) -> None:
    """Collect, then freeze what is left (`gc.freeze`), as a `wheelq` process does once it
    has started (`wheelq.cli.signals.settle_heap`): later collections walk only the objects
    made since, so a module's tests pause for their own garbage, not for the whole run's."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    LEAKED.extend(f"before {where}: {w.message}{_allocated_at(w.source)}" for w in caught)
    gc.freeze()


def _allocated_at(source: object) -> str:
    """Where the leaked object was made, when tracemalloc traces (PYTHONTRACEMALLOC=20)."""
    trace = tracemalloc.get_object_traceback(source) if source is not None else None
    if trace is None:
        return ""
    return "; allocated at " + " <- ".join(
        f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}" for frame in trace
    )
