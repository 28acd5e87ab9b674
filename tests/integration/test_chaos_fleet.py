"""The chaos soak's fleet (loadtest/benchlib/chaos_fleet.py) with a real scheduler node: it
is ready only once its signal handlers are in, so the faults' SIGUSR1 and SIGUSR2 never
end it (seed 4242 ended n0 with a SIGUSR1 sent during its start), and a process found dead
when the soak stops it is counted as a death, which fails the soak."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from benchlib.chaos_fleet import Fleet

from wheelq import Admin

NODE = {"lease_ttl_ms": 5000}


@pytest.fixture
def fleet(redis_url: str, topic: str, tmp_path: Path) -> Iterator[Fleet]:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, shards=2)
    fleet = Fleet(redis_url, topic, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()


def test_a_ready_node_takes_the_faults_signals_and_stops_cleanly(fleet: Fleet) -> None:
    fleet.add("node", "n0", NODE)
    assert fleet.wait_ready("n0"), (fleet.out / "n0.log").read_text()
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGUSR1, signal.SIGUSR2):
        assert fleet.signal("n0", sig)
    assert fleet.stop("node", 30) == {"n0": 0}, (fleet.out / "n0.log").read_text()
    assert fleet.members["n0"].deaths == []


def test_a_restarted_node_is_not_ready_until_it_says_so_again(fleet: Fleet) -> None:
    member = fleet.add("node", "n0", NODE)
    assert fleet.wait_ready("n0")
    assert member.proc is not None
    first = member.proc.pid
    fleet.kill("n0")
    assert not fleet.ready("n0")
    assert not fleet.wait_ready("n0"), "a dead process is never ready"
    fleet.start("n0")
    assert not fleet.signal("n0", signal.SIGUSR1, pid=first), "sent to another process"
    assert fleet.wait_ready("n0")
    assert fleet.stop("node", 30) == {"n0": 0}


def test_a_process_found_dead_at_the_stop_is_a_death(fleet: Fleet) -> None:
    member = fleet.add("node", "n0", NODE)
    assert fleet.wait_ready("n0")
    assert member.proc is not None
    os.kill(member.proc.pid, signal.SIGKILL)
    member.proc.wait()
    fleet.stop("node", 30)
    assert member.deaths == [-signal.SIGKILL]
