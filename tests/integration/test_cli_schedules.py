"""`wheelq schedule`: add (and add again) reflected by list and show, pause / resume / remove,
unknown schedules exit 1 in one line, and a bad rule is refused naming its parameter with
nothing written. No scheduler node runs: these read and write the definitions only."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from tests.support.cli import assert_one_line_error, run_wheelq
from wheelq import Admin
from wheelq.core.options import RUN, stored_unset, view

# +05:30 all year (no daylight saving): a zone the next run is easy to work out by hand.
ZONE = "Asia/Kolkata"
CRON = "15 3 * * *"


def _next_0315_kolkata(after_ms: int) -> int:
    """The first 03:15 in Kolkata strictly after `after_ms`, worked out without cron."""
    local = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(ZoneInfo(ZONE))
    run = local.replace(hour=3, minute=15, second=0, microsecond=0)
    if run.timestamp() * 1000 <= after_ms:
        run += timedelta(days=1)
    return int(run.timestamp() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _ok(*args: str) -> str:
    done = run_wheelq(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _show(url: str, name: str, topic: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(_ok("schedule", "show", name, topic, "--redis-url", url))
    return shown


def _listed(url: str, topic: str) -> list[list[str]]:
    """The table's rows for `topic`, split on its two-space column gaps (header first)."""
    out = _ok("schedule", "list", "--topic", topic, "--redis-url", url)
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]


def test_add_list_show_and_add_again(redis_url: str, topic: str) -> None:
    url = ["--redis-url", redis_url]
    before = _now_ms()
    out = _ok(
        "schedule", "add", "digest", topic, '{"kind": "daily"}', "--cron", CRON,
        "--tz", ZONE, "--max-attempts", "5", *url,
    )  # fmt: skip
    after = _now_ms()
    expected = {_next_0315_kolkata(before), _next_0315_kolkata(after)}  # one, unless at 03:15
    assert out.strip() in {
        f"created digest on {topic}: cron {CRON} ({ZONE}), next run {_iso(t)}" for t in expected
    }

    shown = _show(redis_url, "digest", topic)
    assert shown["next_run_ms"] in expected | {_next_0315_kolkata(_now_ms())}
    clocked = {"next_run_ms", "planned_ms", "updated_ms"}
    assert {k: v for k, v in shown.items() if k not in clocked} == {
        "name": "digest", "topic": topic, "cron": CRON, "every_ms": None, "tz": ZONE,
        "start_ms": 0, "end_ms": None, "misfire": "once", "max_catch_up": 100,
        "max_attempts": 5, "paused": False, "payload": {"kind": "daily"}, "error": None,
        "declared": "",
        **view(stored_unset(), RUN),  # no option of the runs given: each as get() shows it unset
    }  # fmt: skip
    assert before - 5000 <= shown["planned_ms"] <= _now_ms() + 5000  # planned from creation

    header, row = _listed(redis_url, topic)
    assert header == ["NAME", "TOPIC", "RULE", "TZ", "MISFIRE", "STATE", "NEXT_RUN"]
    assert row[:6] == ["digest", topic, f"cron {CRON}", ZONE, "once", "active"]
    assert row[6] == _iso(shown["next_run_ms"])

    # The same name again updates it: one schedule, the new rule and payload.
    out = _ok("schedule", "add", "digest", topic, '"v2"', "--every-ms", "90000", *url)
    assert out.startswith(f"updated digest on {topic}: every 90s, next run "), out
    with Admin.from_url(redis_url) as admin:
        (only,) = admin.schedules(topic)
    assert (only.name, only.rule.every_ms, only.rule.cron, only.data) == (
        "digest",
        90000,
        None,
        "v2",
    )
    rows = json.loads(_ok("schedule", "list", "--topic", topic, "--json", *url))
    assert [(r["name"], r["every_ms"], r["tz"], r["payload"]) for r in rows] == [
        ("digest", 90000, "UTC", "v2")
    ]
    assert rows[0]["next_run_ms"] % 90000 == 0 and rows[0]["next_run_ms"] > before


def test_pause_resume_remove(redis_url: str, topic: str) -> None:
    url = ["--redis-url", redis_url]
    _ok("schedule", "add", "tick", topic, "--every-ms", "60000", *url)

    assert _ok("schedule", "pause", "tick", topic, *url).strip() == "paused tick"
    assert _listed(redis_url, topic)[1][5:] == ["paused", "-"]
    shown = _show(redis_url, "tick", topic)
    assert (shown["paused"], shown["next_run_ms"]) == (True, None)

    assert _ok("schedule", "resume", "tick", topic, *url).strip() == "resumed tick"
    assert _listed(redis_url, topic)[1][5] == "active"
    shown = _show(redis_url, "tick", topic)
    assert shown["paused"] is False and shown["next_run_ms"] % 60000 == 0

    assert _ok("schedule", "remove", "tick", topic, *url).strip() == "removed tick"
    gone = run_wheelq("schedule", "show", "tick", topic, *url)
    assert_one_line_error(gone, 1, f"no schedule tick on topic {topic}")
    assert gone.stdout == ""
    empty = run_wheelq("schedule", "list", "--topic", topic, *url)
    assert (empty.returncode, empty.stdout, empty.stderr.strip()) == (
        0, "", f"no schedules on {topic}"
    )  # fmt: skip
    assert json.loads(_ok("schedule", "list", "--topic", topic, "--json", *url)) == []


def test_add_takes_a_flag_for_each_option_the_runs_carry(redis_url: str, topic: str) -> None:
    """--max-attempts, --callback and each flag the table gives an option of the runs store
    what `Admin.schedule` stores with those options; show prints them."""
    hook = "https://hooks.example/run"
    given = {str: "tenant-1", int: 3, bool: True}
    options = {o.name: given[o.cli] for o in RUN if o.cli is not None}
    flags = [
        arg
        for name, value in options.items()
        for arg in ["--" + name.replace("_", "-"), *([] if value is True else [str(value)])]
    ]
    url = ["--redis-url", redis_url]
    _ok("schedule", "add", "tick", topic, "--every-ms", "60000", "--max-attempts", "5",
        "--callback", hook, *flags, *url)  # fmt: skip
    shown = _show(redis_url, "tick", topic)
    assert (shown["max_attempts"], shown["callback"]) == (5, hook)
    assert {n: shown[n] for n in options} == options
    with Admin.from_url(redis_url) as admin:
        admin.schedule("same", topic, None, every_ms=60_000, max_attempts=5, callback=hook,
                       **options)  # fmt: skip
        by_cli, by_admin = admin.get_schedule("tick", topic), admin.get_schedule("same", topic)
    assert by_cli is not None and by_admin is not None
    assert (by_cli.options, by_cli.max_attempts) == (by_admin.options, by_admin.max_attempts)


@pytest.mark.parametrize("action", ["pause", "resume", "remove", "show"])
def test_an_unknown_schedule_fails_in_one_line(redis_url: str, topic: str, action: str) -> None:
    url = ["--redis-url", redis_url]
    _ok("schedule", "add", "known", topic, "--every-ms", "60000", *url)
    done = run_wheelq("schedule", action, "nope", topic, *url)
    assert_one_line_error(done, 1, f"wheelq schedule: no schedule nope on topic {topic}")
    on_no_topic = run_wheelq("schedule", action, "known", "nope-" + topic, *url)
    assert_one_line_error(on_no_topic, 1, f"no schedule known on topic nope-{topic}")


@pytest.mark.parametrize(
    ("rule", "fragments"),
    [
        (["--cron", CRON, "--every-ms", "60000"], ["--every-ms", "not allowed with", "--cron"]),
        ([], ["one of the arguments --cron --every --every-ms is required"]),
        (["--every", "0.01"], ["every must be at least 0.1 s"]),
        (["--cron", CRON, "--tz", "Mars/Base"], ["tz must be an IANA zone", "'Mars/Base'"]),
        (["--every-ms", "50"], ["every_ms must be an int in [100, ", "got 50"]),
        (["--every-ms", "60000", "--tz", ZONE], ["tz must be 'UTC'"]),
        (["--cron", "61 * * * *"], ["cron must be five fields", "'61 * * * *'"]),
        (["--cron", "* * * * * *"], ["cron must be five fields", "every_ms"]),
        (["--cron", CRON, "--misfire", "never"], ["--misfire", "invalid choice: 'never'"]),
        (["--cron", CRON, "--max-catch-up", "0"], ["max_catch_up must be an int in [1, "]),
        (["--cron", CRON, "--start", "tomorrow"], ["--start", "epoch seconds or ISO 8601"]),
        (["--cron", CRON, "--start", "20", "--end", "10"], ["end must not be before start"]),
        (["--cron", CRON, "--start", "9999-12-31T23:59:59Z"], ["start must be", "ten years on"]),
        (["--every-ms", "1000", "--start", "253402300799"], ["start must be", "ten years on"]),
        (["--cron", CRON, "--end", "9999-12-31T23:59:59Z"], ["end must be", "ten years on"]),
    ],
)
def test_a_bad_rule_is_named_in_one_line_and_writes_nothing(
    redis_url: str, redis_sync: redis.Redis, topic: str, rule: list[str], fragments: list[str]
) -> None:
    with Admin.from_url(redis_url) as admin:
        schedules = admin.schedules()
        done = run_wheelq("schedule", "add", "bad", topic, "{}", *rule, "--redis-url", redis_url)
        assert_one_line_error(done, 2, "wheelq schedule", *fragments)
        assert done.stdout == ""
        assert admin.schedules() == schedules
        assert topic not in admin.topics()
    assert redis_sync.keys(f"*{topic}*") == []


def test_a_bad_payload_or_name_is_refused(redis_url: str, topic: str) -> None:
    url = ["--redis-url", redis_url]
    done = run_wheelq("schedule", "add", "x", topic, "hello", "--every-ms", "1000", *url)
    assert_one_line_error(done, 2, "payload is not valid JSON", "'\"hello\"'")
    done = run_wheelq("schedule", "add", "a b", topic, "1", "--every-ms", "1000", *url)
    assert_one_line_error(done, 2, "name must be 1-100 characters", "'a b'")
    with Admin.from_url(redis_url) as admin:
        assert admin.schedules(topic) == []
