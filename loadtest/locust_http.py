"""Load `wheelq serve` with locust's own HTTP user: enqueues over HTTP, callbacks back.

    locust -f loadtest/locust_http.py --headless -u 50 -r 50 -t 60s          # all embedded
    locust -f loadtest/locust_http.py --headless -u 50 -r 50 -t 60s --host http://127.0.0.1:8080

Each `EnqueueUser` (a `FastHttpUser`) POSTs ``/v1/topics/{topic}/jobs`` at
``--wheelq-rate`` jobs/s, due after a delay drawn uniformly from 0..``--wheelq-max-delay``
s, with a callback to a receiver this process runs (a gevent WSGI server on loopback).
Each enqueue is reported as ``POST enqueue``. Each callback that arrives is reported as a
request of type ``callback``, name ``due -> received``, its response time the lateness
(arrival on this machine's clock minus the job's due time on the Redis clock); a callback
that arrives before its due time (beyond 2 ms of clock error) is a failure.

Without ``--host`` it starts an embedded Valkey (``pip install wheelq[embedded]``), a
scheduler node and ``wheelq serve`` (delivering callbacks, private targets allowed) for
the life of the locust process. With ``--host``, that service must deliver callbacks to
loopback (``[callbacks] allow_private = true``) and a scheduler must serve the topic. Run
it as one process (no master/workers): the receiver lives in it.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from typing import Any

import gevent
from gevent.pywsgi import WSGIServer
from locust import between, events, task
from locust.contrib.fasthttp import FastHttpUser
from locust.env import Environment

from wheelq.embedded import free_port
from wheelq.testing import EmbeddedServer, find_server_binaries

TOPIC = f"locust-http-{os.getpid()}-{secrets.token_hex(2)}"
EARLY_TOLERANCE_MS = 2.0
_started: list[subprocess.Popen[bytes]] = []
_receiver: dict[str, Any] = {}


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("wheelq", "options of loadtest/locust_http.py")
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


def _receive(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """The callback receiver: reports each arrival's lateness to locust."""
    arrived_ms = time.time() * 1000
    size = int(environ.get("CONTENT_LENGTH") or 0)
    body = json.loads(environ["wsgi.input"].read(size) or b"{}")
    late_ms = arrived_ms - float(body.get("due_ms", arrived_ms))
    env: Environment = _receiver["environment"]
    early = late_ms < -EARLY_TOLERANCE_MS
    env.events.request.fire(
        request_type="callback",
        name="due -> received",
        response_time=max(late_ms, 0.0),
        response_length=size,
        exception=AssertionError(f"callback {late_ms:.1f} ms early") if early else None,
        context={},
    )
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


@events.init.add_listener
def _start(environment: Environment, **_: Any) -> None:
    port = free_port()
    server = WSGIServer(("127.0.0.1", port), _receive, log=None)
    gevent.spawn(server.serve_forever)
    _receiver.update(environment=environment, url=f"http://127.0.0.1:{port}/hook")
    if environment.host:
        return
    redis = EmbeddedServer(find_server_binaries()[0])
    redis.start()
    atexit.register(redis.stop)
    env = {**os.environ, "WHEELQ_CALLBACKS_ALLOW_PRIVATE": "true"}
    wheelq = [sys.executable, "-m", "wheelq", "--log-level", "WARNING"]
    http_port = free_port()
    _started.append(subprocess.Popen([*wheelq, "scheduler", "--redis-url", redis.url], env=env))
    _started.append(
        subprocess.Popen(
            [*wheelq, "serve", "--redis-url", redis.url, "--port", str(http_port)], env=env
        )
    )
    environment.host = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{environment.host}/healthz", timeout=1):
                break
        except OSError:
            time.sleep(0.1)


@events.quitting.add_listener
def _stop(**_: Any) -> None:
    for proc in _started:
        proc.terminate()
    for proc in _started:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


class EnqueueUser(FastHttpUser):
    """POSTs one delayed job with a callback per turn (``POST enqueue``)."""

    wait_time = between(0, 0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self._period = 1 / float(getattr(options, "wheelq_rate", 10.0))
        self._max_delay_ms = int(1000 * float(getattr(options, "wheelq_max_delay", 2.0)))
        self._next = time.monotonic() + secrets.randbelow(1000) / 1000 * self._period

    @task
    def enqueue(self) -> None:
        gevent.sleep(max(0.0, self._next - time.monotonic()))
        self._next = max(self._next + self._period, time.monotonic())
        body = {
            "payload": {"sent_ms": int(time.time() * 1000)},
            "delay_ms": secrets.randbelow(self._max_delay_ms + 1),
            "callback": {"url": _receiver["url"]},
        }
        with self.client.post(
            f"/v1/topics/{TOPIC}/jobs", json=body, name="enqueue", catch_response=True
        ) as answer:
            if answer.status_code != 201:
                answer.failure(f"HTTP {answer.status_code}: {answer.text[:200]}")
