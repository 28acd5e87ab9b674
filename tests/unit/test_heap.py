"""The collector's policy of the `wheelq` processes (`signals.settle_heap`): what they made at
start frozen, full passes rarer. Each check runs in a Python of its own, so the test
process's collector is left as it is."""

from __future__ import annotations

import json
import subprocess
import sys

from wheelq.cli import signals

DEFAULT_THRESHOLD = (700, 10, 10)  # CPython's, which the young generations keep

SETTLE = """
import gc, json
from wheelq.cli import signals
assert gc.get_threshold() == tuple(json.loads(ARGS))
signals.settle_heap()
print(json.dumps([gc.get_threshold(), gc.get_freeze_count()]))
"""

ROLE_RUN = """
import gc, json, logging
from wheelq.cli.signals import run_until_signal

class Role:
    async def serve(self):
        return None

    async def stop(self):
        return "stopped"

    def hurry(self):
        return None

report = run_until_signal(Role(), logging.getLogger("t"))
print(json.dumps([report, gc.get_threshold(), gc.get_freeze_count()]))
"""


def _run(code: str) -> list[object]:
    """Run `code` in a fresh Python; its last line of output, as JSON."""
    code = code.replace("ARGS", repr(json.dumps(DEFAULT_THRESHOLD)))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    result: list[object] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_settle_freezes_what_was_made_and_makes_full_passes_rarer() -> None:
    threshold, frozen = _run(SETTLE)
    assert threshold == [*DEFAULT_THRESHOLD[:2], signals.FULL_PASS_EVERY]
    assert DEFAULT_THRESHOLD[2] < signals.FULL_PASS_EVERY
    assert isinstance(frozen, int)
    assert frozen > 1000  # the modules and classes imported so far


def test_a_role_run_until_a_signal_settles_the_heap_before_it_serves() -> None:
    report, threshold, frozen = _run(ROLE_RUN)
    assert report == "stopped"
    assert threshold == [*DEFAULT_THRESHOLD[:2], signals.FULL_PASS_EVERY]
    assert isinstance(frozen, int)
    assert frozen > 1000
