"""SIGTERM to a scheduler node or a worker process while Redis is unreachable (real processes,
real faults): the server is SIGSTOPped, so every call hangs, or killed, so every call is
refused. The process exits within its ``stop_timeout_ms`` (plus the grace, for a worker), and
its log says what was left undone; a second signal exits at once, even while a sync handler
is stuck. What is left undone is safe: leases expire, pending entries are taken over after
the visibility timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.child import ChildProcess
from tests.support.node_proc import NodeProcess
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually_sync
from tests.support.worker_proc import WorkerProcess
from wheelq import Admin, Client
from wheelq.testing import EmbeddedServer, ServerBinary

SHARDS = 2
STOP_TIMEOUT_MS = 1000
SLACK_S = 4.0
"""On top of the bounds under test: closing connections (<= 1 s), interpreter exit, and a
busy 2-core machine."""
FOREVER_MS = 600_000  # a bound the test must never reach: only a second signal ends it
WORKER = {"concurrency": 2, "visibility_timeout_ms": FOREVER_MS}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.both_servers,  # the server stopped and killed
]


@pytest.fixture(params=["sigstop", "kill"])
def fault(request: pytest.FixtureRequest) -> str:
    """sigstop: Redis hangs (calls never answer); kill: Redis is gone (calls are refused)."""
    return str(request.param)


@pytest.fixture
def server(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    with dedicated_server(server_binary, appendonly=True) as srv:
        yield srv  # its stop() sends SIGCONT first, so a SIGSTOPped server ends too


@contextmanager
def unreachable(srv: EmbeddedServer, fault: str) -> Iterator[None]:
    pid = srv.pid
    assert pid is not None
    if fault == "kill":
        srv.kill()
        yield
        return
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def stop_took(child: ChildProcess, *, bound_s: float) -> int:
    """Wait for `child` to exit; returns its exit code, failing with its log past `bound_s`."""
    try:
        return child.proc.wait(timeout=bound_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {bound_s} s after the signal; its log:\n{child.log_tail()}")


def signal_twice(child: ChildProcess, first_line: str) -> tuple[int, str]:
    """SIGTERM, and once `first_line` is logged (the stop began), SIGTERM again: the child
    must exit at once. Returns its exit code and its log."""
    child.signal(signal.SIGTERM)
    eventually_sync(lambda: first_line in child.log_text(), timeout_s=10, what=first_line)
    child.signal(signal.SIGTERM)
    code = stop_took(child, bound_s=SLACK_S)
    log = child.log_text()
    assert "second signal: exiting now" in log, log
    return code, log


@pytest.fixture
def spawn(server: EmbeddedServer, topic: str, tmp_path: Path) -> Iterator[Any]:
    """Starts a node (leading both shards of `topic`) or a worker (running 2 of 12 jobs)
    on `server`, with `settings`; kills them at teardown."""
    children: list[ChildProcess] = []

    def start(kind: str, settings: dict[str, Any], behaviour: dict[str, Any] | None = None) -> Any:
        with Client.from_url(server.url) as client:
            admin = Admin.of(client)
            admin.create_topic(topic, SHARDS)
            client.enqueue_many(topic, [{"payload": i} for i in range(12)])
        child: NodeProcess | WorkerProcess
        if kind == "node":
            child = NodeProcess(server.url, topic, "n1", tmp_path, settings)
            ready, what = (lambda: len(child.events("acquired")) == SHARDS), "leading 2 shards"
        else:
            child = WorkerProcess(server.url, topic, "w1", tmp_path, behaviour or {}, settings)
            ready, what = (lambda: len(child.jobs("start")) == 2), "2 jobs running"
        children.append(child)
        eventually_sync(ready, timeout_s=15, what=what)
        return child

    yield start
    for child in children:
        child.finish()


def test_a_node_stops_within_stop_timeout_ms_while_redis_is_unreachable(
    server: EmbeddedServer, spawn: Any, fault: str
) -> None:
    node = spawn("node", {"check_interval_ms": 50, "stop_timeout_ms": STOP_TIMEOUT_MS})
    with unreachable(server, fault):
        node.signal(signal.SIGTERM)
        code = stop_took(node, bound_s=STOP_TIMEOUT_MS / 1000 + SLACK_S)
    log = node.log_text()
    assert code == 0, log
    assert f"left undone: release {SHARDS} leases, take the process off the list (" in log, log
    assert f"unreleased_leases={SHARDS}" in log
    why = "no answer from redis" if fault == "sigstop" else "redis unreachable"
    assert why in log


def test_a_second_signal_ends_a_node_stop_at_once(server: EmbeddedServer, spawn: Any) -> None:
    node = spawn("node", {"check_interval_ms": 50, "stop_timeout_ms": FOREVER_MS})
    with unreachable(server, "sigstop"):
        code, log = signal_twice(node, "signal: stopping")
    assert (
        f"left undone: release {SHARDS} leases, take the process off the list "
        "(cut short by a second signal)"
    ) in log
    assert code == 0, log


def test_a_worker_stops_within_grace_and_stop_timeout_ms_while_redis_is_unreachable(
    server: EmbeddedServer, spawn: Any, fault: str
) -> None:
    grace_ms = 500
    settings = {"shutdown_grace_ms": grace_ms, "stop_timeout_ms": STOP_TIMEOUT_MS}
    worker = spawn("worker", {**WORKER, **settings}, {"sleep_s": 60})
    with unreachable(server, fault):
        worker.signal(signal.SIGTERM)
        code = stop_took(worker, bound_s=(grace_ms + STOP_TIMEOUT_MS) / 1000 + SLACK_S)
    log = worker.log_text()
    assert code == 0, log
    assert "left undone: " in log, log
    report = worker.report()
    assert report is not None, log
    assert (report["finished"], report["abandoned"]) == (0, 2)
    assert report["handed_on"] == 0
    assert report["not_handed_on"] >= 2, "the abandoned entries at least were not handed on"


def test_a_second_signal_exits_a_worker_at_once_with_a_sync_handler_stuck(
    server: EmbeddedServer, spawn: Any
) -> None:
    settings = {"shutdown_grace_ms": FOREVER_MS, "stop_timeout_ms": FOREVER_MS}
    worker = spawn("worker", {**WORKER, **settings}, {"sync": True, "sleep_s": 60})
    with unreachable(server, "sigstop"):
        code, log = signal_twice(worker, "signal: finishing running jobs")
    assert "(cut short by a second signal)" in log, log
    assert code == 1, "abandoned sync handlers: the worker leaves with os._exit(1)\n" + log
    assert not worker.jobs("finish")
