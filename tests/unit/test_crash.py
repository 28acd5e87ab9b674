"""Crash points: arming by name and count, refusing bad specs without arming anything, and
the kill itself (in a child process: it must die by SIGKILL on exactly the n-th pass)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from wheelq.errors import InvalidArgumentError
from wheelq.runtime import crash


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    crash.disarm_all()
    yield
    crash.disarm_all()


def test_an_unarmed_point_does_nothing() -> None:
    for name in crash.POINTS:
        crash.point(name)  # still here


@pytest.mark.parametrize(
    ("spec", "parameter"),
    [("nowhere:1", "point"), ("emit.before_send:0", "hits"), ("emit.before_send:x", "hits")],
)
def test_a_bad_spec_names_the_parameter_and_arms_nothing(spec: str, parameter: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        crash.arm_from_spec(f"ack.after_reply:2,{spec}")
    assert caught.value.parameter == parameter
    crash.point("ack.after_reply")
    crash.point("ack.after_reply")  # would have killed this process had it been armed


@pytest.mark.parametrize("hits", [1, 3])
def test_the_process_dies_by_sigkill_on_the_nth_pass(hits: int) -> None:
    code = (
        "import sys\n"
        "from wheelq.runtime import crash\n"
        f"crash.arm_from_spec('handler.after:{hits}, ack.before_send')\n"
        "for n in range(1, 10):\n"
        "    print(n, flush=True)\n"
        "    crash.point('handler.after')\n"
    )
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.split() == [str(n) for n in range(1, hits + 1)]
