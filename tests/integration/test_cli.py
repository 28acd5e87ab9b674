"""The `wheelq` command as a user runs it: a scheduler node from flags + a TOML file, a
worker running a handler from a module, the dead-letter commands, and the demo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import redis

from tests.support.cli import start_wheelq, stop
from tests.support.entries import add_ready, dead_fields
from tests.support.waiting import eventually_sync
from wheelq import Admin, Client
from wheelq.core.history import JobState
from wheelq.core.job import Field
from wheelq.core.keys import TOPICS_KEY, ShardKeys, all_shards, nodes_key
from wheelq.core.payload import encode_payload

ROOT = Path(__file__).resolve().parents[2]


def test_scheduler_command_leads_fires_and_releases_on_sigterm(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "wheelq.toml"
    config.write_text("[scheduler]\nlease_ttl_ms = 60000\npreload_interval_ms = 100\n")
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, 2)
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wheelq",
                "scheduler",
                "--redis-url",
                redis_url,
                "--topics",
                topic,
                "--config",
                str(config),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            eventually_sync(
                lambda: all(redis_sync.get(k.lease) for k in all_shards(topic, 2)),
                timeout_s=15,
                what="the node to lead both shards",
            )
            # The TOML file was read: the lease lives 60 s, not the 5 s default.
            assert redis_sync.pttl(all_shards(topic, 2)[0].lease) > 10_000
            job = client.enqueue(topic, {"hello": "cli"}, delay=0.2)
            eventually_sync(
                lambda: any(redis_sync.xlen(k.ready) for k in all_shards(topic, 2)),
                timeout_s=10,
                what="the job to fire",
            )
            assert (client.get(topic, job)).state is JobState.READY
        finally:
            node.send_signal(signal.SIGTERM)
            _, err = node.communicate(timeout=15)
    assert node.returncode == 0, err.decode()
    # A graceful stop hands the leases back at once (they would otherwise live 60 s).
    assert [redis_sync.get(k.lease) for k in all_shards(topic, 2)] == [None, None]
    assert redis_sync.zcard(nodes_key(topic)) == 0


def test_demo_against_a_given_server_fires_every_job_once(redis_url: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "wheelq",
            "demo",
            "--redis-url",
            redis_url,
            "--jobs",
            "2000",
            "--spread",
            "1",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "fired 2000/2000  duplicates 0  early 0  missing 0" in out
    assert "handled 2000/2000  run twice 0  missing 0" in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["handled"]["fired"] == 2000
    assert summary["handled"]["lateness_ms"]["p50"] >= 0


def test_demo_ends_on_sigterm_with_143_and_drops_its_topic(
    redis_url: str, redis_sync: redis.Redis
) -> None:
    """The demo has no graceful stop: SIGTERM ends it as the signal's default action would
    (143), but through its ``finally`` blocks, so its topic goes; and it ends even as PID 1
    in a container, where a signal without a handler is ignored (the image's test runs it
    so: tests/integration/test_container.py)."""
    proc = start_wheelq("demo", "--redis-url", redis_url, "--jobs", "200000", "--spread", "120")
    try:
        assert proc.stdout is not None
        assert "enqueueing 200000 jobs" in proc.stdout.readline()
        eventually_sync(
            lambda: any(t.startswith(b"demo-") for t in redis_sync.hkeys(TOPICS_KEY)),
            timeout_s=30,
            what="the demo's topic",
        )
    finally:
        _, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == 143, err
    assert "Traceback" not in err, err
    assert not [t for t in redis_sync.hkeys(TOPICS_KEY) if t.startswith(b"demo-")]


HANDLER = """
import os

def record(job):
    with open(os.environ["WHEELQ_TEST_OUT"], "a") as f:
        f.write(f"{job.id} {job.attempt} {job.payload['n']}\\n")
"""


def test_worker_command_runs_a_module_handler_and_stops_cleanly_on_sigterm(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    (tmp_path / "handlers.py").write_text(HANDLER)
    out = tmp_path / "handled.txt"
    out.touch()
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, 2)
        ids = [client.enqueue(topic, {"n": n}) for n in range(20)]  # due now: fired at once
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wheelq",
                "worker",
                "handlers:record",
                "--topic",
                topic,
                "--group",
                "cli",
                "--concurrency",
                "3",
                "--redis-url",
                redis_url,
            ],
            cwd=tmp_path,
            env={**os.environ, "WHEELQ_TEST_OUT": str(out)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            eventually_sync(
                lambda: len(out.read_text().splitlines()) >= len(ids),
                timeout_s=15,
                what="the worker to handle every job",
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=15)
    assert worker.returncode == 0, err.decode()
    lines = [line.split() for line in out.read_text().splitlines()]
    assert sorted(job_id for job_id, _, _ in lines) == sorted(ids)
    assert {attempt for _, attempt, _ in lines} == {"1"}
    for keys in all_shards(topic, 2):
        groups = redis_sync.xinfo_groups(keys.ready)
        assert [(g["name"], g["pending"], g["consumers"]) for g in groups] == [(b"cli", 0, 0)]


def _wheelq(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "wheelq", *args],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_dlq_commands_list_replay_and_purge(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 1)
    keys = ShardKeys(topic, 0)
    for n in range(3):
        fields = dead_fields(
            f"job-{n}",
            topic=topic,
            due_ms=1,
            attempt=5,
            max_attempts=5,
            payload=encode_payload({"n": n}, 1000),
            error=f"ValueError: boom {n}\nTraceback ...",
        )
        add_ready(redis_sync, keys.dead, fields)
    listed = _wheelq("dlq", "list", topic, "--json", "--redis-url", redis_url)
    assert listed.returncode == 0, listed.stderr.decode()
    rows = [json.loads(line) for line in listed.stdout.decode().splitlines()]
    assert [(r["job_id"], r["reason"], r["group"]) for r in rows] == [
        (f"job-{n}", "failed", "g") for n in range(3)
    ]
    assert rows[0]["error"].startswith("ValueError: boom 0")

    replayed = _wheelq("dlq", "replay", topic, rows[1]["ref"], "--redis-url", redis_url)
    assert replayed.returncode == 0, replayed.stderr.decode()
    assert replayed.stdout.decode().strip() == "replayed 1"
    ((_, fields),) = redis_sync.xrange(keys.ready)
    assert (fields[Field.ID], fields[Field.ATTEMPT], fields[Field.GROUP]) == (b"job-1", b"1", b"g")

    refused = _wheelq("dlq", "purge", topic, "--redis-url", redis_url)
    assert refused.returncode == 2  # neither refs nor --all: nothing purged
    assert redis_sync.xlen(keys.dead) == 2
    purged = _wheelq("dlq", "purge", topic, "--all", "--redis-url", redis_url)
    assert purged.stdout.decode().strip() == "purged 2"
    assert redis_sync.xlen(keys.dead) == 0
