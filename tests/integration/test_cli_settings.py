"""defaults < file < environment < flags, end to end: real `wheelq` processes on a real server.

Each value is read back from Redis where the command put it (a lease's TTL, a consumer
group's name, a retry's due time, a topic's shard count), or shown by a bad value that
wins and stops the command; the unit tests (tests/unit/test_cli_env.py) cover every
setting's variable.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis

from tests.support.cli import assert_one_line_error, free_port, run_wheelq, start_wheelq, stop
from tests.support.entries import add_ready, ready_fields
from tests.support.waiting import eventually_sync
from wheelq import Admin
from wheelq.core.keys import TOPICS_KEY, ShardKeys, nodes_key
from wheelq.core.payload import encode_payload

FAILING = "def fail(job):\n    raise RuntimeError('always')\n\ndef ok(job):\n    pass\n"


@pytest.fixture
def down_url() -> str:
    """A URL of a loopback port nothing listens on."""
    return f"redis://127.0.0.1:{free_port()}/0"


def _lease_ttl(redis_sync: redis.Redis, topic: str) -> int | None:
    """The remaining ms of the lease of `topic`'s shard 0 once some node holds it."""
    key = ShardKeys(topic, 0).lease
    return int(redis_sync.pttl(key)) if redis_sync.get(key) else None


def test_scheduler_url_topics_and_settings_each_take_the_highest_source(
    redis_url: str, redis_sync: redis.Redis, topic: str, down_url: str, tmp_path: Path
) -> None:
    in_file, in_env, in_flag = f"{topic}-file", f"{topic}-env", f"{topic}-flag"
    with Admin.from_url(redis_url) as admin:
        for name in (in_file, in_env, in_flag):
            admin.create_topic(name, 1)
    config = tmp_path / "wheelq.toml"
    config.write_text(
        f'[redis]\nurl = "{down_url}"\n[scheduler]\ntopics = ["{in_file}"]\nlease_ttl_ms = 100000\n'
    )
    file_only = {"WHEELQ_CONFIG": str(config)}
    env = {**file_only, "WHEELQ_SCHEDULER_LEASE_TTL_MS": "200000"}
    nodes = {
        # the file over the defaults; the flag's URL over the file's
        in_file: start_wheelq("scheduler", "--redis-url", redis_url, env=file_only),
        # the environment over the file: URL, topics, lease TTL
        in_env: start_wheelq(
            "scheduler",
            env={**env, "WHEELQ_REDIS_URL": redis_url, "WHEELQ_SCHEDULER_TOPICS": in_env},
        ),
        # flags over the environment (which still beats the file for the TTL)
        in_flag: start_wheelq(
            "scheduler",
            "--redis-url",
            redis_url,
            "--topics",
            in_flag,
            env={**env, "WHEELQ_REDIS_URL": down_url, "WHEELQ_SCHEDULER_TOPICS": in_env},
        ),
    }
    try:
        ttls = eventually_sync(
            lambda: all(t := [_lease_ttl(redis_sync, name) for name in nodes]) and t,
            timeout_s=20,
            what="each node to lead the topic of its highest source",
        )
    finally:
        errors = {name: stop(node)[1] for name, node in nodes.items()}
    assert [node.returncode for node in nodes.values()] == [0, 0, 0], errors
    file_ttl, env_ttl, flag_ttl = ttls
    assert 5_000 < file_ttl <= 100_000  # renewed every third: never below 2/3 of it
    assert 100_000 < env_ttl <= 200_000
    assert 100_000 < flag_ttl <= 200_000


def _put_ready(redis_sync: redis.Redis, topic: str, job_id: str) -> None:
    """A fired job with attempts left, in the stream of a one-shard topic."""
    redis_sync.hsetnx(TOPICS_KEY, topic, 1)
    fields = ready_fields(
        job_id, topic=topic, due_ms=1, max_attempts=3, payload=encode_payload({}, 100)
    )
    add_ready(redis_sync, ShardKeys(topic, 0).ready, fields)


def _retry_in_ms(redis_sync: redis.Redis, topic: str, job_id: str) -> int | None:
    """How far in the future (Redis clock) the job's retry is due, once it is scheduled."""
    due = redis_sync.zscore(ShardKeys(topic, 0).delayed, job_id)
    if due is None:
        return None
    seconds, micros = redis_sync.time()
    return int(due) - (seconds * 1000 + micros // 1000)


def _groups(redis_sync: redis.Redis, topic: str) -> list[bytes]:
    return [g["name"] for g in redis_sync.xinfo_groups(ShardKeys(topic, 0).ready)]


def test_worker_group_and_settings_each_take_the_highest_source(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    (tmp_path / "handlers.py").write_text(FAILING)
    config = tmp_path / "wheelq.toml"
    config.write_text(
        '[worker]\ngroup = "from-file"\nretry_base_ms = 1000000\nretry_jitter_pct = 0\n'
    )
    env = {
        "WHEELQ_CONFIG": str(config),
        "WHEELQ_REDIS_URL": redis_url,
        "WHEELQ_WORKER_GROUP": "from-env",
        "WHEELQ_WORKER_RETRY_BASE_MS": "2000000",
        "WHEELQ_WORKER_CONCURRENCY": "lots",  # bad, but the flag wins: never read
    }
    by_env, by_flag = f"{topic}-env", f"{topic}-flag"
    for name in (by_env, by_flag):
        _put_ready(redis_sync, name, "j1")
    workers = [
        start_wheelq(
            "worker", "handlers:fail", "--topic", by_env, "--concurrency", "1",
            cwd=tmp_path, env=env,
        ),
        start_wheelq(
            "worker", "handlers:fail", "--topic", by_flag, "--group", "from-flag",
            "--concurrency", "2", cwd=tmp_path, env=env,
        ),
    ]  # fmt: skip
    try:
        retry_in = eventually_sync(
            lambda: _retry_in_ms(redis_sync, by_env, "j1"),
            timeout_s=20,
            what="the failed job's retry",
        )
        eventually_sync(
            lambda: _retry_in_ms(redis_sync, by_flag, "j1"),
            timeout_s=20,
            what="the other failed job's retry",
        )
    finally:
        errors = [stop(worker)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], errors
    assert _groups(redis_sync, by_env) == [b"from-env"]
    assert _groups(redis_sync, by_flag) == [b"from-flag"]
    # retry_base_ms from the environment over the file's; jitter 0 from the file over the
    # default 20 % (which would leave it anywhere in (1600 s, 2000 s]).
    assert 2_000_000 - 10_000 < retry_in <= 2_000_000 + 100


@pytest.mark.parametrize(
    "command",
    [["stats", "{topic}"], ["dlq", "list", "{topic}"], ["topics"]],
    ids=lambda argv: "-".join(arg for arg in argv if arg != "{topic}"),
)
def test_read_commands_take_client_settings_and_url_from_the_highest_source(
    redis_url: str, down_url: str, topic: str, tmp_path: Path, command: list[str]
) -> None:
    argv = [arg.format(topic=topic) for arg in command]
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 2)
    bad_file, good_file = tmp_path / "bad.toml", tmp_path / "good.toml"
    bad_file.write_text(f'[redis]\nurl = "{redis_url}"\n[client]\nbatch_size = 0\n')
    good_file.write_text(f'[redis]\nurl = "{down_url}"\n[client]\nbatch_size = 10\n')

    def run(config: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
        done = run_wheelq(*argv, *flags, env={"WHEELQ_CONFIG": str(config), **env})
        assert "Traceback" not in done.stderr, done.stderr
        return done

    # The file is read (its bad setting stops the command) ...
    assert_one_line_error(run(bad_file), 2, "batch_size must be an int in [1, 10000], got 0")
    # ... the environment is over it (a good value there wins; a bad one stops it) ...
    assert run(bad_file, WHEELQ_CLIENT_BATCH_SIZE="10").returncode == 0
    assert_one_line_error(
        run(good_file, "--redis-url", redis_url, WHEELQ_CLIENT_BATCH_SIZE="0"),
        2,
        f"wheelq {argv[0]}: WHEELQ_CLIENT_BATCH_SIZE must be an int in [1, 10000], got 0",
    )
    # ... and so is its URL, and the flag over that.
    ok = run(good_file, WHEELQ_REDIS_URL=redis_url)
    assert ok.returncode == 0, ok.stderr
    assert topic in ok.stdout + ok.stderr
    assert run(good_file, "--redis-url", redis_url, WHEELQ_REDIS_URL=down_url).returncode == 0
    refused = run(bad_file, WHEELQ_REDIS_URL=down_url, WHEELQ_CLIENT_BATCH_SIZE="10")
    assert_one_line_error(refused, 1, f"Redis at {down_url}")


def test_enqueue_creates_the_topic_with_the_environments_shard_count(
    redis_url: str, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "wheelq.toml"
    config.write_text("[client]\ndefault_shards = 2\n")
    env = {"WHEELQ_CONFIG": str(config), "WHEELQ_CLIENT_DEFAULT_SHARDS": "3"}
    done = run_wheelq("enqueue", topic, "{}", "--delay", "100", "--redis-url", redis_url, env=env)
    assert done.returncode == 0, done.stderr
    with Admin.from_url(redis_url) as admin:
        assert admin.topics()[topic] == 3


WORKER = ["worker", "handlers:ok", "--topic", "{topic}"]


@pytest.mark.parametrize(
    ("command", "var", "value", "accepted"),
    [
        pytest.param(
            ["scheduler", "--topics", "{topic}"], "WHEELQ_SCHEDULER_LEASE_TTL_MS", "5s",
            "[500, 600000], got '5s'", id="scheduler-not-an-int",
        ),
        pytest.param(
            WORKER, "WHEELQ_WORKER_VISIBILITY_TIMEOUT_MS", "99", "[100, 86400000], got 99",
            id="worker-below-the-range",
        ),
        pytest.param(
            WORKER, "WHEELQ_WORKER_START", "latest", "earliest, now, got 'latest'",
            id="worker-not-a-start",
        ),
        pytest.param(
            ["dlq", "list", "{topic}"], "WHEELQ_CLIENT_MAX_PAYLOAD_BYTES", "-1",
            "[1, 536870912], got -1", id="dlq-below-the-range",
        ),
        pytest.param(
            ["stats"], "WHEELQ_SCHEDULER_LEASE_TTL", "5000", "unknown environment variable",
            id="stats-misspelt-variable",
        ),
        pytest.param(
            ["stats"], "WHEELQ_CLIENT_DEFAULT_SHARDS", "", None, id="stats-empty-is-unset"
        ),
    ],
)  # fmt: skip
def test_a_bad_variable_is_one_line_exit_2_and_starts_nothing(
    redis_url: str,
    redis_sync: redis.Redis,
    topic: str,
    tmp_path: Path,
    command: list[str],
    var: str,
    value: str,
    accepted: str | None,
) -> None:
    (tmp_path / "handlers.py").write_text(FAILING)
    argv = [arg.format(topic=topic) for arg in command]
    done = run_wheelq(*argv, "--redis-url", redis_url, cwd=tmp_path, env={var: value})
    if accepted is None:
        assert done.returncode == 0, done.stderr
        return
    assert_one_line_error(done, 2, f"wheelq {argv[0]}: ", var, accepted)
    assert redis_sync.hget(TOPICS_KEY, topic) is None  # no topic registered by a worker
    assert redis_sync.exists(ShardKeys(topic, 0).ready, nodes_key(topic)) == 0
