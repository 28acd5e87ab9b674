"""The ACL users of docs/operations/acl.md, as written there, on a real server.

The rules are read from the page's ``text`` blocks (one ``ACL SETUSER`` line per role), loaded
into a server of the test's own, and each role then runs with only its user: a producer
enqueues, cancels, reschedules and looks up; a scheduler node fires jobs and a recurring
schedule, then trims; a worker handles, acks, retries and dead-letters; ``wheelq run``
fires and runs a task's jobs, which ``wheelq relay`` places from PostgreSQL's outbox;
``wheelq serve`` enqueues, serves a pull consumer and replays and purges dead letters; an
observer reads. The
server's ACL log must stay empty through all of it (nothing a role sent was refused), and
each user must be refused what lies outside its rule.
"""

from __future__ import annotations

import http.server
import json
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import ClassVar

import pytest
import redis

import wheelq
from tests.support import compose
from tests.support.cli import ROOT, clean_env, run_wheelq, start_wheelq, stop
from tests.support.docs import blocks
from tests.support.http import request
from tests.support.servers import dedicated_server, free_port
from tests.support.waiting import eventually_sync
from wheelq.testing import EmbeddedServer, ServerBinary

pytestmark = pytest.mark.both_servers  # ACL

PAGE = "docs/operations/acl.md"
ROLES = {
    "Producer": "wheelq-producer",
    "Scheduler node": "wheelq-scheduler",
    "Worker": "wheelq-worker",
    "Tasks in one process": "wheelq-run",
    "Outbox relay": "wheelq-relay",
    "HTTP service": "wheelq-serve",
    "Observer": "wheelq-observer",
}
TOPIC = "acl-emails"
HANDLER = """\
import json
from pathlib import Path
from typing import ClassVar

import wheelq


def handle(job: wheelq.Job) -> object:
    with Path("handled.txt").open("a") as out:
        out.write(json.dumps({"id": job.id, "payload": job.payload}) + "\\n")
    if isinstance(job.payload, dict) and job.payload.get("fail"):
        raise RuntimeError("this job always fails")
    return {"handled": job.payload}
"""
LIMITED = """\
import asyncio
import signal
import sys
from pathlib import Path

import wheelq


def handle(job: wheelq.Job) -> None:
    with Path("limited.txt").open("a") as out:
        out.write(job.id + "\\n")


async def main() -> None:
    flow = wheelq.Flow(rate="1000/s", key_concurrency=1)
    worker = wheelq.Worker.from_url(sys.argv[1], sys.argv[2], handle, group="limited", flow=flow)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await worker.start()
    await stopping.wait()
    await worker.stop()


asyncio.run(main())
"""
FAST = {  # retries, claims, schedules and trims come round in a test's time
    "WHEELQ_WORKER_RETRY_BASE_MS": "10",
    "WHEELQ_WORKER_CLAIM_INTERVAL_MS": "100",
}
CALLBACKS = {"WHEELQ_CALLBACKS_ALLOW_PRIVATE": "true"}  # the receiver is on 127.0.0.1
TRIM_NOW = {"WHEELQ_SCHEDULER_RETENTION_MS": "0", "WHEELQ_SCHEDULER_TRIM_INTERVAL_MS": "100"}


def rules() -> dict[str, list[str]]:
    """Each role's ``ACL SETUSER`` line, as argv, by the section it is under."""
    found: dict[str, list[str]] = {}
    for block in blocks(PAGE):
        for line in block.body.splitlines():
            if line.startswith("ACL SETUSER "):
                assert block.section not in found, f"two rules under {block.section!r}"
                found[block.section] = shlex.split(line)
    return found


def password(rule: list[str]) -> str:
    (secret,) = (word[1:] for word in rule if word.startswith(">"))
    return secret


def test_the_page_has_one_rule_per_role_each_starting_from_nothing() -> None:
    found = rules()
    assert set(found) == set(ROLES), found.keys()
    for section, rule in found.items():
        assert rule[:3] == ["ACL", "SETUSER", ROLES[section]], rule
        assert "reset" in rule and "-@all" in rule, rule  # nothing beyond what is listed
        assert "~*" not in rule and "+@all" not in rule and "allkeys" not in rule, rule


def test_the_compose_files_redis_starts_with_the_pages_users(server_binary: ServerBinary) -> None:
    """deploy/compose.yaml's Redis command line, as the server reads it: each role's user has
    the page's rule and the password of the environment; a client that names no user may only
    PING (the compose file's health check)."""
    environ = {  # every variable the file names, set
        ref.var: f"{ref.var.lower()}-value"
        for text in compose.strings(compose.raw())
        for ref in compose.references(text)
    }
    command = compose.load(environ)["services"]["redis"]["command"]
    admin = ["--user", "admin", "on", ">admin", "~*", "&*", "+@all"]  # the test's, to look
    users = command[command.index("--user") :]
    with dedicated_server(server_binary, extra_args=[*users, *admin]) as server:
        with redis.Redis(port=server.port) as anyone:
            assert anyone.ping()
            with pytest.raises(redis.exceptions.NoPermissionError):
                anyone.get("wheelq:topics")
        as_admin = redis.Redis(port=server.port, username="admin", password="admin")
        for section, user in ROLES.items():
            role = user.removeprefix("wheelq-")
            if role not in ("scheduler", "worker", "run", "relay", "serve"):
                assert as_admin.acl_getuser(user) is None, user  # only the roles compose runs
                continue
            secret = environ[f"REDIS_{role.upper()}_PASSWORD"]
            with redis.Redis(port=server.port, username=user, password=secret) as own:
                assert own.ping()
            from_compose = as_admin.acl_getuser(user)
            rule = rules()[section]
            rule[rule.index(f">{password(rule)}")] = f">{secret}"
            as_admin.execute_command(*rule)  # the page's rule, over the compose file's
            assert as_admin.acl_getuser(user) == from_compose, user
        as_admin.close()


@pytest.fixture
def acl_server(server_binary: ServerBinary) -> Iterator[tuple[EmbeddedServer, dict[str, str]]]:
    """A server with the page's users; yields it and each role's URL by section."""
    with dedicated_server(server_binary) as server:
        admin = redis.Redis.from_url(server.url)
        urls = {}
        for section, rule in rules().items():
            assert admin.execute_command(*rule) in (b"OK", "OK", True), rule
            urls[section] = f"redis://{rule[2]}:{password(rule)}@127.0.0.1:{server.port}/0"
        admin.execute_command("ACL", "LOG", "RESET")
        admin.close()
        yield server, urls


SECTION = {
    "scheduler": "Scheduler node",
    "trimmer": "Scheduler node",
    "worker": "Worker",
    "serve": "HTTP service",
}


def trimmed(admin: redis.Redis) -> bool:
    """Whether a ready stream of TOPIC has fewer entries than were ever added to it."""
    for shard in range(int(admin.hget("wheelq:topics", TOPIC) or 0)):
        info = admin.xinfo_stream(f"{{{TOPIC}:{shard}}}:ready")
        if info["entries-added"] > info["length"]:
            return True
    return False


class Hook(http.server.BaseHTTPRequestHandler):
    """A callback receiver: answers 200 and keeps the ids of the jobs POSTed to it."""

    received: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append(body["id"])
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def refusals(admin: redis.Redis) -> list[dict[bytes, object]]:
    """The server's ACL log, less redis-py's CLIENT SETINFO at connect (see the page: a rule
    cannot name it on Redis 7.0, and redis-py carries on when it is refused)."""
    log: list[dict[bytes, object]] = admin.execute_command("ACL", "LOG", "128")
    return [entry for entry in log if entry[b"object"] != b"client|setinfo"]


def refused(url: str, *command: str) -> bool:
    """Whether the user of `url` is refused `command` for want of permission."""
    with redis.Redis.from_url(url) as client:
        try:
            client.execute_command(*command)
        except redis.exceptions.NoPermissionError:
            return True
        return False


def far_jobs(admin: redis.Redis) -> int:
    """Jobs in the far tier of TOPIC's shards (docs/architecture.md, "The far tier")."""
    shards = int(admin.hget("wheelq:topics", TOPIC) or 0)
    return sum(int(admin.hget(f"{{{TOPIC}:{n}}}:far", "entries") or 0) for n in range(shards))


def test_each_role_does_its_work_with_only_its_user(
    acl_server: tuple[EmbeddedServer, dict[str, str]], tmp_path: Path
) -> None:
    server, urls = acl_server
    admin = redis.Redis.from_url(server.url)
    (tmp_path / "handlers.py").write_text(HANDLER)
    env = {"PYTHONPATH": f"{ROOT}:{tmp_path}"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    def handled() -> list[dict[str, object]]:
        path = tmp_path / "handled.txt"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def handled_ids() -> set[object]:
        return {h["id"] for h in handled()}

    def role(name: str, *argv: str, extra: dict[str, str] | None = None) -> None:
        procs[name] = start_wheelq(
            *argv, "--redis-url", urls[SECTION[name]], cwd=tmp_path, env={**env, **(extra or {})}
        )
        stack.callback(stop, procs[name], signal.SIGKILL)  # a no-op once stopped

    with ExitStack() as stack:
        procs: dict[str, subprocess.Popen[str]] = {}
        hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        Hook.received = []
        threading.Thread(target=hook.serve_forever, daemon=True).start()
        stack.callback(hook.server_close)
        stack.callback(hook.shutdown)
        # The producer: enqueue, cancel, reschedule, look up.
        producer = stack.enter_context(wheelq.Client.from_url(urls["Producer"]))
        wheelq.Admin.of(producer).create_topic(
            TOPIC
        )  # events are turned on for a topic that exists
        # Job events on (serve's user): from here every role's scripts write them as well.
        on = run_wheelq("topics", "events", TOPIC, "--on", "--redis-url", urls["HTTP service"])
        assert on.returncode == 0 and "events on" in on.stdout, on.stderr
        soon = producer.enqueue(TOPIC, {"n": 1}, delay=0.2)
        gone = producer.enqueue(TOPIC, {"n": 2}, delay=3600)
        assert producer.cancel(TOPIC, gone) is True
        for n in range(3):  # a key's jobs cancelled by key: cancel.lua takes its list (LPOP)
            producer.enqueue(TOPIC, {"n": 20 + n}, delay=3600, key="customer-9")
        assert producer.cancel(TOPIC, key="customer-9") == 3
        moved = producer.enqueue(TOPIC, {"n": 3}, delay=3600)
        assert producer.reschedule(TOPIC, moved, delay=0.2) is True
        kept = producer.enqueue(TOPIC, {"n": 10}, delay=7200)  # in the far tier
        assert far_jobs(admin) == 1
        failing = producer.enqueue(TOPIC, {"fail": True}, delay=0.2, max_attempts=2)
        in_order = [
            producer.enqueue(TOPIC, {"n": n}, delay=0.2, key="customer-1", ordered=True)
            for n in (5, 6)
        ]
        for _ in range(2):  # a debounced job: the second call moves it
            debounced = producer.enqueue(TOPIC, {"n": 7}, job_id="debounced", debounce_ms=200)
        hook_url = f"http://127.0.0.1:{hook.server_port}/hook"
        called = producer.enqueue(TOPIC, {"n": 8}, delay=0.2, callback=hook_url)
        assert producer.get(TOPIC, gone).state == wheelq.JobState.CANCELLED
        # A recurring schedule, defined with serve's user (the producer's has no schedules).
        added = run_wheelq(
            "schedule", "add", "tick", TOPIC, '{"tick": true}', "--every-ms", "200",
            "--redis-url", urls["HTTP service"],
        )  # fmt: skip
        assert added.returncode == 0, added.stderr

        # The producer waits for a result; the worker's acks wake it. The wait starts before
        # the worker does, so its group is made first (serve's user: the producer's makes none).
        made = run_wheelq("groups", "create", TOPIC, "default", "--redis-url", urls["HTTP service"])
        assert made.returncode == 0, made.stderr
        results = ThreadPoolExecutor(1)
        stack.callback(results.shutdown)
        awaited = results.submit(producer.result, TOPIC, soon, timeout=60)

        role("scheduler", "scheduler", "--topics", TOPIC)
        role("worker", "worker", "handlers:handle", "--topic", TOPIC, extra=FAST)
        role("serve", "serve", "--port", str(port), extra={**FAST, **CALLBACKS})

        # serve answers and enqueues; its job goes through the same scheduler and worker.
        eventually_sync(
            lambda: request("GET", f"{base}/readyz")[0] == 200, timeout_s=30, what="serve ready"
        )
        status, body = request("POST", f"{base}/v1/topics/{TOPIC}/jobs", {"payload": {"n": 4}})
        assert status == 201, body
        over_http = body["id"]

        eventually_sync(
            lambda: {soon, moved, over_http, debounced, *in_order} <= handled_ids(),
            timeout_s=30,
            what="handled",
        )
        eventually_sync(lambda: called in Hook.received, timeout_s=30, what="callback POSTed")
        for job_id in (soon, moved, over_http, debounced, *in_order):
            eventually_sync(
                lambda job_id=job_id: (
                    producer.get(TOPIC, job_id).state == wheelq.JobState.SUCCEEDED
                ),
                timeout_s=30,
                what=f"job {job_id} acked",
            )
        assert gone not in handled_ids()
        status, body = request("GET", f"{base}/v1/topics/{TOPIC}/jobs/{over_http}")
        assert (status, body["state"]) == (200, "succeeded"), body
        assert awaited.result(timeout=30) == {"handled": {"n": 1}}
        status, body = request("GET", f"{base}/v1/topics/{TOPIC}/jobs/{moved}/result?wait_ms=1")
        assert (status, body["result"]) == (200, {"handled": {"n": 3}}), body
        # The schedule fired (the scheduler's user) and the worker ran its jobs.
        eventually_sync(
            lambda: any(h["payload"] == {"tick": True} for h in handled()),
            timeout_s=30,
            what="a scheduled run handled",
        )
        # The failing job was retried, then dead-lettered, by the worker's user.
        eventually_sync(
            lambda: producer.get(TOPIC, failing).state == wheelq.JobState.DEAD,
            timeout_s=30,
            what="the failing job dead",
        )
        assert [h["id"] for h in handled()].count(failing) == 2

        # serve: a pull consumer's group, a pull and its ack; dead letters replayed, purged.
        jobs = f"{base}/v1/topics/{TOPIC}/groups/pullers"
        status, body = request("POST", f"{base}/v1/topics/{TOPIC}/groups", {"name": "pullers"})
        assert status == 201, body
        status, body = request("POST", f"{jobs}/pull", {"max": 100, "wait_ms": 5000})
        assert status == 200 and body["jobs"], body
        receipts = [job["receipt"] for job in body["jobs"]]
        status, body = request("POST", f"{jobs}/ack", {"receipts": receipts})
        assert (status, body["acked"]) == (200, len(receipts)), body
        status, body = request("GET", f"{base}/v1/topics/{TOPIC}/dead")
        assert status == 200 and [d["job_id"] for d in body["dead"]] == [failing], body
        status, body = request("POST", f"{base}/v1/topics/{TOPIC}/dead/replay", {"all": True})
        assert (status, body) == (200, {"count": 1, "skipped": 0}), body
        eventually_sync(
            lambda: [h["id"] for h in handled()].count(failing) > 2,
            timeout_s=30,
            what="the replayed job run again",
        )
        eventually_sync(
            lambda: request("GET", f"{base}/v1/topics/{TOPIC}/dead")[1]["dead"],
            timeout_s=30,
            what="the replayed job dead again",
        )
        status, body = request("DELETE", f"{base}/v1/topics/{TOPIC}/dead?all=true")
        assert (status, body) == (200, {"count": 1}), body

        # Pause and resume of the worker's group, with serve's user; the worker (its own
        # user) follows through its subscription and reads of the pause.
        with wheelq.Admin.from_url(urls["HTTP service"]) as operator:
            assert operator.pause(TOPIC, "default").group_paused("default")
            held = producer.enqueue(TOPIC, {"n": 9})
            assert not operator.resume(TOPIC).group_paused("default")
        eventually_sync(lambda: held in handled_ids(), timeout_s=30, what="handled after resume")

        # Serve's user turns the far tier off; the scheduler node moves the far job back.
        off = run_wheelq(
            "topics", "far", TOPIC, "--horizon-ms", "0", "--redis-url", urls["HTTP service"]
        )
        assert off.returncode == 0, off.stderr
        eventually_sync(lambda: far_jobs(admin) == 0, timeout_s=30, what="the far job promoted")
        assert producer.get(TOPIC, kept).state == wheelq.JobState.PENDING

        # The observer reads everything there is to read.
        for argv in (
            ["stats", TOPIC],
            ["topics"],
            ["topics", "forecast", TOPIC],
            ["topics", "far", TOPIC],
            ["job", TOPIC, kept],
            ["top", "--once"],
            ["job", TOPIC, soon],
            ["dlq", "list", TOPIC],
            ["groups", "list", TOPIC],
            ["schedule", "list"],
        ):
            done = run_wheelq(*argv, "--redis-url", urls["Observer"])
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert "succeeded" in run_wheelq("job", TOPIC, soon, "--redis-url", urls["Observer"]).stdout
        followed = run_wheelq(
            "events", TOPIC, "--since", "start", "--count", "3", "--json",
            "--redis-url", urls["Observer"],
        )  # fmt: skip
        assert followed.returncode == 0, followed.stderr
        kinds = {json.loads(line)["kind"] for line in followed.stdout.splitlines()}
        # the first three of the shards' streams, whatever they are: jobs' (one of them
        # fails) or the topic's pause and resume, which a shard may hold before any job's
        known = {"fired", "started", "succeeded", "retrying", "dead", "cancelled"}
        known |= {"paused", "resumed"}
        assert len(followed.stdout.splitlines()) == 3 and kinds <= known, followed.stdout

        # A worker with flow limits (a rate and one job of a key at a time), the worker's user.
        (tmp_path / "limited.py").write_text(LIMITED)
        procs["limited"] = subprocess.Popen(
            [sys.executable, "limited.py", urls["Worker"], TOPIC],
            cwd=tmp_path,
            env=clean_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stack.callback(stop, procs["limited"], signal.SIGKILL)
        limited = tmp_path / "limited.txt"
        eventually_sync(
            lambda: limited.exists() and set(in_order) <= set(limited.read_text().split()),
            timeout_s=30,
            what="the limited group ran the ordered jobs",
        )
        assert admin.keys("wheelq:flow:*"), "the flow limits left no key: they did not run"

        # A scheduler node that trims at once: the history goes, with the node's user only.
        stop(procs["scheduler"])
        role("trimmer", "scheduler", "--topics", TOPIC, extra=TRIM_NOW)
        eventually_sync(lambda: trimmed(admin), timeout_s=30, what="a stream trimmed")

        # Nothing any role sent so far was refused, and each stops cleanly.
        assert refusals(admin) == []
        for name, proc in procs.items():
            if name == "scheduler":
                continue  # stopped above
            _, err = stop(proc)
            assert proc.returncode == 0, (name, err)
            assert "NOPERM" not in err and "no permissions" not in err, (name, err)
            assert "Traceback" not in err, (name, err)
        assert refusals(admin) == []

    # Each user is refused what lies outside its rule.
    admin.set("billing:invoice:1", "not wheelq's")
    for section, url in urls.items():
        assert refused(url, "FLUSHALL"), section
        assert refused(url, "GET", "billing:invoice:1"), section
        assert refused(url, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru"), section
        assert refused(url, "KEYS", "*"), section
    assert refused(urls["Observer"], "HSET", "wheelq:topics", TOPIC, "9")
    assert refused(urls["Observer"], "DEL", f"{{{TOPIC}:0}}:delayed")
    assert refused(urls["Producer"], "XGROUP", "DESTROY", f"{{{TOPIC}:0}}:ready", "default")
    assert refused(urls["Producer"], "SSUBSCRIBE", "billing:events")
    assert refused(urls["Worker"], "UNLINK", f"{{{TOPIC}:0}}:delayed")
    enqueue = run_wheelq("enqueue", TOPIC, "{}", "--redis-url", urls["Observer"])
    assert enqueue.returncode != 0, enqueue.stdout
    assert admin.get("billing:invoice:1") == b"not wheelq's"
    admin.close()


RUN_TASKS = """\
import wheelq

app = wheelq.App.from_url("redis://127.0.0.1:1/0")  # wheelq run --redis-url replaces it


@app.task
def add(a: int, b: int) -> int:
    return a + b
"""


def test_wheelq_run_and_the_relay_do_their_work_with_only_their_users(
    acl_server: tuple[EmbeddedServer, dict[str, str]], tmp_path: Path, postgres_dsn: str
) -> None:
    """``wheelq run`` (its user) fires and runs a task's jobs: one a producer enqueued and
    one ``wheelq relay`` (its user) placed from a committed outbox row; nothing either sent
    was refused, and each stops cleanly."""
    import psycopg

    from wheelq import outbox

    server, urls = acl_server
    admin = redis.Redis.from_url(server.url)
    (tmp_path / "acl_tasks.py").write_text(RUN_TASKS)
    env = {"PYTHONPATH": f"{ROOT}:{tmp_path}"}
    init = run_wheelq("outbox", "init", "--dsn", postgres_dsn)
    assert init.returncode == 0, init.stderr
    topic = "acl_tasks.add"
    with psycopg.connect(postgres_dsn) as conn, conn.transaction():
        relayed = outbox.enqueue(conn, topic, {"a": 2, "b": 3}, delay=0.2)
    procs = {
        "run": start_wheelq("run", "acl_tasks:app", "--redis-url", urls["Tasks in one process"],
                            cwd=tmp_path, env={**env, **FAST}),
        "relay": start_wheelq("relay", "--dsn", postgres_dsn, "--redis-url",
                              urls["Outbox relay"], cwd=tmp_path, env=env),
    }  # fmt: skip
    try:
        with wheelq.Client.from_url(urls["Producer"]) as producer:
            enqueued = producer.enqueue(topic, {"a": 1, "b": 2}, delay=0.2)
            for job_id in (enqueued, relayed):
                eventually_sync(
                    lambda job_id=job_id: (
                        all(p.poll() is None for p in procs.values())
                        and producer.get(topic, job_id).state == wheelq.JobState.SUCCEEDED
                    ),
                    timeout_s=30,
                    what=f"job {job_id} run",
                )
            assert [producer.get(topic, i).groups[0].result for i in (enqueued, relayed)] == [3, 5]
        assert refusals(admin) == []
    finally:
        stopped = {name: stop(proc) for name, proc in procs.items()}
    for name, proc in procs.items():
        err = stopped[name][1]
        assert proc.returncode == 0, (name, err)
        assert "NOPERM" not in err and "no permissions" not in err, (name, err)
        assert "Traceback" not in err, (name, err)
    assert refusals(admin) == []
    for section in ("Tasks in one process", "Outbox relay"):
        assert refused(urls[section], "FLUSHALL"), section
        assert refused(urls[section], "KEYS", "*"), section
    assert refused(urls["Outbox relay"], "XREADGROUP", "GROUP", "g", "c", "STREAMS", "x", ">")
    admin.close()
