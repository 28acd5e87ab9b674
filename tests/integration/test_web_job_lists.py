"""The console's job lists (issue 47 item 1): ``/ui/topics/{t}/jobs?state=``, a tab per
state, in a real headless Chromium (Debian's, through playwright) against a real worker
whose handler fails, holds or succeeds each job: each state's tab lists exactly its jobs,
the next-page links walk a filtered list once, the filter form works with JavaScript off
and on, bad input is the error page with a 4xx (in the browser and over plain HTTP),
an axe-core scan finds nothing serious on any tab, which is usable 390 px wide."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.test_job_history import FAST, GROUP, Gates
from tests.integration.test_web_console import PHONE
from tests.integration.test_web_dashboard import get
from tests.support.browser import serious_violations
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq import Job, Retry, Worker
from wheelq.core.job_list import LIST_STATES

BASE = datetime(2033, 5, 18, 3, 33, 20, tzinfo=UTC)
"""The pending jobs' due times start here (far ahead: nothing fires while a test reads)."""
PENDING = 23
"""Pending jobs ``p00``... due a minute apart from `BASE` (more than a page of 5)."""
IDLE = "idle"
"""A consumer group no worker reads: every fired job stays ready for it."""


@dataclass
class Walked:
    """A topic with rows in every state, and what each state's list holds (job ids)."""

    api: Served
    topic: str
    worker: Worker
    expected: dict[str, set[str]]


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def listed(api: Served, topic: str, state: str, **kw: Any) -> set[str]:
    """Every job id the library lists in `state` (every page)."""
    ids: set[str] = set()
    cursor = None
    while True:
        page = await api.service.admin.jobs(topic, state, cursor=cursor, **kw)
        ids |= {r.id for r in page}
        if page.next is None:
            return ids
        cursor = page.next


@pytest.fixture
async def walked(api: Served, redis_url: str, topic: str) -> AsyncIterator[Walked]:
    """Pending jobs, one awaiting the first, and four fired ones a real worker handles:
    ``ok`` succeeds, ``again`` fails its first attempt of 3 (retrying, an hour away),
    ``dies`` fails its only one (dead), ``held`` runs until the test ends; group `IDLE`
    holds all four ready."""
    client, admin = api.service.client, api.service.admin
    await admin.create_topic(topic, 2)
    await admin.create_group(topic, IDLE)
    for i in range(PENDING):
        at = BASE + timedelta(minutes=i)
        await client.enqueue(topic, {"i": i}, at=at, job_id=f"p{i:02d}")
    await client.enqueue(topic, {"n": "waits"}, job_id="waits", after="p00")
    gates = Gates()
    gates.fail |= {("again", 1), ("dies", 1)}
    for job_id in ("ok", "again", "dies"):
        gates.gate(job_id, 1).set()
    worker = Worker.from_url(redis_url, topic, gates, **FAST)
    await worker.start()
    try:
        await client.enqueue(topic, {"n": "ok"}, job_id="ok")
        await client.enqueue(topic, {"n": "again"}, job_id="again", max_attempts=3)
        await client.enqueue(topic, {"n": "dies"}, job_id="dies", max_attempts=1)
        await client.enqueue(topic, {"n": "held"}, job_id="held")
        fired = {"ok", "again", "dies", "held"}
        expected = {
            "pending": {f"p{i:02d}" for i in range(PENDING)},
            "awaiting": {"waits"},
            "retrying": {"again"},
            "ready": fired,
            "running": {"held"},
            "succeeded": {"ok"},
            "failed": {"again", "dies"},
            "dead": {"dies"},
        }

        async def settled() -> bool:
            return all([await listed(api, topic, s) == ids for s, ids in expected.items()])

        await eventually(settled, timeout_s=15, what="every state's list as expected")
        yield Walked(api, topic, worker, expected)
    finally:
        gates.gate("held", 1).set()
        await worker.stop(grace_ms=0)


async def rows(page: Any) -> list[str]:
    """The job ids of a list page's rows, in order."""
    return [str(await r.get_attribute("data-job")) for r in await page.locator("tbody tr").all()]


# --- in a browser ----------------------------------------------------------------------------


async def test_each_states_tab_lists_its_jobs_with_what_the_state_says(
    walked: Walked, page: Any
) -> None:
    api, topic = walked.api, walked.topic
    await page.goto(f"{api.base}/ui/topics/{topic}")
    await page.get_by_role("link", name="Jobs by state »").click()
    await page.wait_for_url(f"**/ui/topics/{topic}/jobs")
    tabs = page.get_by_role("navigation", name="job states")
    for state in LIST_STATES:
        await tabs.get_by_role("link", name=state).click()
        await page.wait_for_url(f"**state={state}")
        current = tabs.locator("[aria-current=page]")
        assert (await current.count(), await current.get_attribute("id")) == (1, f"tab-{state}")
        got = await rows(page)
        if state == "pending":  # by due time
            assert got == sorted(walked.expected[state])
        else:
            assert sorted(got) == sorted(walked.expected[state]), state
        ticks = page.locator("tbody input[type=checkbox]")
        assert await ticks.count() == len(got)
        for tick in await ticks.all():
            assert await tick.get_attribute("form") == "ticked"
            assert await tick.get_attribute("name") == ("ref" if state == "dead" else "id")

    stats = await api.service.admin.stats(topic)
    assert stats is not None
    for state, count in [("pending", stats.pending), ("running", stats.in_flight)]:
        assert await page.inner_text(f"#tab-{state} .count") == str(count)
    assert await page.locator("#tab-succeeded .count").count() == 0  # not known cheaply
    await page.locator("#tab-pending").click()
    await page.wait_for_url("**state=pending")
    assert await page.inner_text("#jobs-count") == str(stats.pending)  # retries included

    async def row(state: str, job_id: str) -> str:
        await page.goto(f"{api.base}/ui/topics/{topic}/jobs?state={state}")
        return " ".join((await page.inner_text(f"tr[data-job={job_id}]")).split())

    assert "boom on attempt 1 of again" in await row("retrying", "again")
    assert "2/3" in await row("retrying", "again")
    assert walked.worker.consumer in await row("running", "held")
    assert '{"n": "held"}' in await row("running", "held")
    assert " ms" in await row("succeeded", "ok")  # its duration
    dead = await row("dead", "dies")
    assert "failed" in dead and "boom on attempt 1 of dies" in dead
    assert await page.get_by_role("link", name="dead letters page").count() == 1
    ready = await page.goto(f"{api.base}/ui/topics/{topic}/jobs?state=ready")
    assert ready is not None and ready.status == 200
    for cell in await page.locator("tbody tr td:nth-child(3)").all():
        assert await cell.inner_text() == IDLE  # the ready rows are the idle group's

    await page.goto(f"{api.base}/ui/topics/{topic}/jobs?state=pending")
    await page.locator("tr[data-job=p00] a").click()  # the job's own page
    await page.wait_for_url(f"**/ui/topics/{topic}/jobs/p00")
    assert await page.inner_text("#job-state") == "pending"


async def test_the_topic_pages_tiles_lead_to_their_lists(walked: Walked, page: Any) -> None:
    api, topic = walked.api, walked.topic
    for tile, state in [("pending", "pending"), ("ready", "ready"), ("in-flight", "running")]:
        await page.goto(f"{api.base}/ui/topics/{topic}")
        await page.locator(f"#total-{tile} a").click()
        await page.wait_for_url(f"**/jobs?state={state}")
        assert sorted(await rows(page)) == sorted(walked.expected[state])
    await page.goto(f"{api.base}/ui/topics/{topic}")
    await page.locator("#total-dead a").click()
    await page.wait_for_url("**/jobs?state=dead")
    assert await rows(page) == ["dies"]


async def test_the_next_page_links_walk_a_filtered_list_once(walked: Walked, page: Any) -> None:
    api, topic = walked.api, walked.topic
    after, before = BASE + timedelta(minutes=3), BASE + timedelta(minutes=20)
    query = f"due_after={after:%Y-%m-%dT%H:%M}&due_before={before:%Y-%m-%dT%H:%M}"
    await page.goto(f"{api.base}/ui/topics/{topic}/jobs?state=pending&limit=5&{query}")
    seen = await rows(page)
    pages = 1
    while await page.locator("a[rel=next]").count():
        await page.locator("a[rel=next]").click()
        await page.wait_for_url("**cursor=**")
        assert "limit=5" in page.url and "due_after=" in page.url  # the filter goes along
        seen += await rows(page)
        pages += 1
    assert seen == [f"p{i:02d}" for i in range(3, 20)]  # once each, in due order
    assert pages == 4
    await page.get_by_role("link", name="first page").click()
    assert await rows(page) == ["p03", "p04", "p05", "p06", "p07"]


@pytest.mark.parametrize("script", [False, True], ids=["no-js", "js"])
async def test_the_filter_form_works_with_javascript_off_and_on(
    walked: Walked, browser: Any, script: bool
) -> None:
    api, topic = walked.api, walked.topic
    context = await browser.new_context(java_script_enabled=script)
    try:
        page = await context.new_page()
        await page.goto(f"{api.base}/ui/topics/{topic}/jobs?state=pending")
        await page.fill("#f-due-after", "2033-05-18T03:40")  # p07 at 03:40:20 (UTC)..
        await page.fill("#f-due-before", "2033-05-18T03:43:20")  # ..p10 at 03:43:20 not
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url("**due_before=**")
        assert await rows(page) == ["p07", "p08", "p09"]
        shown = page.locator("#f-due-after")  # the form keeps the filter (to the ms)
        assert await shown.get_attribute("value") == "2033-05-18T03:40:00.000"
        assert await shown.input_value() == "2033-05-18T03:40"  # as Chromium shows it
        # the retrying tab keeps the due range; the failed one drops it and takes a group
        await page.locator("#tab-retrying").click()
        await page.wait_for_url("**state=retrying**")
        assert "due_after=" in page.url
        assert await rows(page) == []  # "again" retries in an hour, not in 2033
        await page.locator("#tab-failed").click()
        await page.wait_for_url("**state=failed")
        await page.select_option("#f-group", IDLE)
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url(f"**group={IDLE}")
        assert await rows(page) == []
        assert "matching the filter" in await page.inner_text("main")
        await page.select_option("#f-group", GROUP)
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url(f"**group={GROUP}")
        assert sorted(await rows(page)) == ["again", "dies"]
        await page.locator("#tab-dead").click()
        await page.wait_for_url(f"**state=dead&group={GROUP}")
        await page.select_option("#f-reason", "deliveries")
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url("**reason=deliveries")
        assert await rows(page) == []
        await page.select_option("#f-reason", "failed")
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url("**reason=failed")
        assert await rows(page) == ["dies"]
        await page.get_by_role("link", name="clear the filter").click()
        await page.wait_for_url("**/jobs?state=dead")
        assert await rows(page) == ["dies"]
    finally:
        await context.close()


BAD = [
    ("state=nope", 422, "state must be one of"),
    ("state=pending&cursor=garbage", 422, "cursor"),
    ("state=pending&group=default", 422, "group filters every state but pending"),
    ("state=ready&due_after=2033-05-18T03:40", 422, "due_after filters the states"),
    ("state=succeeded&reason=failed", 422, "reason filters the state dead"),
    ("state=dead&reason=tired", 422, "reason must be one of"),
    ("state=pending&due_after=yesterday", 422, "due_after must be epoch ms"),
    ("state=pending&limit=0", 422, "limit"),
]


async def test_bad_input_is_the_error_page_with_a_4xx_in_a_browser(
    walked: Walked, page: Any
) -> None:
    api, topic = walked.api, walked.topic
    pending = await api.service.admin.jobs(topic, "pending", 5)
    assert pending.next is not None
    cases = [*BAD, (f"state=ready&cursor={pending.next}", 422, "this list is topic")]
    for query, status, said in cases:
        answer = await page.goto(f"{api.base}/ui/topics/{topic}/jobs?{query}")
        assert answer is not None and answer.status == status, query
        assert await page.inner_text("h1") == f"Invalid argument {status}", query
        assert said in await page.inner_text(".problem"), query
    answer = await page.goto(f"{api.base}/ui/topics/{topic}-nope/jobs")
    assert answer is not None and answer.status == 404


async def test_no_tab_has_a_serious_or_critical_accessibility_violation(
    walked: Walked, browser: Any
) -> None:
    axe = pytest.importorskip("axe_playwright_python.async_playwright").Axe()
    api, topic = walked.api, walked.topic
    found: dict[str, list[str]] = {}
    for scheme in ("light", "dark"):
        context = await browser.new_context(color_scheme=scheme)
        try:
            page = await context.new_page()
            for state in LIST_STATES:
                await page.goto(f"{api.base}/ui/topics/{topic}/jobs?state={state}&limit=5")
                bad = serious_violations((await axe.run(page)).response)
                if bad:
                    found[f"{state} ({scheme})"] = bad
        finally:
            await context.close()
    assert not found, found


async def test_every_tab_is_usable_390_px_wide(walked: Walked, browser: Any) -> None:
    api, topic = walked.api, walked.topic
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = await context.new_page()
        for state in LIST_STATES:
            query = f"state={state}&limit=5" + ("&group=default" if state != "pending" else "")
            await page.goto(f"{api.base}/ui/topics/{topic}/jobs?{query}")
            # as test_web_console has it: no sideways scroll, every target 24 px or more
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (state, width)
            standalone = "main button:visible, main a:visible:not(:is(td, th, p, dd, li) a)"
            for control in await page.locator(standalone).all():
                box = await control.bounding_box()
                assert box is not None and box["height"] >= 24, (state, await control.inner_text())
    finally:
        await context.close()


async def test_the_dead_tabs_error_cell_shows_the_error_a_narrow_table_would_hide(
    walked: Walked, browser: Any
) -> None:
    # Issue 57 item 12: 1000 px wide, the cell showed "attempt 1 of 1:…" (the attempt,
    # which a column says already) and hid the error behind it.
    context = await browser.new_context(viewport={"width": 1000, "height": 700})
    try:
        page = await context.new_page()
        await page.goto(f"{walked.api.base}/ui/topics/{walked.topic}/jobs?state=dead")
        cell = page.locator("tr[data-job=dies] .error-line")
        shown = await cell.evaluate(
            """(el) => {
                const text = el.firstChild, what = "RuntimeError: boom";
                const at = text.data.indexOf(what);
                if (at < 0) return false;
                const range = document.createRange();
                range.setStart(text, at);
                range.setEnd(text, at + what.length);
                const box = el.getBoundingClientRect();
                return [...range.getClientRects()].every(
                    (r) => r.bottom <= box.bottom + 0.5 && r.right <= box.right + 0.5);
            }"""
        )
        assert shown, await cell.inner_text()  # inside the cell's box: not clipped
        assert "attempt 1 of 1: RuntimeError: boom" in str(await cell.get_attribute("title"))
    finally:
        await context.close()


# --- plain HTTP ------------------------------------------------------------------------------


async def test_bad_input_answers_the_error_page_with_a_4xx(api: Served, topic: str) -> None:
    await api.service.client.enqueue(topic, {}, delay=3600, job_id="a")
    await api.service.client.enqueue(topic, {}, delay=3601, job_id="b")
    html, _ = await get(api, f"/ui/topics/{topic}/jobs?state=pending")
    assert 'data-job="a"' in html and 'data-job="b"' in html
    first = await api.service.admin.jobs(topic, "pending", 1)
    assert first.next is not None
    cases = [*BAD, (f"state=retrying&cursor={first.next}", 422, "this list is topic")]
    for query, status, said in cases:
        html, _ = await get(api, f"/ui/topics/{topic}/jobs?{query}", status)
        assert "<h1>Invalid argument <span" in html and said in html, (query, html)
    html, _ = await get(api, f"/ui/topics/{topic}-nope/jobs?state=pending", 404)
    assert "Not found" in html or "not found" in html
    # a topic page links the lists
    html, _ = await get(api, f"/ui/topics/{topic}")
    assert f'href="/ui/topics/{topic}/jobs">Jobs by state' in html
    assert f'href="/ui/topics/{topic}/jobs?state=running"' in html


ERROR_CELL = re.compile(r'<span class="error-line" title="([^"]*)">([^<]*)</span>')


async def test_the_error_cells_lead_with_the_error_whole_on_hover(walked: Walked) -> None:
    # Issue 57 item 12: the dead tab's cell led with "attempt 1 of 1:", which its attempt
    # column says, and a narrow table cut the error off behind it.
    api, topic = walked.api, walked.topic
    for path in (f"/ui/topics/{topic}/jobs?state=dead", f"/ui/topics/{topic}/dead"):
        html, _ = await get(api, path)
        ((title, shown),) = ERROR_CELL.findall(html)
        assert shown == "RuntimeError: boom on attempt 1 of dies", (path, shown)
        assert title.startswith("attempt 1 of 1: RuntimeError: boom on attempt 1 of dies")
        assert "Traceback" in title  # the whole error, on hover
    html, _ = await get(api, f"/ui/topics/{topic}/jobs?state=retrying")
    ((_, shown),) = ERROR_CELL.findall(html)
    assert shown == "RuntimeError: boom on attempt 1 of again"
    # the API's rows keep the error as recorded: its line, and the whole
    (dead,) = await api.job_rows(f"/v1/topics/{topic}/jobs?state=dead")
    assert dead["error"] == "attempt 1 of 1: RuntimeError: boom on attempt 1 of dies"
    assert "Traceback" in dead["error_detail"]


RETRIES = 6
"""Jobs ``r0``... retried once, ``r<i>`` due `RETRIES` - i minutes on: by id, the reverse
of their due order."""


async def test_the_retrying_tab_and_api_list_by_due_time(
    api: Served, redis_url: str, topic: str
) -> None:
    # Issue 57 item 12: the retrying tab was ordered by job id.
    minutes = {f"r{i}": RETRIES - i for i in range(RETRIES)}

    async def retry_later(job: Job) -> None:
        raise Retry(delay=timedelta(minutes=minutes[job.id]))

    await api.service.admin.create_topic(topic, 2)
    worker = Worker.from_url(redis_url, topic, retry_later, **FAST)
    await worker.start()
    try:
        for job_id in minutes:
            await api.service.client.enqueue(topic, {}, job_id=job_id, max_attempts=2)

        async def all_retrying() -> bool:
            return len(await listed(api, topic, "retrying")) == RETRIES

        await eventually(all_retrying, timeout_s=15, what=f"{RETRIES} jobs retrying")
    finally:
        await worker.stop(grace_ms=0)
    by_due = sorted(minutes, key=lambda job_id: minutes[job_id])
    got: list[str] = []
    path = f"/ui/topics/{topic}/jobs?state=retrying&limit=4"
    while path:
        html, _ = await get(api, path)
        got += re.findall(r'<tr data-job="([^"]*)"', html)
        later = re.search(r'<a rel="next" href="([^"]*)"', html)
        path = later[1].replace("&amp;", "&") if later else ""
    assert got == by_due
    rows = await api.job_rows(f"/v1/topics/{topic}/jobs?state=retrying&limit=4")
    assert [r["id"] for r in rows] == by_due
    assert [r["due_ms"] for r in rows] == sorted(r["due_ms"] for r in rows)


def near(started_ms: float, actual_ms: float) -> bool:
    """A start as the worker's heartbeat tells it (its last beat less the run time: each
    read may differ by the beat's latency), against the handler's own clock reading."""
    return abs(started_ms - actual_ms) < 1500


def utc_ms(text: str) -> float:
    """``2030-01-31T09:30:00.123Z`` as epoch ms."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


RUN_CELL = re.compile(
    r'<tr data-job="([^"]*)" data-run="([^"]*)">.*?<td class="small">(.*?)</td>', re.DOTALL
)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_the_running_tab_says_when_each_job_started_and_which_are_read_ahead(
    api: Served, redis_url: str, topic: str, kind: str
) -> None:
    # Issue 57 item 12: "since" was the last claim refresh (it read 8 s after the start),
    # and jobs the worker read ahead (delivered, not started) looked running. One slot: the
    # worker runs `held` and reads `a1` and `a2` ahead, once a few quick runs taught it
    # that jobs are short; its claims are refreshed every 500 ms.
    # A sync handler's jobs read ahead wait queued to its threads: not started either.
    started: dict[str, float] = {}
    release, released = asyncio.Event(), threading.Event()

    async def handle_async(job: Job) -> None:
        if job.id.startswith("w"):
            return
        started[job.id] = time.time() * 1000  # the test's machine: Redis's clock too
        await release.wait()

    def handle_sync(job: Job) -> None:
        if job.id.startswith("w"):
            return
        started[job.id] = time.time() * 1000
        released.wait(60)

    handle = handle_async if kind == "async" else handle_sync

    admin, client = api.service.admin, api.service.client
    await admin.create_topic(topic, 1)
    settings = {**FAST, "visibility_timeout_ms": 1500, "concurrency": 1, "read_ahead_ms": 1000}
    worker = Worker.from_url(redis_url, topic, handle, **settings)
    await worker.start()
    try:
        for i in range(5):
            await client.enqueue(topic, {}, job_id=f"w{i}")

        async def warm() -> bool:
            return len(await listed(api, topic, "succeeded")) == 5

        await eventually(warm, timeout_s=15, what="the quick runs to succeed")
        await client.enqueue(topic, {"n": "held"}, job_id="held")

        async def held_started() -> bool:
            return "held" in started

        await eventually(held_started, timeout_s=15, what="held to start")
        for job_id in ("a1", "a2"):
            await client.enqueue(topic, {}, job_id=job_id)

        async def told() -> list[Any] | None:  # the worker's next beats say so
            rows = {r.id: r for r in await api.service.admin.jobs(topic, "running")}
            if set(rows) != {"held", "a1", "a2"} or rows["held"].started_ms is None:
                return None
            if not (rows["a1"].read_ahead and rows["a2"].read_ahead):
                return None
            claimed = rows["held"].since_ms or 0
            return list(rows.values()) if claimed - started["held"] >= 2000 else None

        rows = await eventually(told, timeout_s=30, what="held started, a1 and a2 read ahead")
        by_id = {r.id: r for r in rows}
        held = by_id["held"]
        assert held.read_ahead is False and held.started_ms is not None
        assert near(held.started_ms, started["held"])  # its start, not its claim
        for job_id in ("a1", "a2"):
            assert by_id[job_id].started_ms is None and job_id not in started

        # the HTTP API's rows say the same
        api_rows = {
            r["id"]: r for r in await api.job_rows(f"/v1/topics/{topic}/jobs?state=running")
        }
        assert near(api_rows["held"]["started_ms"], started["held"])
        assert api_rows["held"]["read_ahead"] is False
        assert api_rows["a1"]["read_ahead"] is True and api_rows["a1"]["started_ms"] is None

        # the console's running tab: started, and read ahead
        html, _ = await get(api, f"/ui/topics/{topic}/jobs?state=running")
        cells = {job_id: (run, cell) for job_id, run, cell in RUN_CELL.findall(html)}
        shown = re.fullmatch(r'<span class="mono">([^<]*)</span>', cells["held"][1])
        assert cells["held"][0] == "running" and shown, cells["held"]
        assert near(utc_ms(shown[1]), started["held"])
        assert cells["a1"] == ("read-ahead", '<span class="muted">read ahead: not started</span>')
        assert ">started (UTC)<" in html and "since (UTC)" not in html

        # and the CLI's
        out = await asyncio.to_thread(
            run_wheelq, "jobs", "list", topic, "--state", "running", "--redis-url", redis_url
        )
        lines = {line.split()[0]: line for line in out.stdout.splitlines()}
        said = re.search(r"started=(\S+)", lines["held"])
        assert said and near(utc_ms(said[1]), started["held"]), out
        assert "read-ahead" in lines["a1"] and "started=" not in lines["a1"]

        # one job's faces: get(), the HTTP job, the console's job page and `wheelq job`
        (group,) = (await client.get(topic, "held")).groups
        assert group.read_ahead is False and group.started_ms is not None
        assert near(group.started_ms, started["held"])
        (ahead,) = (await client.get(topic, "a1")).groups
        assert ahead.read_ahead is True and ahead.started_ms is None
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/held")
        assert status == 200 and near(body["groups"][0]["started_ms"], started["held"]), body
        page, _ = await get(api, f"/ui/topics/{topic}/jobs/held")
        assert ">started / finished<" in page
        shown_at = re.search(r'<td class="time">([^<]+)</td>', page)
        assert shown_at and near(utc_ms(shown_at[1]), started["held"]), page
        page, _ = await get(api, f"/ui/topics/{topic}/jobs/a1")
        assert '<span class="muted">read ahead: not started</span>' in page
        out = await asyncio.to_thread(run_wheelq, "job", topic, "held", "--redis-url", redis_url)
        said = re.search(r"started (\S+)", out.stdout)
        assert said and near(utc_ms(said[1]), started["held"]), out
    finally:
        release.set()
        released.set()
        await worker.stop(grace_ms=0)
