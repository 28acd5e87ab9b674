"""A producer client when Redis cannot take its calls, on real servers: a replica's URL
(READONLY), a server over ``maxmemory`` (OOM), a server killed, and a peer that accepts
connections but never answers. With a spool the enqueues are spooled and replayed once the
server takes writes again; without, each call raises `RedisUnavailableError` naming why, and
within ``breaker_open_ms`` of a connection failure the next call fails before it is sent.

Every role started while Redis refuses calls (OOM, READONLY, MASTERDOWN, BUSY) waits it out
as it waits out an outage, alive and saying why, then runs jobs once the refusal ends: a
worker and a scheduler node in processes of their own, and ``wheelq worker``, ``serve``
and ``run`` as a user starts them."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.callback_server import Reply, ScriptedServer
from tests.support.child import ChildProcess
from tests.support.cli import start_wheelq
from tests.support.http import request
from tests.support.node_proc import NodeProcess
from tests.support.servers import dedicated_server, free_port
from tests.support.spooling import (
    DRAIN_S,
    HOUR_S,
    SHARDS,
    EitherClient,
    found_ids,
)
from tests.support.tasks import URL_VARIABLE, Log, module_name, start_run, write_module
from tests.support.waiting import eventually, eventually_sync, until
from tests.support.worker_proc import WorkerProcess
from wheelq import AsyncClient, Client, JobState, RedisUnavailableError
from wheelq.testing import EmbeddedServer, ServerBinary

pytestmark = pytest.mark.both_servers  # the server's refusals: READONLY, OOM, BUSY

SOCKET_TIMEOUT_S = 0.5


@pytest.fixture
def replica(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    """A replica of a primary of its own: it answers every write with READONLY."""
    with (
        dedicated_server(server_binary) as primary,
        dedicated_server(
            server_binary, extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
        ) as server,
    ):
        yield server


@pytest.fixture
def full(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    """A server over its ``maxmemory`` with ``noeviction``: it refuses writes with OOM."""
    with dedicated_server(server_binary) as server:
        with redis.Redis.from_url(server.url) as r:
            r.config_set("maxmemory-policy", "noeviction")
            r.config_set("maxmemory", "1")
        yield server


async def refused(client: EitherClient, topic: str) -> RedisUnavailableError:
    with pytest.raises(RedisUnavailableError) as caught:
        await client.call("enqueue", topic, "x", delay=HOUR_S)
    return caught.value


@pytest.mark.parametrize(("server", "reason"), [("replica", "readonly"), ("full", "oom")])
async def test_without_a_spool_a_server_refusing_writes_is_a_typed_error(
    request: pytest.FixtureRequest,
    server_binary: ServerBinary,  # parametrizes the server fixtures looked up here
    client_kind: str,
    topic: str,
    server: str,
    reason: str,
) -> None:
    srv: EmbeddedServer = request.getfixturevalue(server)
    client = EitherClient(client_kind, srv.url, default_shards=SHARDS)
    try:
        error = await refused(client, topic)
        assert error.reason == reason
        assert isinstance(error.__cause__, redis.ResponseError)
        again = await refused(client, topic)  # a refusal is a reply: the breaker stays shut
        assert again.reason == reason
    finally:
        await client.close()


def promote(r: redis.Redis) -> None:
    r.replicaof("NO", "ONE")


def free_memory(r: redis.Redis) -> None:
    r.config_set("maxmemory", "0")


@pytest.mark.parametrize(("server", "heal"), [("replica", promote), ("full", free_memory)])
async def test_with_a_spool_a_refusal_is_spooled_and_replayed_once_the_server_takes_writes(
    request: pytest.FixtureRequest,
    server_binary: ServerBinary,  # parametrizes the server fixtures looked up here
    client_kind: str,
    topic: str,
    tmp_path: Path,
    server: str,
    heal: Callable[[redis.Redis], None],
) -> None:
    srv: EmbeddedServer = request.getfixturevalue(server)
    client = EitherClient(client_kind, srv.url, spool=tmp_path / "spool.db", default_shards=SHARDS)
    try:
        ids = [await client.call("enqueue", topic, n, delay=n % 2 * HOUR_S) for n in range(5)]
        ids += await client.call("enqueue_many", topic, [{"payload": n} for n in range(5)])
        assert client.spool_stats().depth == 10
        with redis.Redis.from_url(srv.url) as r:
            heal(r)

        await until(lambda: client.spool_stats().depth == 0, timeout_s=DRAIN_S, what="drain")
        assert found_ids(srv.url, topic) == dict.fromkeys(ids, 1)
    finally:
        await client.close()


@pytest.fixture
def blackhole() -> Iterator[socket.socket]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.setblocking(False)
        yield listener


def connections_made(listener: socket.socket) -> int:
    """Take every connection waiting in the backlog; how many there were."""
    count = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


async def test_within_breaker_open_ms_a_call_fails_without_connecting(
    blackhole: socket.socket, client_kind: str, topic: str
) -> None:
    url = f"redis://127.0.0.1:{blackhole.getsockname()[1]}"
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": SOCKET_TIMEOUT_S,
    }
    client = EitherClient(client_kind, url, redis_options=options, breaker_open_ms=600_000)
    try:
        first = await refused(client, topic)
        assert first.reason == "unreachable"
        assert connections_made(blackhole) >= 1  # it connected, then timed out waiting

        for _ in range(3):
            fast = await refused(client, topic)
            assert fast.reason == "breaker_open"
        assert connections_made(blackhole) == 0  # nothing was even tried
    finally:
        await client.close()


async def test_the_breaker_opens_on_a_dead_server_then_a_probe_closes_it_once_it_is_back(
    server_binary: ServerBinary, client_kind: str, topic: str
) -> None:
    with dedicated_server(server_binary, appendonly=True) as srv:
        client = EitherClient(client_kind, srv.url, default_shards=SHARDS, breaker_open_ms=200)
        try:
            await client.manage("create_topic", topic)
            srv.kill()
            assert (await refused(client, topic)).reason == "unreachable"
            assert (await refused(client, topic)).reason == "breaker_open"
            srv.restart()

            async def probe_gets_through() -> bool:
                try:
                    await client.call("enqueue", topic, "back", job_id="after")
                except RedisUnavailableError as exc:
                    assert exc.reason == "breaker_open"  # the probe is the one let through
                    return False
                return True

            await eventually(probe_gets_through, timeout_s=10, what="the probe to get through")
            await client.call("enqueue", topic, "closed", job_id="closed")  # closed: no refusal
            assert found_ids(srv.url, topic).keys() >= {"after", "closed"}
        finally:
            await client.close()


# --- a role started while Redis refuses calls waits, as it waits out an outage -------------

START_S = 60  # a process's import and start on a loaded machine, and its first wait logged
ROLE_SETTINGS = {"start_timeout_ms": 300_000}  # the faults last until lifted, never this long


class Refusal:
    """A dedicated server made to refuse calls as `fault` says (the reply each call gets:
    OOM, READONLY, MASTERDOWN or BUSY) until `lift()`."""

    def __init__(self, binary: ServerBinary, fault: str, stack: contextlib.ExitStack) -> None:
        self.fault = fault
        self.server = stack.enter_context(dedicated_server(binary))
        self.r = stack.enter_context(redis.Redis.from_url(self.server.url))
        self.r.ping()  # connected now: the test's own calls go on this connection
        self._busy: threading.Thread | None = None
        if fault == "oom":
            self.r.config_set("maxmemory-policy", "noeviction")
            self.r.config_set("maxmemory", "1")
        elif fault == "readonly":  # a replica of a primary of its own
            primary = stack.enter_context(dedicated_server(binary))
            self.r.replicaof("127.0.0.1", primary.port)
        elif fault == "masterdown":  # a replica cut from its primary, told not to serve stale
            self.r.config_set("replica-serve-stale-data", "no")
            self.r.replicaof("127.0.0.1", free_port())
        else:  # busy: a script that never ends, past a threshold of 50 ms
            self.r.config_set("lua-time-limit", "50")
            self._busy = threading.Thread(target=self._loop, daemon=True)
            self._busy.start()
            eventually_sync(self._refused, timeout_s=10, what="the server to answer BUSY")
        stack.callback(self.lift)

    def _loop(self) -> None:
        looping = redis.Redis.from_url(self.server.url, socket_timeout=300)  # past the test
        with looping as r, contextlib.suppress(redis.ResponseError):
            r.eval("while true do end", 0)  # ends with SCRIPT KILL's error

    def _refused(self) -> bool:
        with redis.Redis.from_url(self.server.url) as probe:
            try:
                probe.ping()
            except redis.ResponseError as exc:
                return str(exc).startswith("BUSY ")
        return False

    def lift(self) -> None:
        """The server takes every call again (safe twice)."""
        if self.fault == "oom":
            self.r.config_set("maxmemory", "0")
        elif self.fault in ("readonly", "masterdown"):
            self.r.replicaof("NO", "ONE")
        elif self._busy is not None:
            with contextlib.suppress(redis.ResponseError):  # NOTBUSY: killed already
                self.r.script_kill()
            self._busy.join(10)
            self._busy = None


@pytest.fixture(params=["oom", "readonly", "masterdown", "busy"])
def refusal(request: pytest.FixtureRequest, server_binary: ServerBinary) -> Iterator[Refusal]:
    with contextlib.ExitStack() as stack:
        yield Refusal(server_binary, request.param, stack)


def waiting(proc: ChildProcess, says: str) -> bool:
    """Whether `proc` logged `says`; fails at once when it exited instead."""
    if not proc.alive():
        raise AssertionError(f"{proc.log.name} exited {proc.proc.returncode}: {proc.log_tail()}")
    return says in proc.log_text()


def test_a_worker_and_a_node_started_while_redis_refuses_wait_then_run_jobs(
    refusal: Refusal, topic: str, tmp_path: Path
) -> None:
    url = refusal.server.url
    worker = WorkerProcess(url, topic, "w1", tmp_path, {}, ROLE_SETTINGS)
    node = NodeProcess(url, topic, "n1", tmp_path, ROLE_SETTINGS)
    try:
        # Each says why it waits (its start, or its parts: a node starts without writing).
        says = f"unavailable ({refusal.fault}: "
        eventually_sync(
            lambda: waiting(worker, says) and waiting(node, says),
            timeout_s=START_S,
            what=f"the worker and the node to wait out {refusal.fault}",
        )
        assert "Traceback" not in worker.log_text() + node.log_text()

        refusal.lift()

        with Client.from_url(url) as client:
            job_id = client.enqueue(topic, "after", delay=0.2)
            eventually_sync(
                lambda: client.get(topic, job_id).state is JobState.SUCCEEDED,
                timeout_s=START_S,
                what="the job the node fired to succeed in the worker",
            )
        assert worker.jobs("finish") == [job_id]
        assert worker.alive() and node.alive()
        assert any(line["kind"] == "emitted" for line in node.lines())
    finally:
        worker.finish()
        node.finish()


RUN_APP = f"""
import os

import wheelq

app = wheelq.App(os.environ["{URL_VARIABLE}"])


@app.task
def double(n: int) -> int:
    return 2 * n
"""


def ended(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then wait for it (killed if it does not end in 30 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def test_wheelq_worker_serve_and_run_started_while_redis_is_busy_wait_then_run(
    server_binary: ServerBinary, topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with contextlib.ExitStack() as stack:
        busy = Refusal(server_binary, "busy", stack)
        url = busy.server.url
        metrics, http = free_port(), free_port()
        (tmp_path / "handlers.py").write_text("def handle(job):\n    print('ran', job.id)\n")
        monkeypatch.setenv(URL_VARIABLE, url)
        tasks = write_module(tmp_path, module_name(topic), RUN_APP)
        stack.callback(tasks.app.close)
        procs = {
            "worker": start_wheelq(
                "worker", "handlers:handle", "--topic", topic, "--redis-url", url,
                "--metrics-port", str(metrics), cwd=tmp_path,
                env={"PYTHONUNBUFFERED": "1"},
            ),
            "serve": start_wheelq("serve", "--redis-url", url, "--port", str(http)),
            "run": start_run(tmp_path, tasks.__name__, url),
        }  # fmt: skip
        logs = {name: Log(proc) for name, proc in procs.items()}
        for proc in procs.values():
            stack.callback(ended, proc)
        readyz = f"http://127.0.0.1:{metrics}/readyz"

        def every_one_waits() -> bool:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    err = "".join(logs[name].err)[-3000:]
                    raise AssertionError(f"wheelq {name} exited {proc.returncode}: {err}")
            status, body = request("GET", readyz)
            said = all("unavailable (busy: " in "".join(logs[n].err) for n in ("serve", "run"))
            return status == 503 and "waiting for redis (busy)" in body["detail"] and said

        eventually_sync(every_one_waits, timeout_s=START_S, what="each process to wait")

        busy.lift()

        eventually_sync(lambda: request("GET", readyz)[0] == 200, timeout_s=START_S, what="ready")
        api = f"http://127.0.0.1:{http}"
        eventually_sync(
            lambda: request("GET", f"{api}/readyz")[0] == 200, timeout_s=START_S, what="serve"
        )
        status, job = request("POST", f"{api}/v1/topics/{topic}/jobs", {"payload": 1})
        assert status == 201, job
        eventually_sync(
            lambda: f"ran {job['id']}\n" in logs["worker"].out,
            timeout_s=START_S,
            what="the worker to run the job enqueued over HTTP",
        )
        assert tasks.double.enqueue(21).result(timeout=START_S) == 42  # `wheelq run`'s
        for name, proc in procs.items():
            assert proc.poll() is None, name


async def test_wheelq_deliver_started_while_redis_refuses_writes_waits_then_delivers(
    server_binary: ServerBinary, topic: str, receiver: ScriptedServer
) -> None:
    receiver.scripts["/hook"] = lambda n: Reply(200)
    with contextlib.ExitStack() as stack:
        full = Refusal(server_binary, "oom", stack)
        url = full.server.url
        env = {"WHEELQ_CALLBACKS_ALLOW_PRIVATE": "true", "WHEELQ_CALLBACKS_SIGNING_SECRET": "s"}
        proc = start_wheelq("deliver", "--topic", topic, "--redis-url", url, env=env)
        log = Log(proc)
        stack.callback(ended, proc)

        def waits() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"exited {proc.returncode}: {''.join(log.err)[-3000:]}")
            return "unavailable (oom: " in "".join(log.err)

        await until(waits, timeout_s=START_S, what="wheelq deliver to wait out OOM")

        full.lift()

        async with AsyncClient.from_url(url) as client:
            job_id = await client.enqueue(topic, "x", callback=receiver.url("/hook"))
        await until(
            lambda: receiver.delivered() == {job_id: 1}, timeout_s=START_S, what="the callback"
        )
        assert proc.poll() is None
