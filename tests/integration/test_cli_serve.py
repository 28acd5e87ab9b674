"""`wheelq serve` and `wheelq deliver` as a user runs them: the service answers, delivers a
callback (signed) to a receiver, stops cleanly on SIGTERM; tokens guard it; a public bind
without tokens is refused; with Redis down it waits as the other roles do, then exits 1 on
one line; a stop ends long-poll pulls at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from tests.support.callback_server import Reply, ScriptedServer
from tests.support.cli import ROOT, assert_one_line_error, run_wheelq, start_wheelq, stop
from tests.support.http import request
from tests.support.servers import free_port
from tests.support.waiting import eventually_sync, until
from wheelq import Admin, Scheduler
from wheelq.callbacks import verify
from wheelq.core.keys import ShardKeys

SECRET = "cli-secret"


async def test_serve_answers_delivers_a_signed_callback_and_stops_on_sigterm(
    redis_url: str, topic: str, receiver: ScriptedServer
) -> None:
    receiver.scripts["/hook"] = lambda n: Reply(200)
    port = free_port()
    proc = start_wheelq(
        "serve",
        "--redis-url",
        redis_url,
        "--port",
        str(port),
        "--deliver",
        topic,
        env={
            "WHEELQ_CALLBACKS_SIGNING_SECRET": SECRET,
            "WHEELQ_CALLBACKS_ALLOW_PRIVATE": "true",
            "WHEELQ_WORKER_CLAIM_INTERVAL_MS": "100",
        },
    )
    base = f"http://127.0.0.1:{port}"
    node = Scheduler.from_url(redis_url, [topic], lease_ttl_ms=2000)
    await node.start()
    try:
        await until(lambda: request("GET", f"{base}/healthz")[0] == 200, timeout_s=30, what="serve")
        status, body = request(
            "POST",
            f"{base}/v1/topics/{topic}/jobs",
            {"payload": {"n": 1}, "delay_ms": 200, "callback": {"url": receiver.url("/hook")}},
        )
        assert status == 201, body
        await until(lambda: receiver.delivered() == {body["id"]: 1}, timeout_s=20, what="callback")
        (hit,) = receiver.hits
        assert verify(SECRET, hit.headers["Wheelq-Signature"], hit.body, int(time.time() * 1000))
    finally:
        await node.stop()
        _, err = stop(proc)
    assert proc.returncode == 0, err
    assert "no tokens configured" in err
    assert "Traceback" not in err


def test_tokens_guard_the_api_and_a_public_bind_needs_them(redis_url: str, topic: str) -> None:
    done = run_wheelq("serve", "--redis-url", redis_url, "--host", "0.0.0.0", "--port", "0")
    assert_one_line_error(done, 2, "--host 0.0.0.0 needs tokens")

    port = free_port()
    writer, reader = "w" * 20, "r" * 20
    tokens = json.dumps(
        [{"token": writer}, {"token": reader, "access": "read", "topics": [f"{topic}*"]}]
    )
    proc = start_wheelq(
        "serve",
        "--redis-url",
        redis_url,
        "--port",
        str(port),
        "--deliver",
        "none",
        env={"WHEELQ_SERVE_TOKENS": tokens},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        eventually_sync(
            lambda: request("GET", f"{base}/healthz")[0] == 200, timeout_s=30, what="serve"
        )
        jobs = f"{base}/v1/topics/{topic}/jobs"
        assert request("POST", jobs, {"payload": 1})[0] == 401
        assert request("POST", jobs, {"payload": 1}, token="x" * 20)[0] == 401
        assert request("POST", jobs, {"payload": 1}, token=reader)[0] == 403
        status, made = request("POST", jobs, {"payload": 1, "delay_ms": 9000}, token=writer)
        assert status == 201
        assert request("GET", f"{jobs}/{made['id']}", token=reader)[0] == 200
        assert request("GET", f"{base}/v1/topics/other/jobs/x", token=reader)[0] == 403
        status, listed = request("GET", f"{base}/v1/topics", token=reader)
        assert status == 200 and all(t["topic"].startswith(topic) for t in listed["topics"])
        assert request("GET", f"{base}/healthz")[0] == 200, "probes need no token"
        assert request("GET", f"{base}/metrics")[0] == 401
    finally:
        _, err = stop(proc)
    assert proc.returncode == 0
    assert "unsigned" not in err, "a warning about callbacks a --deliver none serve never sends"


def test_serve_on_a_port_in_use_is_one_line_suggesting_port(redis_url: str) -> None:
    # Issue 43 item 17: uvicorn's log lines and exit 3, after waiting for Redis.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_wheelq("serve", "--redis-url", redis_url, "--port", str(port))
    assert_one_line_error(
        done, 1, f"wheelq serve: cannot listen on 127.0.0.1:{port}", "another port with --port"
    )


def callbacks_group_on(redis_sync: redis.Redis, topic: str, shards: int) -> bool:
    """Whether the deliverer's group reads every shard's callbacks stream of `topic`."""
    for shard in range(shards):
        try:
            found = redis_sync.xinfo_groups(ShardKeys(topic, shard).callbacks)
        except redis.ResponseError:  # no stream yet
            return False
        if b"callbacks" not in {g["name"] for g in found}:
            return False
    return True


def test_serve_warns_of_unsigned_callbacks_only_once_they_are_in_use(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    # Issue 43 item 17: the warning came with every serve, callbacks or none. "In use": this
    # process delivers a topic's callbacks (a topic of --deliver has a job with a callback).
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 2)
    port = free_port()
    proc = start_wheelq("serve", "--redis-url", redis_url, "--port", str(port), "--deliver", topic)
    base = f"http://127.0.0.1:{port}"
    try:
        eventually_sync(
            lambda: request("GET", f"{base}/readyz")[0] == 200, timeout_s=30, what="serve"
        )
        job = {"payload": 1, "delay_ms": 3_600_000, "callback": {"url": "http://x.example/h"}}
        assert request("POST", f"{base}/v1/topics/{topic}/jobs", job)[0] == 201
        eventually_sync(
            lambda: callbacks_group_on(redis_sync, topic, 2), timeout_s=30, what="delivery"
        )
    finally:
        _, err = stop(proc)
    assert proc.returncode == 0, err
    lines = err.splitlines()
    serving = next(i for i, line in enumerate(lines) if "serving on" in line)
    warned = [i for i, line in enumerate(lines) if "signing_secret" in line]
    assert len(warned) == 1 and warned[0] > serving, err  # not at start: once in use
    assert f"topic {topic} go out unsigned" in lines[warned[0]]
    assert "[callbacks] signing_secret" in lines[warned[0]]


BLOCKER = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocked())
"""


@pytest.mark.parametrize(
    ("command", "module"),
    [
        (["serve"], "aiohttp"),
        (["serve"], "fastapi"),
        (["serve"], "uvicorn"),
        (["serve"], "jinja2"),
        (["deliver", "--topic", "t"], "aiohttp"),
    ],
)
def test_serve_and_deliver_without_the_http_extra_say_so_in_one_line(
    tmp_path: Path, command: list[str], module: str
) -> None:
    # Issue 43 item 16: a traceback (ModuleNotFoundError) instead of naming the extra.
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(module=module))
    path = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    url = f"redis://127.0.0.1:{free_port()}"  # never reached: the extra is checked first
    done = run_wheelq(*command, "--redis-url", url, env={"PYTHONPATH": path})
    assert_one_line_error(
        done,
        2,
        f"wheelq {command[0]}: needs the http extra",
        f"no module '{module}'",
        "pip install 'wheelq[http]'",
    )


@pytest.mark.parametrize(
    "url", ["ftp://prometheus:9090", "prometheus:9090", "http://", "javascript:alert(1)"]
)
def test_a_prometheus_url_that_is_not_http_is_refused_by_name(redis_url: str, url: str) -> None:
    done = run_wheelq("serve", "--redis-url", redis_url, "--prometheus-url", url, "--port", "0")
    assert_one_line_error(done, 2, "[serve] prometheus_url must be an http(s) URL")


@pytest.mark.parametrize("start_timeout_ms", [0, 300])
def test_serve_with_redis_down_waits_then_exits_1_on_one_line(start_timeout_ms: int) -> None:
    port = free_port()
    done = run_wheelq(
        "serve",
        "--redis-url",
        f"redis://127.0.0.1:{port}",
        "--port",
        "0",
        "--deliver",
        "none",
        env={
            "WHEELQ_SERVE_START_TIMEOUT_MS": str(start_timeout_ms),
            "WHEELQ_CALLBACKS_SIGNING_SECRET": SECRET,  # no warning about unsigned callbacks
        },
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "serving on" not in done.stderr
    lines = done.stderr.strip().splitlines()
    # Waiting, it says so once (as a scheduler node does); without a wait, the error alone.
    assert len(lines) == (1 if start_timeout_ms == 0 else 2), done.stderr
    assert lines[-1].startswith(
        f"wheelq serve: redis at 127.0.0.1:{port} not reachable within "
        f"start_timeout_ms={start_timeout_ms} ("
    ), lines[-1]
    assert "refused" in lines[-1], lines[-1]


PULL_WAIT_MS = 30_000


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_ends_a_waiting_pull_at_once(
    redis_url: str, redis_sync: redis.Redis, topic: str, sig: int
) -> None:
    port = free_port()
    proc = start_wheelq("serve", "--redis-url", redis_url, "--port", str(port), "--deliver", "none")
    base = f"http://127.0.0.1:{port}"
    group = "pullers"
    with ThreadPoolExecutor(1) as pool:
        try:
            eventually_sync(
                lambda: request("GET", f"{base}/healthz")[0] == 200, timeout_s=30, what="serve"
            )
            day_ms = 86_400_000  # the topic exists; its one job is not due before the end
            made = request(
                "POST", f"{base}/v1/topics/{topic}/jobs", {"payload": 1, "delay_ms": day_ms}
            )
            assert made[0] == 201, made
            group_made = request("POST", f"{base}/v1/topics/{topic}/groups", {"name": group})
            assert group_made[0] == 201, group_made
            pulled = pool.submit(
                request,
                "POST",
                f"{base}/v1/topics/{topic}/groups/{group}/pull",
                {"wait_ms": PULL_WAIT_MS},
                timeout_s=2 * PULL_WAIT_MS / 1000,
            )
            stream = ShardKeys(topic, 0).ready
            eventually_sync(
                lambda: _pull_blocked(redis_sync, stream, group),
                timeout_s=30,
                what="the pull to reach Redis",
            )
            assert not pulled.done()
            proc.send_signal(sig)
            # Half the pull's wait: it can only have answered because the stop ended it.
            proc.wait(timeout=PULL_WAIT_MS / 1000 / 2)
            assert pulled.result(timeout=5) == (200, {"jobs": []})
        finally:
            _, err = stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def _pull_blocked(client: redis.Redis, stream: str, group: str) -> bool:
    """The pull's group exists (its handler runs) and a client is blocked in XREADGROUP."""
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:  # no stream yet
        return False
    if group.encode() not in [g["name"] for g in groups]:
        return False
    return any(c["cmd"] == "xreadgroup" and "b" in c["flags"] for c in client.client_list())
