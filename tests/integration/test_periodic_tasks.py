"""Periodic tasks declared in code (`App.periodic`): the sync at start adds, updates and
removes only what code declared, once however many processes sync together; two
``wheelq run`` processes run each occurrence once; ``manage.py wheelq run`` syncs too;
`Admin.schedule` on a task's topic checks its payload (docs/guides/tasks.md, "Periodic
tasks"; docs/guides/schedules.md)."""

from __future__ import annotations

import asyncio
import json
import signal
import textwrap
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

import wheelq
from tests.integration.test_contrib_django import Project, project  # noqa: F401 (fixture)
from tests.integration.test_docs_guides import _gather, _importable
from tests.integration.test_web_dashboard import get
from tests.support.cli import run_wheelq
from tests.support.docs import run_code
from tests.support.servers import dedicated_server
from tests.support.tasks import (
    URL_VARIABLE,
    Log,
    module_name,
    running,
    start_run,
    write_module,
)
from tests.support.waiting import eventually_sync
from tests.support.web import serving
from wheelq.core.keys import ShardKeys
from wheelq.store import schedules as sched
from wheelq.testing import ServerBinary

pytestmark = [pytest.mark.both_servers, pytest.mark.cluster_too]

SYNCS_AT_ONCE = 8


def make_app(url: str, topic: str, *, kinds: dict[str, str], every_s: float = 60) -> wheelq.App:
    """An app with the task ``report`` on `topic` and, on ``<topic>-b``, ``other``; one
    declaration of ``report`` per item of `kinds` (schedule name -> its argument)."""
    app = wheelq.App(url)

    @app.task(name=f"{topic}.report", topic=topic)
    def report(kind: str, copies: int = 1) -> None:
        return None

    @app.task(name=f"{topic}.other", topic=f"{topic}-b")
    def other() -> None:
        return None

    for name, kind in kinds.items():
        app.periodic(report, every=every_s, args=(kind,), name=name)
    return app


@pytest.fixture
def apps(redis_url: str) -> Iterator[list[wheelq.App]]:
    """The apps a test makes, closed after it."""
    made: list[wheelq.App] = []
    yield made
    for app in made:
        app.close()


def stored(admin: wheelq.Admin, topic: str) -> dict[str, wheelq.Schedule]:
    return {s.name: s for s in admin.schedules(topic)}


def test_sync_adds_updates_and_removes_only_what_code_declared(
    redis_url: str, topic: str, apps: list[wheelq.App]
) -> None:
    first = make_app(redis_url, topic, kinds={"daily": "d", "weekly": "w"})
    apps.append(first)
    admin = wheelq.Admin.of(first.client)
    admin.schedule("by-hand", topic, {"kind": "h"}, every=timedelta(minutes=1))

    report = first.sync_periodic()
    assert (report.added, report.updated, report.removed) == (
        [f"{topic}/daily", f"{topic}/weekly"],
        [],
        [],
    )
    now = stored(admin, topic)
    assert now["daily"].data == {"kind": "d"} and now["daily"].declared == f"{topic}.report"
    assert now["daily"].rule.every_ms == 60_000
    assert now["by-hand"].declared == ""

    again = first.sync_periodic()  # a restart: nothing changes, the state stays
    assert (again.added, again.updated, again.removed) == ([], [], [])
    assert sorted(again.kept) == [f"{topic}/daily", f"{topic}/weekly"]
    assert stored(admin, topic)["daily"] == now["daily"]  # its updated_ms and state too

    second = make_app(redis_url, topic, kinds={"daily": "d2"})  # weekly dropped, daily changed
    apps.append(second)
    report = second.sync_periodic()
    assert (report.added, report.updated, report.removed) == (
        [],
        [f"{topic}/daily"],
        [f"{topic}/weekly"],
    )
    after = stored(admin, topic)
    assert set(after) == {"daily", "by-hand"}  # Admin.schedule's is never removed
    assert after["daily"].data == {"kind": "d2"}
    assert after["daily"].planned_ms == now["daily"].planned_ms  # an update keeps the state


def test_an_admin_schedule_of_a_declared_name_is_made_the_declared_one(
    redis_url: str, topic: str, apps: list[wheelq.App]
) -> None:
    app = make_app(redis_url, topic, kinds={"daily": "d"})
    apps.append(app)
    admin = wheelq.Admin.of(app.client)
    admin.schedule("daily", topic, {"kind": "x"}, every_ms=120_000)
    assert app.sync_periodic().updated == [f"{topic}/daily"]
    daily = stored(admin, topic)["daily"]
    assert (daily.data, daily.rule.every_ms, daily.declared) == (
        {"kind": "d"},
        60_000,
        f"{topic}.report",
    )


def test_concurrent_syncs_write_each_change_once(
    redis_url: str, topic: str, apps: list[wheelq.App]
) -> None:
    """`SYNCS_AT_ONCE` processes' syncs at once (threads, each its own app and connections):
    each add, update and removal is written by exactly one of them."""

    def race(kinds: dict[str, str]) -> list[Any]:
        racers = [make_app(redis_url, topic, kinds=kinds) for _ in range(SYNCS_AT_ONCE)]
        apps.extend(racers)
        for app in racers:
            app.client.redis.ping()  # connected before the start line
        start = threading.Barrier(SYNCS_AT_ONCE)
        reports: list[Any] = [None] * SYNCS_AT_ONCE

        def sync(i: int) -> None:
            start.wait(timeout=30)
            reports[i] = racers[i].sync_periodic()

        threads = [threading.Thread(target=sync, args=(i,)) for i in range(SYNCS_AT_ONCE)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert all(r is not None for r in reports), reports
        return reports

    def written(reports: list[Any]) -> tuple[list[str], list[str], list[str]]:
        return (
            sorted(n for r in reports for n in r.added),
            sorted(n for r in reports for n in r.updated),
            sorted(n for r in reports for n in r.removed),
        )

    names = {f"s{i}": f"k{i}" for i in range(6)}
    assert written(race(names)) == (sorted(f"{topic}/{n}" for n in names), [], [])
    changed = {"s0": "new", "s1": "k1", "s2": "k2", "s6": "k6"}  # s3-s5 dropped
    assert written(race(changed)) == (
        [f"{topic}/s6"],
        [f"{topic}/s0"],
        [f"{topic}/s3", f"{topic}/s4", f"{topic}/s5"],
    )
    admin = wheelq.Admin.of(apps[0].client)
    assert {n: s.data["kind"] for n, s in stored(admin, topic).items()} == changed


async def test_async_syncs_at_once_write_each_change_once(
    redis_url: str, topic: str, apps: list[wheelq.App]
) -> None:
    racers = [make_app(redis_url, topic, kinds={"a": "x", "b": "y"}) for _ in range(4)]
    apps.extend(racers)
    try:
        reports = await asyncio.gather(*(app.async_sync_periodic() for app in racers))
        assert sorted(n for r in reports for n in r.added) == [f"{topic}/a", f"{topic}/b"]
        listed = await wheelq.AsyncAdmin.of(racers[0].aclient).schedules(topic)
        assert [(s.name, s.declared) for s in listed] == [
            ("a", f"{topic}.report"),
            ("b", f"{topic}.report"),
        ]
    finally:
        for app in racers:
            await app.aclose()


@pytest.mark.parametrize(
    ("payload", "parameter"),
    [({"kind": 5}, "kind"), ({}, "kind"), ({"kind": "d", "extra": 1}, "extra"), ([1], "payload")],
)
def test_admin_schedule_on_a_task_topic_checks_the_payload_and_stores_nothing(
    redis_url: str, topic: str, apps: list[wheelq.App], payload: Any, parameter: str
) -> None:
    app = make_app(redis_url, topic, kinds={})
    apps.append(app)
    admin = wheelq.Admin.of(app.client)
    with pytest.raises(wheelq.InvalidArgumentError) as raised:
        admin.schedule("bad", topic, payload, every=60)
    assert raised.value.parameter == parameter
    assert admin.get_schedule("bad", topic) is None
    good = admin.schedule("good", topic, {"kind": "d", "copies": 2}, every=60)
    assert good.data == {"kind": "d", "copies": 2}


async def test_async_admin_schedule_on_a_task_topic_checks_the_payload(
    redis_url: str, topic: str, apps: list[wheelq.App]
) -> None:
    app = make_app(redis_url, topic, kinds={})
    apps.append(app)
    admin = wheelq.AsyncAdmin.of(app.aclient)
    try:
        with pytest.raises(wheelq.InvalidArgumentError) as raised:
            await admin.schedule("bad", topic, {"kind": "d", "copies": "2"}, every=60)
        assert raised.value.parameter == "copies"
        assert await admin.get_schedule("bad", topic) is None
        made = await admin.schedule("good", topic, {"kind": "d"}, every=timedelta(seconds=90))
        assert made.rule.every_ms == 90_000
    finally:
        await app.aclose()


TICKS = """
    import os, time

    import redis
    import redis.cluster

    import wheelq

    url = os.environ["{variable}"]
    app = wheelq.App(url)
    on_cluster = os.environ["TICKS_ON_CLUSTER"] == "1"
    store = (redis.cluster.RedisCluster if on_cluster else redis.Redis).from_url(url)


    @app.task(name="{name}", topic="{topic}")
    def tick(kind: str) -> None:
        store.rpush("{ticks}", f"{{kind}} {{int(time.time() * 1000)}}")


    app.periodic(tick, every=1, args=("daily",))
"""


def test_two_wheelq_run_processes_run_each_occurrence_once(
    tmp_path: Path,
    topic: str,
    redis_url: str,
    redis_sync: redis.Redis,
    deployment: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two ``wheelq run`` of an app with ``every=1``: both sync at start, the occurrences
    ``<name>@<ms>`` are one second apart, and each ran exactly once (as many runs recorded
    as occurrences that succeeded, none missing between the first and the last)."""
    monkeypatch.setenv(URL_VARIABLE, redis_url)
    monkeypatch.setenv("TICKS_ON_CLUSTER", "1" if deployment == "cluster" else "0")
    module, ticks = module_name(topic), f"{topic}:ticks"
    source = TICKS.format(variable=URL_VARIABLE, name=f"{topic}.tick", topic=topic, ticks=ticks)
    tasks = write_module(tmp_path, module, textwrap.dedent(source))
    client = tasks.app.client
    try:
        with running(tmp_path, module, redis_url), running(tmp_path, module, redis_url):
            eventually_sync(
                lambda: redis_sync.llen(ticks) >= 4,
                timeout_s=30,
                what="four runs of the periodic task",
            )
        runs = [line.decode().split() for line in redis_sync.lrange(ticks, 0, -1)]
        assert {kind for kind, _ in runs} == {"daily"}
        ran_ms = sorted(int(ms) for _, ms in runs)
        name = f"{topic}.tick"
        occurrences = range((ran_ms[0] // 1000 - 2) * 1000, ran_ms[-1] + 1, 1000)
        states = {t: client.get(topic, f"{name}@{t}").state for t in occurrences}
        done = [t for t, state in states.items() if state == wheelq.JobState.SUCCEEDED]
        assert len(done) == len(runs), (states, ran_ms)  # none twice, none lost
        assert done == list(range(done[0], done[-1] + 1, 1000))  # one a second, in a row
        listed = wheelq.Admin.of(client).schedules(topic)
        assert [(s.name, s.declared) for s in listed] == [(name, name)]
    finally:
        tasks.app.close()


DJANGO_TASKS = """
    import wheelq

    app = wheelq.App.from_url("redis://127.0.0.1:1/0")  # nothing there: WHEELQ["URL"] replaces it


    @app.task
    def send_email(to: str, n: int) -> dict:
        return {"sent": to, "copies": n}


    app.periodic(send_email, cron="@daily", args=("ops@example.com", 1), name="digest")
"""


def test_manage_py_wheelq_run_syncs_the_declarations(project: Project) -> None:  # noqa: F811
    (project.folder / f"{project.tasks}.py").write_text(textwrap.dedent(DJANGO_TASKS))
    admin = wheelq.Admin.from_url(project.url)
    topic = f"{project.tasks}.send_email"
    try:
        proc = project.manage("wheelq", "run")
        log = Log(proc)
        try:
            assert log.started.wait(30), log.err  # the sync runs before the worker starts
            digest = admin.get_schedule("digest", topic)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        out, err = log.texts()
        assert proc.returncode == 0, (out, err)
        assert digest is not None, err
        assert digest.data == {"to": "ops@example.com", "n": 1}
        assert (digest.rule.cron, digest.declared) == ("0 0 * * *", topic)
        assert f"periodic tasks added: {topic}/digest" in err, err
    finally:
        admin.close()


async def test_the_topic_page_and_http_show_the_schedules_declared_in_code(
    redis_url: str, topic: str, apps: list[wheelq.App]
) -> None:
    app = make_app(redis_url, topic, kinds={"daily": "d"})
    apps.append(app)
    admin = wheelq.Admin.of(app.client)
    admin.schedule("by-hand", topic, {"kind": "h"}, cron="@hourly")
    app.sync_periodic()
    async with serving(redis_url) as api:
        _, page = await get(api, f"/ui/topics/{topic}")
        _, listing = await get(api, f"/ui/topics/{topic}/schedules")
        status, shown, _ = await api.call("GET", f"/v1/topics/{topic}/schedules/daily")
        assert (status, shown["declared"], shown["every_ms"]) == (200, f"{topic}.report", 60_000)
        status, by_hand_json, _ = await api.call("GET", f"/v1/topics/{topic}/schedules/by-hand")
        assert (status, by_hand_json["declared"]) == (200, "")
    rows = {page.ids[f"schedule-{i}"].split()[0]: i for i in (1, 2)}
    assert set(rows) == {"by-hand", "daily"}
    daily, by_hand = rows["daily"], rows["by-hand"]
    assert page.ids[f"schedule-{daily}-declared"] == f"periodic, in code: {topic}.report"
    assert page.ids[f"schedule-{by_hand}-declared"] == "by hand"
    assert "every 1m" in page.ids[f"schedule-{daily}"]
    marked = {listing.ids[f"schedule-{i}"].split()[:2][-1] for i in (1, 2)}
    assert "periodic" in marked  # the schedules page marks it too


def test_cli_schedule_add_takes_every_in_seconds_and_show_names_the_declaring_task(
    redis_url: str, topic: str, apps: list[wheelq.App]
) -> None:
    url = ["--redis-url", redis_url]
    done = run_wheelq("schedule", "add", "half", topic, '{"kind": "h"}', "--every", "1.5", *url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"created half on {topic}: every 1500ms, next run "), done.stdout
    both = run_wheelq("schedule", "add", "x", topic, "--every", "1", "--every-ms", "1000", *url)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr
    app = make_app(redis_url, topic, kinds={"daily": "d"})
    apps.append(app)
    app.sync_periodic()
    shown = json.loads(run_wheelq("schedule", "show", "daily", topic, *url).stdout)
    assert (shown["every_ms"], shown["declared"]) == (60_000, f"{topic}.report")
    half = json.loads(run_wheelq("schedule", "show", "half", topic, *url).stdout)
    assert (half["every_ms"], half["declared"]) == (1500, "")


def test_the_tasks_guides_periodic_tasks_run_as_written(
    server_binary: ServerBinary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = "docs/guides/tasks.md"
    with dedicated_server(server_binary) as server:  # the guide's URL names database 0
        url = f"{server.url}/0"
        found = _gather(page, ["Write a task", "Periodic tasks"], url)
        (tmp_path / "tasks.py").write_text(found.files["tasks.py"])
        with _importable(tmp_path, "tasks"):
            ns = run_code(found.code, url)
            ns["app"].close()  # type: ignore[attr-defined]
        with wheelq.Admin.from_url(url) as admin:
            listed = {s.name: s for s in admin.schedules("tasks.send_email")}
    assert capsys.readouterr().out.splitlines() == [
        "to",
        "['tasks.send_email/nightly-digest', 'tasks.send_email/tasks.send_email']",
    ]
    assert set(listed) == {"nightly-digest", "tasks.send_email"}
    assert listed["tasks.send_email"].rule.every_ms == 3_600_000
    assert listed["nightly-digest"].data == {"to": "boss@example.com", "n": 2}
    assert {s.declared for s in listed.values()} == {"tasks.send_email"}


def test_wheelq_run_started_while_redis_is_down_syncs_once_it_is_back(
    tmp_path: Path, topic: str, server_binary: ServerBinary, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dedicated_server(server_binary) as srv:
        monkeypatch.setenv(URL_VARIABLE, srv.url)
        monkeypatch.setenv("TICKS_ON_CLUSTER", "0")
        module = module_name(topic)
        source = TICKS.format(
            variable=URL_VARIABLE, name=f"{topic}.tick", topic=topic, ticks=f"{topic}:t"
        )
        tasks = write_module(tmp_path, module, textwrap.dedent(source))
        srv.kill()
        proc = start_run(tmp_path, module, srv.url, "--log-level", "INFO")
        log = Log(proc)
        try:
            eventually_sync(
                lambda: "periodic tasks not synced yet" in "".join(log.err),
                timeout_s=30,
                what="wheelq run to say it could not sync",
            )
            srv.restart()
            eventually_sync(
                lambda: f"periodic tasks added: {topic}/{topic}.tick" in "".join(log.err),
                timeout_s=60,
                what="the sync retried once redis is back",
            )
            with wheelq.Admin.from_url(srv.url) as admin:
                (schedule,) = admin.schedules(topic)
            assert schedule.declared == f"{topic}.tick"
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            tasks.app.close()
        out, err = log.texts()
        assert proc.returncode == 0, (out, err)


def test_schedule_put_compare_and_set_writes_only_over_the_definition_expected(
    run: Any, keys: ShardKeys
) -> None:
    """``schedule_put.lua`` mode 2: of two syncs that read one definition, one writes."""
    created, state, written = run(sched.put(keys, "s", b"v1", True))
    assert (created, written) == (True, True)
    assert run(sched.put(keys, "s", b"other", True))[1:] == (state, False)  # create-only
    assert run(sched.put(keys, "s", b"v2", False, b"v1")) == (False, state, True)
    assert run(sched.put(keys, "s", b"v3", False, b"v1")) == (False, state, False)  # stale
    assert run(sched.put(keys, "gone", b"v", False, b"v"))[2] is False  # none to compare
    found = run(sched.read(keys))
    assert {n: d for n, (d, _) in found.records.items()} == {"s": b"v2"}


def test_wheelq_run_no_scheduler_syncs_too(
    tmp_path: Path, topic: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The declarations are the code's: a worker-only ``wheelq run`` syncs them as well."""
    monkeypatch.setenv(URL_VARIABLE, redis_url)
    monkeypatch.setenv("TICKS_ON_CLUSTER", "0")  # no run is due before the check
    module = module_name(topic)
    source = TICKS.format(variable=URL_VARIABLE, name=f"{topic}.tick", topic=topic, ticks="-")
    tasks = write_module(tmp_path, module, textwrap.dedent(source).replace("every=1", "every=3600"))
    try:
        with running(tmp_path, module, redis_url, "--no-scheduler"):
            listed = wheelq.Admin.of(tasks.app.client).schedules(topic)
        assert [(s.name, s.declared, s.rule.every_ms) for s in listed] == [
            (f"{topic}.tick", f"{topic}.tick", 3_600_000)
        ]
    finally:
        tasks.app.close()
