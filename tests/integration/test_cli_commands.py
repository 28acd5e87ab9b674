"""The everyday commands: --version and --help, enqueue / cancel / reschedule, topics, stats,
the config file's [client] and [worker] group, --topics with spaces, worker --from."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest
import redis

from tests.support.cli import assert_one_line_error, run_wheelq, start_wheelq, stop
from tests.support.entries import add_ready, ready_fields
from tests.support.waiting import eventually_sync
from wheelq import Admin, AsyncClient, Client, TopicLimits, Worker
from wheelq.core.history import JobState
from wheelq.core.keys import TOPICS_KEY, ShardKeys, all_shards, shard_of
from wheelq.core.payload import encode_payload

RECORDER = """
import os

def record(job):
    with open(os.environ["WHEELQ_TEST_OUT"], "a") as f:
        f.write(f"{job.id}\\n")
"""


def test_version_and_help() -> None:
    shown = run_wheelq("--version")
    assert (shown.returncode, shown.stdout.strip()) == (0, f"wheelq {version('wheelq')}")
    helped = run_wheelq("--help")
    assert helped.returncode == 0
    assert "Delayed jobs on Redis that fire on time" in helped.stdout
    for name in (
        "WHEELQ_REDIS_URL",
        "WHEELQ_CONFIG",
        "WHEELQ_SCHEDULER_TOPICS",
        "WHEELQ_TOPICS",
        "WHEELQ_LOG_LEVEL",
        "WHEELQ_<SECTION>_<KEY>",
    ):
        assert name in helped.stdout
    for command in ("enqueue", "cancel", "reschedule", "topics", "server"):
        assert command in helped.stdout


def test_enqueue_carries_a_traceparent_and_refuses_a_bad_one(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    url = ["--redis-url", redis_url]
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    done = run_wheelq("enqueue", topic, "1", "--traceparent", given, "--id", "t1", *url)
    assert done.returncode == 0, done.stderr
    with Admin.from_url(redis_url) as admin:
        shards = admin.topics()[topic]
    ready = ShardKeys(topic, shard_of("t1", shards)).ready
    [(_, fields)] = redis_sync.xrange(ready)
    assert fields[b"trace"] == given.encode()
    bad = run_wheelq("enqueue", topic, "1", "--traceparent", "00-nope", *url)
    assert_one_line_error(bad, 2, "traceparent must be a W3C traceparent")


def test_enqueue_reschedule_cancel(redis_url: str, topic: str) -> None:
    url = ["--redis-url", redis_url]
    args = ["--delay", "100", "--id", "j1", "--max-attempts", "3", *url]
    done = run_wheelq("enqueue", topic, '{"to": "ada"}', *args)
    assert (done.returncode, done.stdout.strip()) == (0, "j1"), done.stderr
    with Client.from_url(redis_url) as client:
        info = client.get(topic, "j1")
        assert info is not None
        assert (info.payload, info.max_attempts) == ({"to": "ada"}, 3)

        again = run_wheelq("enqueue", topic, "{}", "--id", "j1", "--delay", "100", *url)
        assert_one_line_error(again, 1, "'j1' is already pending", "--replace")
        replaced = run_wheelq("enqueue", topic, "-", "--id", "j1", "--replace", "--at",
                              "2034-01-01T00:00:00Z", *url, stdin='[1, "two"]')  # fmt: skip
        assert replaced.returncode == 0, replaced.stderr
        info = client.get(topic, "j1")
        assert info is not None
        assert (info.payload, info.due_ms) == ([1, "two"], 2_019_686_400_000)

        generated = run_wheelq("enqueue", topic, '"hi"', "--at", "2019686400.5", *url)
        new_id = generated.stdout.strip()
        assert client.get(topic, new_id).due_ms == 2_019_686_400_500

        moved = run_wheelq("reschedule", topic, "j1", "--delay", "50", *url)
        assert (moved.returncode, moved.stdout.strip()) == (0, "rescheduled j1")
        assert client.get(topic, "j1").due_ms < 2_019_686_400_000
        cancelled = run_wheelq("cancel", topic, "j1", *url)
        assert (cancelled.returncode, cancelled.stdout.strip()) == (0, "cancelled j1")
        assert (client.get(topic, "j1")).state is JobState.CANCELLED

    for command in (["cancel", topic, "j1"], ["reschedule", topic, "j1", "--delay", "1"]):
        assert_one_line_error(run_wheelq(*command, *url), 1, "'j1' is not pending")
    assert_one_line_error(run_wheelq("enqueue", topic, "hello", *url), 2, "not valid JSON")
    naive = run_wheelq("enqueue", topic, "1", "--at", "2100-01-01T00:00:00", *url)
    assert_one_line_error(naive, 2, "needs a UTC offset")
    both = run_wheelq("reschedule", topic, "x", "--delay", "1", "--at", "1", *url)
    assert_one_line_error(both, 2, "not allowed with argument")


def test_enqueue_at_in_milliseconds_is_refused_naming_the_flag_and_its_unit(
    redis_url: str, topic: str
) -> None:
    url = ["--redis-url", redis_url]
    ms = run_wheelq("enqueue", topic, "1", "--id", "m", "--at", "1795577999000", *url)
    assert_one_line_error(
        ms, 2, "--at", "epoch seconds in [0, ", "ten years on", "looks like milliseconds"
    )
    far = run_wheelq("enqueue", topic, "1", "--id", "m", "--at", "2200-01-01T00:00:00Z", *url)
    assert_one_line_error(far, 2, "--at", "ten years on")
    with Client.from_url(redis_url) as client:
        assert client.get(topic, "m").state is JobState.UNKNOWN
        client.enqueue(topic, 1, job_id="r", delay=60)
        moved = run_wheelq("reschedule", topic, "r", "--at", "1795577999000", *url)
        assert_one_line_error(moved, 2, "--at", "looks like milliseconds")
        assert client.get(topic, "r").due_ms < 1795577999000 * 1000


@pytest.mark.parametrize(
    ("score", "shown"),
    [
        (1_795_577_999_000_000, "1795577999000000 ms since the epoch (beyond year 9999)"),
        (-(10**15), "-1000000000000000 ms since the epoch (before year 1)"),
        (float("inf"), f"{2**63 - 1} ms since the epoch (beyond year 9999)"),
    ],
    ids=["year-58869", "before-year-1", "inf"],
)
def test_job_shows_a_stored_due_time_no_datetime_can_hold(
    redis_url: str, redis_sync: redis.Redis, topic: str, score: float, shown: str
) -> None:
    # Written before `at` had a bound, or by hand: the lookup still answers, in any form.
    url = ["--redis-url", redis_url]
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        client.enqueue(topic, 1, job_id="far", delay=60)
        keys = ShardKeys(topic, shard_of("far", admin.create_topic(topic)))
    assert redis_sync.zadd(keys.delayed, {"far": score}, xx=True, ch=True) == 1
    done = run_wheelq("job", topic, "far", *url)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines() if " " in line)
    assert (lines["state"].strip(), lines["due"].strip()) == ("pending", shown)
    as_json = run_wheelq("job", topic, "far", "--json", *url)
    assert as_json.returncode == 0, as_json.stderr
    assert shown.startswith(str(json.loads(as_json.stdout)["due_ms"]))


def test_job_shows_the_state_for_people_and_as_json(redis_url: str, topic: str) -> None:
    url = ["--redis-url", redis_url]
    assert (
        run_wheelq("enqueue", topic, '{"to": "ada"}', "--id", "p", "--delay", "60", *url).returncode
        == 0
    )
    assert run_wheelq("enqueue", topic, '"now"', "--id", "f", *url).returncode == 0
    run_wheelq("enqueue", topic, "1", "--id", "c", "--delay", "60", *url)
    run_wheelq("cancel", topic, "c", *url)

    pending = run_wheelq("job", topic, "p", *url)
    assert pending.returncode == 0, pending.stderr
    lines = dict(line.split(None, 1) for line in pending.stdout.splitlines() if " " in line)
    assert (lines["state"].strip(), lines["payload"].strip()) == ("pending", '{"to": "ada"}')
    as_json = run_wheelq("job", topic, "f", "--json", *url)
    info = json.loads(as_json.stdout)
    assert (info["state"], info["id"], info["payload"]) == ("ready", "f", "now")
    assert info["entry_id"] and info["fired_ms"] == int(info["entry_id"].split("-")[0])
    cancelled = json.loads(run_wheelq("job", topic, "c", "--json", *url).stdout)
    assert cancelled["state"] == "cancelled" and cancelled["cancelled_ms"] > 0
    unknown = run_wheelq("job", topic, "nope", *url)
    assert unknown.returncode == 1 and "state" in unknown.stdout and "unknown" in unknown.stdout
    assert "nothing is known of job 'nope'" in unknown.stderr


def test_job_shows_each_groups_result(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as client:
        job_id = client.enqueue(topic, 20)

    async def work() -> None:
        handler = lambda job: {"sum": job.payload + 1, "é": None}  # noqa: E731
        async with (
            Worker.from_url(redis_url, topic, handler, claim_interval_ms=100),
            AsyncClient.from_url(redis_url) as c,
        ):
            await c.result(topic, job_id, timeout=10)

    asyncio.run(work())
    shown = run_wheelq("job", topic, job_id, "--redis-url", redis_url)
    assert shown.returncode == 0, shown.stderr
    assert "succeeded, at " in shown.stdout and 'result {"sum": 21, "é": null}' in shown.stdout
    as_json = json.loads(
        run_wheelq("job", topic, job_id, "--json", "--redis-url", redis_url).stdout
    )
    assert as_json["groups"][0]["result"] == {"sum": 21, "é": None}


def test_topics_lists_shards_and_counts_and_stats_refuses_unknown(
    redis_url: str, topic: str
) -> None:
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, 3)
        client.enqueue(topic, 1, delay=100)
        client.enqueue(topic, 2, delay=100)
    listed = run_wheelq("topics", "--redis-url", redis_url)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == [
        "TOPIC",
        "SHARDS",
        "PENDING",
        "READY",
        "IN_FLIGHT",
        "IN_STREAM",
        "DEAD",
        "PAUSED",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()[1:]}
    assert rows[topic] == ["3", "2", "0", "0", "0", "0", "-"]
    assert run_wheelq("topics", "list", "--redis-url", redis_url).stdout == listed.stdout

    stats = run_wheelq("stats", topic, "--redis-url", redis_url)
    assert stats.stdout.startswith(topic), stats.stderr
    assert "pending" in stats.stdout and "in flight" in stats.stdout
    as_json = run_wheelq("stats", topic, "--json", "--redis-url", redis_url)
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert sum(row["pending"] for row in rows) == 2
    assert {row["topic"] for row in rows} == {topic}
    assert_one_line_error(
        run_wheelq("stats", "nope-" + topic, "--redis-url", redis_url), 1, "no such topic"
    )


def test_topics_drop_refuses_pending_jobs_unless_forced(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as client:
        client.enqueue(topic, 1, delay=100)
    refused = run_wheelq("topics", "drop", topic, "--redis-url", redis_url)
    line = assert_one_line_error(refused, 1, "1 pending jobs", "add --force to drop it anyway")
    assert "force=True" not in line  # the library's spelling, not the command line's
    with Admin.from_url(redis_url) as admin:
        assert topic in admin.topics()
    dropped = run_wheelq("topics", "drop", topic, "--force", "--redis-url", redis_url)
    assert (dropped.returncode, dropped.stdout.strip()) == (0, f"dropped {topic}")
    with Admin.from_url(redis_url) as admin:
        assert topic not in admin.topics()
    assert_one_line_error(
        run_wheelq("topics", "drop", topic, "--redis-url", redis_url), 1, "no such topic"
    )


def test_topics_limits_shows_sets_and_removes_a_topics_limits(redis_url: str, topic: str) -> None:
    def limits(*flags: str) -> str:
        done = run_wheelq("topics", "limits", topic, *flags, "--redis-url", redis_url)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    due_line = "priority_credit_ms=1000, fair=off"
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 2)
    assert limits() == f"{topic}: max_pending=None, max_ready=None, {due_line}"
    assert limits("--max-pending", "100") == f"{topic}: max_pending=100, max_ready=None, {due_line}"
    assert limits("--max-ready", "50") == f"{topic}: max_pending=100, max_ready=50, {due_line}"
    with Admin.from_url(redis_url) as admin:
        assert (admin.limits(topic).max_pending, admin.limits(topic).max_ready) == (100, 50)
    assert limits("--max-pending", "none") == f"{topic}: max_pending=None, max_ready=50, {due_line}"
    assert_one_line_error(
        run_wheelq("topics", "limits", topic, "--max-ready", "0", "--redis-url", redis_url),
        2,
        "max_ready must be None (no limit) or an int in [1, ",
    )


def test_topics_limits_sets_the_due_line_and_refuses_bad_values(redis_url: str, topic: str) -> None:
    def limits(*flags: str) -> list[str]:
        done = run_wheelq("topics", "limits", topic, *flags, "--redis-url", redis_url)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()

    weights = ["--fair-weight", "big=5", "--fair-weight", "k=v=2"]  # a key may hold "="
    shown = limits("--priority-credit-ms", "250", "--fair", *weights, "--max-ready", "8")
    assert shown == [
        f"{topic}: max_pending=None, max_ready=8, priority_credit_ms=250, fair=on",
        'fair_weights={"big": 5, "k=v": 2}',
    ]
    with Admin.from_url(redis_url) as admin:
        want = TopicLimits(None, 8, 250, True, {"big": 5, "k=v": 2})
        assert admin.limits(topic) == want
        bad = [
            (["--priority-credit-ms", "-1"], 2, "priority_credit_ms must be an int in [0, "),
            (["--priority-credit-ms", "86400001"], 2, "priority_credit_ms must be an int in [0, "),
            (["--priority-credit-ms", "soon"], 2, "--priority-credit-ms: invalid int value"),
            (["--fair-weight", "big=0"], 2, "fair_weights['big'] must be an int in [1, 1000]"),
            (["--fair-weight", "big"], 2, "expected KEY=WEIGHT (an int)"),
            (["--fair-weight", "=3"], 2, "expected KEY=WEIGHT (an int)"),
            (["--fair-weight", "a=1", "--clear-fair-weights"], 2, "not allowed with argument"),
        ]
        for flags, status, said in bad:
            argv = ("topics", "limits", topic, "--no-fair", *flags, "--redis-url", redis_url)
            assert_one_line_error(run_wheelq(*argv), status, said)
        assert admin.limits(topic) == want  # nothing changed
    assert limits("--no-fair", "--clear-fair-weights") == [
        f"{topic}: max_pending=None, max_ready=8, priority_credit_ms=250, fair=off"
    ]


def test_topics_pause_and_resume_show_in_topics_and_groups(redis_url: str, topic: str) -> None:
    def wheelq(*argv: str) -> str:
        done = run_wheelq(*argv, "--redis-url", redis_url)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def column(listing: str, name: str) -> str:
        return next(line.split()[-1] for line in listing.splitlines() if line.split()[0] == name)

    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 2)
        admin.create_group(topic, "g")
    assert wheelq("topics", "pause", topic, "--group", "g").startswith(f"paused group g of {topic}")
    assert column(wheelq("topics"), topic) == "g"
    assert column(wheelq("groups", "list", topic), "g") == "yes"
    with Admin.from_url(redis_url) as admin:
        assert admin.paused(topic).group_paused("g")
    wheelq("topics", "pause", topic)
    assert column(wheelq("topics"), topic) == "all"
    assert wheelq("topics", "resume", topic).strip() == f"resumed {topic}"
    assert column(wheelq("topics"), topic) == "-"
    assert column(wheelq("groups", "list", topic), "g") == "-"
    for change in ("pause", "resume"):
        assert_one_line_error(  # a name that is not there: 1, as for a topic
            run_wheelq("topics", change, topic, "--group", "nope", "--redis-url", redis_url),
            1,
            "has no consumer group 'nope'",
        )


UNKNOWN_TOPIC = [  # those that differed, and stats as they all were (groups list, dlq ...)
    ["topics", "pause", "{}", "--group", "g"],
    ["topics", "resume", "{}"],
    ["topics", "drop", "{}"],
    ["topics", "limits", "{}"],
    ["topics", "events", "{}"],
    ["topics", "events", "{}", "--off"],
    ["groups", "delete", "{}", "g"],
    ["stats", "{}"],
    ["events", "{}"],  # exited 2, "no topic", unlike the rest (the black-box recheck)
]


@pytest.mark.parametrize("argv", UNKNOWN_TOPIC, ids=" ".join)
def test_an_unknown_topic_is_said_alike_by_every_topic_subcommand(
    redis_url: str, topic: str, argv: list[str]
) -> None:
    # Issue 43 item 17: resume said "resumed nope" (exit 0), pause exited 2, drop 1 with
    # another message, limits showed a topic that is not there.
    name = f"{topic}-nope"
    done = run_wheelq(*(a.format(name) for a in argv), "--redis-url", redis_url)
    line = assert_one_line_error(done, 1)
    shape = (
        rf"wheelq {argv[0]}: no such topic '{re.escape(name)}' \((topics: .+|there are no topics)\)"
    )
    assert re.fullmatch(shape, line), line
    with Admin.from_url(redis_url) as admin:
        assert name not in admin.topics()  # nothing was made of it


def test_client_section_of_the_config_file_is_used(
    redis_url: str, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "wheelq.toml"
    config.write_text(f'[redis]\nurl = "{redis_url}"\n[client]\ndefault_shards = 3\n')
    done = run_wheelq("enqueue", topic, "{}", "--delay", "100", env={"WHEELQ_CONFIG": str(config)})
    assert done.returncode == 0, done.stderr
    with Admin.from_url(redis_url) as admin:
        assert admin.topics()[topic] == 3


def test_scheduler_topics_may_have_spaces(redis_url: str, redis_sync: redis.Redis) -> None:
    a, b = f"a-{time.monotonic_ns()}", f"b-{time.monotonic_ns()}"
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(a, 1)
        admin.create_topic(b, 1)
    node = start_wheelq("scheduler", "--topics", f" {a} , {b} ,", "--redis-url", redis_url)
    try:
        eventually_sync(
            lambda: redis_sync.get(ShardKeys(a, 0).lease) and redis_sync.get(ShardKeys(b, 0).lease),
            timeout_s=15,
            what="the node to lead both topics",
        )
    finally:
        _, err = stop(node)
    assert node.returncode == 0, err


def _run_worker_until(
    redis_url: str,
    topic: str,
    tmp_path: Path,
    args: list[str],
    ready: Callable[[], bool],
    done: Callable[[list[str]], bool],
) -> list[str]:
    """Start `wheelq worker handlers:record`; once `ready()` call `done()` until true; stop it.
    Returns the ids it handled."""
    (tmp_path / "handlers.py").write_text(RECORDER)
    out = tmp_path / "handled.txt"
    out.touch()
    worker = start_wheelq(
        "worker", "handlers:record", "--topic", topic, "--redis-url", redis_url, *args,
        cwd=tmp_path,
        env={"WHEELQ_TEST_OUT": str(out)},
    )  # fmt: skip
    try:
        eventually_sync(ready, timeout_s=15, what="the worker to be ready")
        eventually_sync(
            lambda: done(out.read_text().split()),
            timeout_s=15,
            what="the worker to handle the jobs",
        )
    finally:
        _, err = stop(worker)
    assert worker.returncode == 0, err
    return out.read_text().split()


def _put_ready(redis_sync: redis.Redis, topic: str, job_id: str) -> None:
    """A fired job in the stream of a one-shard topic, as the scheduler writes it."""
    redis_sync.hsetnx(TOPICS_KEY, topic, 1)  # created with one shard, as create_topic does
    fields = ready_fields(
        job_id, topic=topic, due_ms=1, max_attempts=1, payload=encode_payload({}, 100)
    )
    add_ready(redis_sync, ShardKeys(topic, 0).ready, fields)


def _groups(redis_sync: redis.Redis, topic: str) -> list[bytes]:
    return [g["name"] for g in redis_sync.xinfo_groups(ShardKeys(topic, 0).ready)]


def test_worker_group_can_come_from_the_config_file(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    _put_ready(redis_sync, topic, "j1")
    config = tmp_path / "wheelq.toml"
    config.write_text('[worker]\ngroup = "from-config"\nconcurrency = 2\n')
    handled = _run_worker_until(
        redis_url, topic, tmp_path, ["--config", str(config)], lambda: True, bool
    )
    assert handled == ["j1"]
    assert _groups(redis_sync, topic) == [b"from-config"]


def test_worker_from_now_skips_jobs_fired_before_it_started(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    _put_ready(redis_sync, topic, "before")

    def ready() -> bool:
        if b"default" not in (groups := _groups(redis_sync, topic)):
            return False
        _put_ready(redis_sync, topic, "after")
        return bool(groups)

    handled = _run_worker_until(
        redis_url, topic, tmp_path, ["--from", "now"], ready, lambda ids: "after" in ids
    )
    assert handled == ["after"]


def test_top_once_prints_one_frame_with_every_topic_and_its_backlog(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, 2)
        client.enqueue_many(topic, [{"payload": n, "delay": 3600} for n in range(3)])
    for keys in all_shards(topic, 2):  # two consumer groups: handled/s is each one's
        for group in ("audit", "billing"):
            redis_sync.xgroup_create(keys.ready, group, id="0", mkstream=True, entries_read=0)
    with Admin.from_url(redis_url) as admin:
        admin.pause(topic, "billing")  # marked in its line
    done = run_wheelq(
        "top", "--once", "--interval", "0.2", "--topics", topic, "--redis-url", redis_url
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if "fired/s" in line)
    assert "handled/s by" in header, header  # the column says what it counts
    at = next(n for n, line in enumerate(lines) if topic[:20] in line)
    cells, after = ([cell.strip() for cell in line.split("│")[1:-1]] for line in lines[at : at + 2])
    assert cells[0] == topic
    assert cells[4] == "3"  # pending
    assert cells[2] == "0"  # fired/s: a rate from the two reads, one interval apart
    assert (cells[3], after[3]) == ("audit 0", "billing 0 (paused)")  # a line per group


def test_events_of_a_topic_whose_events_are_off_say_so_and_exit_1(
    redis_url: str, topic: str
) -> None:
    """Issue 43 item 15: `wheelq events T` on such a topic waited for ever."""
    url = ["--redis-url", redis_url]
    with Client.from_url(redis_url) as client:
        job_id = client.enqueue(topic, 1)  # a topic, its events off
    off = run_wheelq("events", topic, *url, timeout_s=15)
    assert_one_line_error(off, 1, "keeps no job events", f"wheelq topics events {topic} --on")
    assert off.stdout == ""
    turned = run_wheelq("topics", "events", topic, "--on", *url)
    assert turned.returncode == 0, turned.stderr
    with Client.from_url(redis_url) as client:
        later = client.enqueue(topic, 2)
    shown = run_wheelq("events", topic, "--since", "start", "--count", "1", "--json", *url)
    assert shown.returncode == 0, shown.stderr
    event = json.loads(shown.stdout)
    assert (event["kind"], event["job_id"]) == ("fired", later), event
    assert job_id != later
    helped = run_wheelq("events", "--help")
    assert "time order per shard" in " ".join(helped.stdout.split())
