"""The `wheelq` command as a user runs it: a scheduler node from flags + a TOML file, and
the demo."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import redis

from tests.support.waiting import eventually_sync
from wheelq import Client
from wheelq.core.keys import all_shards, nodes_key

ROOT = Path(__file__).resolve().parents[2]


def test_scheduler_command_leads_fires_and_releases_on_sigterm(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "wheelq.toml"
    config.write_text("[scheduler]\nlease_ttl_ms = 60000\npreload_interval_ms = 100\n")
    with Client.from_url(redis_url) as client:
        client.create_topic(topic, 2)
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
            assert client.get(topic, job) is None
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
