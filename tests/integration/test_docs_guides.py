"""The guides' examples (docs/guides/) run as written, against a server of the test's own.

Each test takes the blocks of the sections it names from its page (`tests.support.docs`):
Python blocks run in order in one namespace, as a reader pasting them into one
interpreter would; a Python block starting with ``# NAME.py`` is written to a file; shell
commands run to completion and must exit 0, except a worker or scheduler, which runs in
the background until the test stops it with SIGTERM (it must then exit 0). Then the test
checks the examples' effect through the library or Redis: that jobs are pending,
cancelled, rescheduled, handled, dead-lettered, as the page says.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis

import wheelq
from tests.support.cli import clean_env
from tests.support.clients import admin_of
from tests.support.docs import (
    Services,
    Snippets,
    argv_of,
    blocks,
    count,
    handled_by,
    run_code,
    run_command,
    snippets,
)
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually_sync
from wheelq.core.job import Envelope
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary


def _gather(page: str, sections: list[str], url: str) -> Snippets:
    """The named sections' blocks, in the order given, as one `Snippets`."""
    out = Snippets()
    for section in sections:
        found = snippets(page, section, url)
        out.files.update(found.files)
        out.code += found.code
        out.commands += found.commands
    return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@contextmanager
def _importable(directory: Path, *modules: str) -> Iterator[None]:
    """`directory` on sys.path, and `modules` imported afresh from it, for the block."""
    sys.path.insert(0, str(directory))
    for name in modules:
        sys.modules.pop(name, None)
    try:
        yield
    finally:
        sys.path.remove(str(directory))
        for name in modules:
            sys.modules.pop(name, None)


def test_producing_guide_runs_as_written(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = [
        "Connect a client",
        "Enqueue a job with a delay or at a time",
        "Give a job an expiry",
        "Enqueue many jobs at once",
        "Choose your own job ids",
        "Cancel a job",
        "Reschedule a job",
        "Find, cancel or move a key's jobs",
        "Follow a job's whole life",
        "Wait for a job's result",
        "See a topic's counts",
        "Drop a topic",
    ]
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        found = _gather("docs/guides/producing.md", sections, url)
        before_ms = _now_ms()
        ns = run_code(found.code, url)
        printed = capsys.readouterr().out.splitlines()
        assert [c[:2] for c in found.commands] == [
            ["wheelq", "enqueue"],
            ["wheelq", "cancel"],
            ["wheelq", "reschedule"],
            ["wheelq", "jobs"],
            ["wheelq", "reschedule"],
            ["wheelq", "cancel"],
            ["wheelq", "job"],
            ["wheelq", "topics"],
            ["wheelq", "stats"],
        ]
        shown = [run_command(command, tmp_path) for command in found.commands]
        client = ns["client"]
        admin = admin_of(client)
        assert isinstance(client, wheelq.Client)
        with client, redis.Redis.from_url(url) as r:
            state = wheelq.JobState
            assert printed[0] == "pending"  # the async client's job
            assert client.get("emails", "async-1").state == state.PENDING
            ada = client.get("emails", str(ns["job_id"]))
            assert ada.state == state.PENDING and ada.payload == {"to": "ada@example.com"}
            assert ada.due_ms is not None and ada.due_ms >= before_ms + 2000
            assert len(ns["ids"]) == len(set(ns["ids"])) == 1000  # type: ignore[arg-type]
            assert client.get("emails", "batch-amy").state == state.PENDING
            assert "['report-2026-11-21']" in printed  # the duplicate was refused
            assert printed.count("True") >= 3 and printed.count("False") >= 3
            assert "ready" in printed  # the result waited for in vain: no worker here
            # a key's jobs: three listed, each moved, all cancelled; the other key's kept
            assert "[True, True, True]" in printed and printed.count("3") >= 2
            assert admin.jobs("reminders", "pending", key="customer-42") == []
            assert len(admin.jobs("reminders", "pending", key="customer-7")) == 1
            # 1 async + 5 single + 1 with an expiry + 1002 batched + 10,000 in bulk + sam-1;
            # cli-1 enqueued and cancelled; the three due now (now@, user0@, kim's) and ann's
            # fired at once
            reminders = [client.get("emails", i) for i in ns["reminders"][:3]]  # type: ignore[index]
            assert [j.payload for j in reminders] == [
                {"to": f"user{n}@example.com"} for n in range(3)
            ]
            stats = admin.stats("emails")  # both tiers: one job is due more than an hour on
            # with the expiry's: cal's pending, ann's fired, the late one dropped
            assert stats is not None and stats.pending == 11008 and stats.far >= 1
            assert count(r, "emails", "ready") == 4 and stats.expired == 1
            assert client.get("emails", str(ns["stale"])).state == state.EXPIRED
            assert printed.count("expired") == 2
            assert shown[0].strip() == "cli-1"
            assert client.get("emails", "cli-1").state == state.CANCELLED
            sam = client.get("emails", "sam-1")  # 3600 s, then 30 s, then 120 s by the CLI
            assert sam.state == state.PENDING and sam.due_ms is not None
            assert 60_000 < sam.due_ms - _now_ms() <= 120_000
            assert "pending" in shown[6], shown[6]
            assert "emails" in shown[7] and "emails" in shown[8]
            # the key's commands, after the code had cancelled its jobs: nothing left to act on
            assert shown[4:6] == [
                "rescheduled 0 jobs of key 'customer-42'\n",
                "cancelled 0 jobs of key 'customer-42'\n",
            ]
            assert "reports" not in admin.topics()  # dropped, with force
            assert not r.keys("{reports:*")
            assert r.hget("wheelq:topics", "reports") is None


def test_workers_guide_runs_as_written(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = [
        "Write a handler",
        "Run a worker",
        "Retry, defer or fail a job",
        "Return a result",
        "Run handlers concurrently",
        "Serve several topics with weights",
        "Limit how long a handler runs",
        "List and delete consumer groups",
        "Pause and resume",
        "Follow job events",
        "Keep running through a Redis outage",
    ]
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        page = "docs/guides/workers.md"
        found = _gather(page, sections, url)
        assert list(found.files) == ["handlers.py"]
        (tmp_path / "handlers.py").write_text(found.files["handlers.py"])
        with _importable(tmp_path, "handlers"):
            ns = run_code(found.code, url)
        printed = capsys.readouterr().out
        client = stack.enter_context(wheelq.Client.from_url(url))
        admin = admin_of(client)
        r = stack.enter_context(redis.Redis.from_url(url))
        state = wheelq.JobState
        # Run a worker: the "orders" job ran in the block (audit printed it) and succeeded.
        assert "audit: orders job " in printed
        # Return a result: the client waited for it.
        assert "{'sku': 7, 'cents': 1999}" in printed
        assert ns["worker"].settings.handler_timeout_ms == 30_000  # type: ignore[attr-defined]
        # Several topics: the weights as given, and strict in that order.
        assert ns["mixed"].weights == {"critical": 6, "default": 3, "low": 1}  # type: ignore[attr-defined]
        assert ns["strict"].strict and ns["per_topic"].topics == ("critical", "low")  # type: ignore[attr-defined]
        assert "('critical', 'default', 'low') ('critical', 'default', 'low')" in printed
        # Retry, defer or fail: busy succeeded on attempt 2, the others are dead letters.
        busy = client.get("charges", "busy")
        assert busy.state == state.SUCCEEDED and busy.attempt == 2, busy
        locked = client.get("charges", "locked")  # deferred once: not an attempt
        assert locked.state == state.SUCCEEDED and locked.attempt == 1, locked
        assert ns["deferred"] == {"locked"}
        dead = {d.job_id: d for d in admin.dead_letters("charges")}
        assert dead.keys() == {"expired", "broken"}
        assert dead["expired"].reason == "failed" and "card expired" in dead["expired"].error
        assert dead["broken"].attempt == 2
        assert dead["broken"].error.startswith("attempt 2 of 2: RuntimeError: gateway down")
        assert "expired failed attempt 1 of 2, not retried: card expired" in printed
        # Groups: "reporting" was created and deleted again; the worker's group is left.
        assert "DeletedGroup(name='reporting'" in printed
        assert [g.name for g in admin.groups("charges") or []] == ["default"]
        # The outage section's status, read from a started worker.
        parts = ns["parts"]
        assert isinstance(parts, dict) and set(parts) == {"settler", "claims", "reader", "pause"}
        assert all(p["running"] and p["failures"] == 0 for p in parts.values())
        listed = run_command(
            next(c for c in found.commands if c[:3] == ["wheelq", "groups", "list"]), tmp_path
        )
        assert "default" in listed
        # Pause and resume: the block paused and resumed "default"; the commands do the topic.
        assert "PauseState(topic='charges', since_ms=None, groups={'default': " in printed
        assert not admin.paused("charges").group_paused("default")
        # Job events: the block read its job's firing; the commands turn them on and follow.
        assert "fired 1" in printed
        pause, resume, events_on = (c for c in found.commands if c[:2] == ["wheelq", "topics"])
        assert "events on" in run_command(events_on, tmp_path)
        follow = next(c for c in found.commands if c[:2] == ["wheelq", "events"])
        (line,) = run_command(follow, tmp_path).splitlines()  # the job the block enqueued
        assert json.loads(line)["kind"] == "fired"
        run_command(pause, tmp_path)
        assert admin.paused("charges").paused
        run_command(resume, tmp_path)
        assert not admin.paused("charges").paused
        # The shell workers: the one of "Run a worker" and the two of the fan-out, with a
        # scheduler node; jobs enqueued once the groups exist reach both groups.
        workers = [c for c in found.commands if c[:2] == ["wheelq", "worker"]]
        weighted = [c for c in workers if "critical=6" in c]  # several topics: run below
        workers = [c for c in workers if c not in weighted]
        workers += snippets(page, "Fan out to several consumer groups", url).commands
        assert [c[2] for c in workers] == ["handlers:send_email"] * 2 + ["handlers:audit"]
        services = Services(tmp_path, stack)
        services.start(["wheelq", "scheduler", "--redis-url", url])
        for command in workers:
            services.start(command)
        eventually_sync(
            lambda: services.alive() and _groups_on(r, "emails") == {b"default", b"audit"},
            timeout_s=60,
            what="both groups on every shard of emails",
        )
        ids = client.enqueue_many(
            "emails", [{"payload": {"to": f"u{n}@example.com"}, "delay": 0.2} for n in range(20)]
        )
        eventually_sync(
            lambda: services.alive() and handled_by(r, "emails", {b"default", b"audit"}),
            timeout_s=60,
            what="both groups to handle every email",
        )
        # The worker of several topics takes a job of each.
        services.start(weighted[0])
        urgent = [
            client.enqueue(name, {"to": f"{name}@example.com"}) for name in ns["mixed"].topics
        ]  # type: ignore[attr-defined]
        for name, job_id in zip(ns["mixed"].topics, urgent, strict=True):  # type: ignore[attr-defined]
            eventually_sync(
                lambda name=name, job_id=job_id: (
                    services.alive() and client.get(name, job_id).state == state.SUCCEEDED
                ),
                timeout_s=60,
                what=f"the job of {name} handled by the worker of several topics",
            )
        services.stop()  # SIGTERM: each exits 0, gracefully
    outputs = [(tmp_path / f"{n}.o").read_text() for n in range(1, 4)]
    sent = outputs[0] + outputs[1]
    for job_id in ids:
        assert f"job {job_id}, attempt 1" in sent, job_id
        assert f"audit: emails job {job_id} " in outputs[2], job_id
    assert sum(sent.count(f"job {job_id},") for job_id in ids) == 20  # once per group


def _groups_on(r: redis.Redis, topic: str) -> set[bytes] | None:
    """The consumer groups every shard of `topic` has (None before the topic exists)."""
    shards = r.hget("wheelq:topics", topic)
    if shards is None:
        return None
    names: set[bytes] | None = None
    for keys in all_shards(topic, int(shards)):
        if not r.exists(keys.ready):
            return None
        here = {g["name"] for g in r.xinfo_groups(keys.ready)}
        names = here if names is None else names & here
    return names


def test_schedule_guide_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    """Moved from test_readme: the commands, then the Python API on another server."""
    page = "docs/guides/schedules.md"
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        commands = snippets(page, "From the command line", url).commands
        assert [c[:3] for c in commands] == [
            ["wheelq", "schedule", "add"],
            ["wheelq", "schedule", "list"],
            ["wheelq", "schedule", "pause"],
        ]
        printed = [run_command(command, tmp_path) for command in commands]
        assert "nightly-report" in printed[1]
        with redis.Redis.from_url(url) as r:
            assert r.hlen("wheelq:topics") == 1  # the schedule's topic, "reports"
        listed = run_command(["wheelq", "schedule", "list", "--redis-url", url], tmp_path)
        assert "paused" in listed
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        found = _gather(page, ["Declare a schedule", "Inspect, pause and remove schedules"], url)
        ns = run_code(found.code, url)
        with wheelq.Admin.from_url(url) as admin:
            names = [(s.topic, s.name) for s in admin.schedules()]
            assert names == [("pings", "heartbeat"), ("reports", "nightly-report")]
            nightly = admin.get_schedule("nightly-report", "reports")
            assert nightly is not None and nightly.rule.tz == "Europe/Berlin"
            assert nightly.rule.cron == "30 2 * * *" and not nightly.paused
            heartbeat = admin.get_schedule("heartbeat", "pings")
            assert heartbeat is not None and not heartbeat.paused  # paused, then resumed
            assert admin.get_schedule("campaign", "emails") is None  # unscheduled
        assert ns["s"] == nightly


def test_the_priority_guide_runs_as_written(
    server_binary: ServerBinary, capsys: pytest.CaptureFixture[str]
) -> None:
    """The guide's blocks print what their comments say, and each leaves what it says: a job of
    priority 9, the credit and fair weights set on every shard, the flood and the other
    tenant's job written (due now, on a fair shard: waiting for the scheduler's due line)."""
    sections = ["Give a job a priority", "Fair shares by key"]
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        found = _gather("docs/guides/priority.md", sections, url)
        ns = run_code(found.code, url)
        printed = capsys.readouterr().out.splitlines()
        assert printed == [
            "9",
            "TopicLimits(max_pending=None, max_ready=None, priority_credit_ms=1000, fair=True, "
            "fair_weights={'acme': 3, 'globex': 2})",
        ]
        client = ns["client"]
        assert isinstance(client, wheelq.Client)
        with client:
            stats = admin_of(client).stats("emails")
            assert stats is not None and stats.pending == 20_001 and stats.in_stream == 0
            assert client.get("reports", str(ns["urgent"])).options["priority"] == 9


def test_the_workflows_guide_runs_as_written(
    server_binary: ServerBinary, capsys: pytest.CaptureFixture[str]
) -> None:
    """The guide's continuation and join are written awaiting, and its tree moved and
    cancelled, as its comments say."""
    sections = [
        "Run a job after another",
        "Join: a parent after its children",
        "Flows inside flows",
        "Whole trees",
    ]
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        found = _gather("docs/guides/workflows.md", sections, url)
        ns = run_code(found.code, url)
        assert capsys.readouterr().out.splitlines() == ["awaiting", "awaiting 3", "2", "3", "4"]
        client = ns["client"]
        assert isinstance(client, wheelq.Client)
        with client:
            kids = client.children("albums", ns["thumbs"].id)
            assert [c.topic for c in kids] == ["thumbnails"] * 3
            parts = client.children("reports", ns["report"].id)
            assert [(c.topic, c.state.value) for c in parts] == [("exports", "cancelled")] * 3
            assert client.get("reports", ns["report"].id).state.value == "cancelled"
            assert client.get("invoices", ns["invoice"]).state.value == "pending"


def test_flow_control_guide_runs_as_written(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = [
        "Bound what a topic holds",
        "Limit how fast a group starts jobs",
        "Run one key's jobs in order",
        "Debounce a burst of enqueues",
    ]
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        found = _gather("docs/guides/flow-control.md", sections, url)
        ns = run_code(found.code, url)
        assert "full, try later" not in capsys.readouterr().out
        client = ns["client"]
        admin = admin_of(client)
        assert isinstance(client, wheelq.Client)
        with client, redis.Redis.from_url(url) as r:
            assert admin.limits("emails") == wheelq.TopicLimits(1_000_000, 50_000)
            admin.set_limits("emails", max_pending=None, max_ready=None)
            [command] = found.commands
            run_command(command, tmp_path)  # the CLI sets them again
            assert admin.limits("emails") == wheelq.TopicLimits(1_000_000, 50_000)
            worker = ns["worker"]
            assert isinstance(worker, wheelq.Worker)
            flow = ns["flow"]
            assert isinstance(flow, wheelq.Flow)
            assert (flow.rate, flow.key_rate, flow.key_concurrency) == ("500/s", "20/s", 2)
            assert count(r, "emails", "delayed") == 1  # ada's
            assert count(r, "emails", "ready") == 1  # tenant-42's, due now: fired at once
            assert count(r, "ledger", "delayed") + count(r, "ledger", "ready") == 3
            assert count(r, "index", "delayed") == 1  # five debounced calls, one job
            info = client.get("index", "reindex-42")
            assert info.state == wheelq.JobState.PENDING
            assert info.payload == {"doc": 42, "edit": 4}  # the latest call wins


def test_autoscaling_example_runs_as_written(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = "docs/operations/autoscaling.md"
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        found = snippets(page, "An example", url)
        ns = run_code(found.code, url)
        printed = capsys.readouterr().out.splitlines()
        forecast = ns["forecast"]
        assert isinstance(forecast, wheelq.Forecast)
        # Read within 20 s of the enqueues (the 30 s job enters the 10 s window after that):
        # the counts the page's comments say.
        assert printed == ["{10: 0, 60: 1, 300: 5}", "0"]
        [command] = found.commands
        shown = run_command(command, tmp_path)
    (text,) = [b.body for b in blocks(page) if b.section == "An example" and b.lang == "text"]
    assert shown == text
    ns["client"].close()  # type: ignore[attr-defined]


def test_durability_guide_runs_as_written(
    server_binary: ServerBinary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the spool file is made in the current directory
    sections = [
        "Keep enqueueing while Redis is away",
        "Watch the spool",
        "Wait for the primary's own disk",
    ]
    page = "docs/guides/durability.md"
    with dedicated_server(server_binary, appendonly=True) as server:
        url = f"{server.url}/0"
        spooled = _gather(page, sections[:2], url).code
        persisted = _gather(page, sections[2:], url).code
        with redis.Redis.from_url(url) as r:
            version = str(r.info("server")["redis_version"])  # Valkey: the Redis it matches
            waitaof = tuple(map(int, version.split(".")[:2])) >= (7, 2)
        ns = run_code(spooled, url)
        assert (tmp_path / "wheelq-spool.db").exists()
        stats = ns["stats"]
        assert isinstance(stats, wheelq.SpoolStats) and stats.depth == 0
        [block] = persisted  # run in the namespace of the blocks before it, as a reader would
        if waitaof:
            exec(compile(block, "<docs block 2>", "exec"), ns)
        else:  # Redis 7.0: refused as the page says, before anything is written
            with pytest.raises(wheelq.AckUnsupportedError):
                exec(compile(block, "<docs block 2>", "exec"), ns)
        with wheelq.Client.from_url(url) as client:
            assert client.get("emails", str(ns["job_id"])).state == wheelq.JobState.PENDING
            audit = client.get("audit", "audit-2").state
            assert audit == (
                wheelq.JobState.READY if waitaof else wheelq.JobState.UNKNOWN
            )  # due now


def test_tracing_guide_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        page = "docs/guides/tracing.md"
        found = snippets(page, "Trace jobs with OpenTelemetry", url)
        assert list(found.files) == ["traced.py"]
        assert found.commands == [["python", "traced.py"]]
        (tmp_path / "traced.py").write_text(found.files["traced.py"])
        spans = [
            line.split(maxsplit=2) for line in run_command(found.commands[0], tmp_path).splitlines()
        ]
        assert sorted((kind, name) for _, kind, name in spans) == [
            ("CONSUMER", "process images"),
            ("INTERNAL", "resize"),
            ("INTERNAL", "upload"),
            ("PRODUCER", "send images"),
        ]
        assert len({trace_id for trace_id, _, _ in spans}) == 1  # one trace
        ns = run_code(snippets(page, "Carry a trace context without OpenTelemetry", url).code, url)
        client = ns["client"]
        admin = admin_of(client)
        assert isinstance(client, wheelq.Client)
        with client, redis.Redis.from_url(url) as r:
            shards = admin.topics()["images"]
            [stored] = [
                raw
                for keys in all_shards("images", shards)
                if (raw := r.hget(keys.jobs, "image-2"))
            ]
            expected = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            assert Envelope.unpack(stored).traceparent == expected


def test_testing_example_passes_as_written(tmp_path: Path) -> None:
    """Moved from test_readme: the page's test file passes under the command it shows."""
    found = snippets("docs/guides/testing.md", "Test a handler end to end")
    files, commands = found.files, found.commands
    assert list(files) == ["test_reminders.py"]
    assert commands == [["python", "-m", "pytest", "-q", "test_reminders.py"]]
    (tmp_path / "test_reminders.py").write_text(files["test_reminders.py"])
    done = subprocess.run(
        argv_of(commands[0]), cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "1 passed" in done.stdout, done.stdout
    assert "warning" not in done.stdout, done.stdout  # a deprecated call, say


def test_tasks_guide_runs_as_written(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tasks guide: its module, ``wheelq run tasks:app`` in the background, then its
    enqueues, awaited ones too, each printing what the page says it prints."""
    page = "docs/guides/tasks.md"
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        found = _gather(page, ["Write a task", "Run it"], url)
        assert list(found.files) == ["tasks.py"]
        assert found.commands == [["wheelq", "run", "tasks:app"]]
        (tmp_path / "tasks.py").write_text(found.files["tasks.py"])
        services = Services(tmp_path, stack)
        services.start(found.commands[0])
        later = _gather(page, ["Enqueue it later", "From asyncio"], url)
        with _importable(tmp_path, "tasks"):
            ns = run_code(later.code, url)
            pending = ns["later"].info().state  # type: ignore[attr-defined]
            ns["send_email"].app.close()  # type: ignore[attr-defined]
        web = _gather(page, ["In FastAPI and Starlette"], url)
        assert list(web.files) == ["web.py"] and not web.code and not web.commands
        (tmp_path / "web.py").write_text(web.files["web.py"])
        with _importable(tmp_path, "tasks", "web"):
            from fastapi.testclient import TestClient

            api = importlib.import_module("web").api
            send_email = importlib.import_module("tasks").send_email
            with TestClient(api) as http, wheelq.Client.from_url(url) as raw:
                job = http.post("/emails", params={"to": "dave@example.com"}).json()["job"]
                sent = http.get(f"/emails/{job}")
                unknown = http.get("/emails/no-such-job")
                unfinished = send_email.enqueue_in(3600, "erin@example.com", n=1).id
                waiting = http.get(f"/emails/{unfinished}", params={"wait": 0})
                unfit = raw.enqueue(send_email.topic, {"to": 5, "n": 1})  # dead-lettered
                failed = http.get(f"/emails/{unfit}")
                cancelled = http.get(f"/emails/{ns['again'].id}")  # type: ignore[attr-defined]
        services.alive()
        services.stop()  # SIGTERM: it exits 0, gracefully
    printed = capsys.readouterr().out.splitlines()
    handle = ns["handle"]
    assert printed[0] == f"{handle.id} {{'sent': 'bob@example.com', 'copies': 2}}"  # type: ignore[attr-defined]
    assert printed[1] == "shipping to Bergen on 2031-01-02 (express)"
    assert printed[2].startswith("n tasks.send_email: argument 'n': Expected `int`, got `str`")
    assert printed[3] == "True True"
    assert printed[4] == "{'sent': 'carol@example.com', 'copies': 3}"
    assert pending == wheelq.JobState.PENDING
    # In FastAPI and Starlette: each of result()'s answers, as its status
    assert (sent.status_code, sent.json()) == (
        200, {"job": job, "result": {"sent": "dave@example.com", "copies": 1}}
    )  # fmt: skip
    assert unknown.status_code == 404, unknown.text
    assert "nothing is known of job 'no-such-job'" in unknown.json()["error"]
    assert (waiting.status_code, waiting.json()) == (202, {"job": unfinished, "state": "pending"})
    assert failed.status_code == 409, failed.text
    assert failed.json()["state"] == "dead" and failed.json()["reason"] == "failed"
    assert "the payload does not fit the task" in failed.json()["error"]
    assert (cancelled.status_code, cancelled.json()["state"]) == (409, "cancelled")


def test_the_migrating_guides_celery_app_runs_ported_whole(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The migrating guide's Celery app, ported whole: its module under ``wheelq run`` (the
    periodic report stored as declared), a charge that succeeds at once and one on its
    retry (`current_job().attempt`), a result kept for its ``result_ttl``, a job with an
    expiry, and its test in eager mode, run with no Redis."""
    page = "docs/guides/migrating.md"
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        found = _gather(page, ["From Celery, ported"], url)
        assert list(found.files) == ["shop_tasks.py", "test_shop.py"]
        assert found.commands == [["wheelq", "run", "shop_tasks:app"]]
        for name, text in found.files.items():
            (tmp_path / name).write_text(text)
        services = Services(tmp_path, stack)
        services.start(found.commands[0])
        with _importable(tmp_path, "shop_tasks", "test_shop"):
            ns = run_code(found.code, url)
            handle = ns["handle"]
            info = handle.info()  # type: ignore[attr-defined]
            charge = ns["charge"]
            with wheelq.Admin.from_url(url) as admin:
                schedules = admin.schedules(charge.app.tasks["shop_tasks.report"].topic)  # type: ignore[attr-defined]
            charge.app.close()  # type: ignore[attr-defined]
            shop = importlib.import_module("shop_tasks")
            shop.app.url = "redis://127.0.0.1:1/0"  # nothing listens: eager mode needs no Redis
            importlib.import_module("test_shop").test_charge()
        services.alive()
        services.stop()
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "charged 1999 for order 42 (try 1)",
        "charged 250000 for order 43 (try 2)",
    ]
    assert info.id == "charge-42" and info.state == wheelq.JobState.SUCCEEDED
    assert info.options["expires"] is not None
    assert [(s.name, s.declared, s.rule.every_ms) for s in schedules] == [
        ("hourly-report", "shop_tasks.report", 3_600_000)
    ]
