"""The console's actions on many jobs (issue 47 item 3): a job list's ticked rows, or every
row its filter matches, cancelled, run now, rescheduled, replayed or purged through a dry
run whose count the confirmation page states; a selection over 10,000 goes on page by page
with a Continue button; jobs that changed state in between, were rescheduled or were enqueued
again under their id are reported, not acted on (issue 57 item 5). In a real headless
Chromium (with JavaScript off and on), with an axe-core scan of the pages it
adds; bad input and cross-site forms over plain HTTP."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from tests.integration.test_bulk_actions import TIERS, Drift, enqueue_range, pending_ids
from tests.integration.test_web_dashboard import dead_letters, dead_list, dead_refs, get, post
from tests.support.browser import serious_violations
from tests.support.web import Served, serving
from wheelq.core.bulk_actions import Selection
from wheelq.core.job_list import ListState

BASE = datetime(2033, 5, 18, 3, 33, 20, tzinfo=UTC)
"""Jobs ``p00``... are due a minute apart from here (far ahead: nothing fires meanwhile)."""
MINUTE_MS = 60_000


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def pending(api: Served, topic: str, n: int, shards: int = 2) -> None:
    """`n` pending jobs ``p00``... due a minute apart from `BASE`."""
    await api.service.admin.create_topic(topic, shards)
    for i in range(n):
        at = BASE + timedelta(minutes=i)
        await api.service.client.enqueue(topic, {"i": i}, at=at, job_id=f"p{i:02d}")


async def state_of(api: Served, topic: str, job_id: str) -> str:
    return (await api.service.client.get(topic, job_id)).state.value


async def rows(page: Any) -> list[str]:
    return [str(await r.get_attribute("data-job")) for r in await page.locator("tbody tr").all()]


def jobs_path(api: Served, topic: str, query: str = "state=pending") -> str:
    return f"{api.base}/ui/topics/{topic}/jobs?{query}"


# --- in a browser ----------------------------------------------------------------------------


@pytest.mark.parametrize("script", [False, True], ids=["no-js", "js"])
async def test_ticked_rows_are_cancelled_through_the_confirmation_page(
    api: Served, browser: Any, topic: str, script: bool
) -> None:
    await pending(api, topic, 6)
    context = await browser.new_context(java_script_enabled=script)
    try:
        page = await context.new_page()
        await page.goto(jobs_path(api, topic))
        for job_id in ("p01", "p03", "p04"):
            await page.get_by_label(f"tick {job_id}").check()
        await page.get_by_role("button", name="Cancel ticked…").click()
        await page.wait_for_selector("#confirm-what")
        assert await page.inner_text("h1") == "Cancel 3 ticked pending jobs?"
        assert "will not run" in await page.inner_text("#confirm-what")
        assert await state_of(api, topic, "p01") == "pending"  # asked, not done
        await page.get_by_role("link", name="No, go back").click()
        await page.wait_for_url("**/jobs?state=pending")
        assert len(await rows(page)) == 6
        for job_id in ("p01", "p03", "p04"):
            await page.get_by_label(f"tick {job_id}").check()
        await page.get_by_role("button", name="Cancel ticked…").click()
        await api.service.client.cancel(topic, "p04")  # in between: changed, left alone
        await page.get_by_role("button", name="Yes: cancel 3 ticked pending jobs").click()
        await page.wait_for_url("**done=cancelled+2+changed+1")
        assert await page.inner_text(".flash") == (
            "Cancelled 2 jobs; 1 had changed state and was left alone."
        )
        assert await rows(page) == ["p00", "p02", "p05"]
        for job_id in ("p01", "p03", "p04"):
            assert await state_of(api, topic, job_id) == "cancelled"
    finally:
        await context.close()


async def test_all_matching_a_due_range_states_the_dry_runs_count_and_reports_changes(
    api: Served, page: Any, topic: str
) -> None:
    await pending(api, topic, 12)
    await page.goto(jobs_path(api, topic, "state=pending&limit=2"))
    await page.fill("#f-due-after", "2033-05-18T03:35")  # p02 at 03:35:20..
    await page.fill("#f-due-before", "2033-05-18T03:43:20")  # ..p10 at 03:43:20 not
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url("**due_before=**")
    assert await rows(page) == ["p02", "p03"]  # a page of 2: all matching is more
    low, high = BASE + timedelta(minutes=1, seconds=40), BASE + timedelta(minutes=9, seconds=60)
    dry = await api.service.admin.bulk(
        topic, "cancel", state="pending", due_after=low, due_before=high, dry_run=True
    )
    assert dry.matched == 8
    await page.get_by_role("button", name="Cancel all matching…").click()
    await page.wait_for_selector("#confirm-what")
    assert await page.inner_text("h1") == (
        "Cancel 8 pending jobs due from 2033-05-18T03:35:00.000Z to 2033-05-18T03:43:20.000Z?"
    )
    # in between: two of them are cancelled, one fires; a new one comes into the range
    await api.service.client.cancel(topic, "p03")
    await api.service.client.cancel(topic, "p07")
    await api.service.client.reschedule(topic, "p05", delay=timedelta(0))
    await api.service.client.enqueue(topic, {}, at=BASE + timedelta(minutes=4), job_id="late")
    await page.get_by_role("button", name="Yes: cancel 8 pending jobs").click()
    await page.wait_for_url("**done=cancelled+5+changed+3**")
    assert await page.inner_text(".flash") == (
        "Cancelled 5 jobs; 3 had changed state and were left alone."
    )
    assert "due_after=" in page.url and "limit=2" in page.url  # back to the filtered list
    assert await pending_ids(api.service.admin, topic) == {"p00", "p01", "p10", "p11", "late"}
    assert await state_of(api, topic, "p05") == "ready"  # it fired: left alone


async def test_ticked_rows_are_rescheduled_by_a_shift(api: Served, page: Any, topic: str) -> None:
    await pending(api, topic, 4)
    before = {j: (await api.service.client.get(topic, j)).due_ms for j in ("p00", "p02", "p03")}
    await page.goto(jobs_path(api, topic))
    await page.get_by_label("tick p00").check()
    await page.get_by_label("tick p02").check()
    await page.fill("#b-shift", "-90")
    await page.select_option("#b-unit", "min")
    await page.locator("#b-shift").press("Enter")  # the form's first button: reschedule
    await page.wait_for_selector("#confirm-what")
    assert await page.inner_text("h1") == "Reschedule 2 ticked pending jobs by -90 minutes?"
    assert "from its own due time" in await page.inner_text("#confirm-what")
    await page.get_by_role("button", name="Yes: reschedule 2 ticked pending jobs").click()
    await page.wait_for_url("**done=rescheduled+2")
    assert await page.inner_text(".flash") == "Rescheduled 2 jobs."
    after = {j: (await api.service.client.get(topic, j)).due_ms for j in before}
    assert after == {
        "p00": before["p00"] - 90 * MINUTE_MS,
        "p02": before["p02"] - 90 * MINUTE_MS,
        "p03": before["p03"],
    }
    assert (await rows(page))[:2] == ["p00", "p02"]  # due first now
    # to a time: every row matching (no filter: every pending job)
    await page.fill("#b-at", "2034-01-31T09:30")
    await page.get_by_role("button", name="Reschedule all matching…").click()
    assert await page.inner_text("h1") == ("Reschedule 4 pending jobs to 2034-01-31T09:30:00.000Z?")
    await page.get_by_role("button", name="Yes: reschedule 4 pending jobs").click()
    await page.wait_for_url("**done=rescheduled+4")
    at_ms = round(datetime(2034, 1, 31, 9, 30, tzinfo=UTC).timestamp() * 1000)
    for job_id in ("p00", "p01", "p02", "p03"):
        assert (await api.service.client.get(topic, job_id)).due_ms == at_ms


async def test_dead_letters_are_replayed_and_purged_from_the_dead_tab(
    api: Served, page: Any, topic: str
) -> None:
    await dead_letters(api, topic, 4)
    refs = await dead_refs(api, topic)
    # The four died in one call: their order in the list is not d0's, so find d0's letter.
    d0 = next(d["ref"] for d in await dead_list(api, topic) if d["job_id"] == "d0")
    await page.goto(jobs_path(api, topic, "state=dead"))
    assert await page.get_by_role("button", name="Cancel ticked…").count() == 0
    await page.get_by_label(f"tick {d0}").check()
    await page.get_by_role("button", name="Replay ticked…").click()
    assert await page.inner_text("h1") == "Replay 1 ticked dead letter?"
    await page.get_by_role("button", name="Yes: replay 1 ticked dead letter").click()
    await page.wait_for_url("**state=dead&done=replayed+1")
    assert await page.inner_text(".flash") == "Replayed 1 dead letter."
    assert await dead_refs(api, topic) == [r for r in refs if r != d0]
    assert await state_of(api, topic, "d0") == "ready"  # run again
    await page.select_option("#f-reason", "failed")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url("**reason=failed")
    await page.get_by_role("button", name="Purge all matching…").click()
    assert await page.inner_text("h1") == "Purge 3 dead letters with reason failed?"
    assert "deleted for good" in await page.inner_text("#confirm-what")
    await page.get_by_role("button", name="Yes: purge 3 dead letters with reason failed").click()
    await page.wait_for_url("**done=purged+3")
    assert await page.inner_text(".flash") == "Purged 3 dead letters."
    assert await dead_refs(api, topic) == []
    # nothing left: a page that says so, with no button
    await page.goto(jobs_path(api, topic, "state=pending"))
    assert await page.locator("#bulk-title").count() == 0  # no rows: no actions


async def test_a_selection_over_10000_goes_on_with_continue(
    api: Served, browser: Any, topic: str
) -> None:
    axe = pytest.importorskip("axe_playwright_python.async_playwright").Axe()
    admin = api.service.admin
    await admin.create_topic(topic, 4)
    at = BASE.timestamp()
    await enqueue_range(api.service.client, topic, "j", 10_050, at)
    found: dict[str, list[str]] = {}

    async def scan(page: Any, name: str) -> None:
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            bad = serious_violations((await axe.run(page)).response)
            if bad:
                found[f"{name} ({scheme})"] = bad

    context = await browser.new_context()  # axe runs as a script
    try:
        page = await context.new_page()
        await page.goto(jobs_path(api, topic))
        await page.get_by_role("button", name="Cancel all matching…").click()
        await page.wait_for_selector("#confirm-what")
        assert await page.inner_text("h1") == "Cancel 10,050 pending jobs?"
        await scan(page, "confirmation")
        await page.get_by_role("button", name="Yes: cancel 10,050 pending jobs").click()
        await page.wait_for_selector("#bulk-said")
        assert await page.inner_text("#bulk-said") == (
            "Acted on 10,000 of 10,050; 0 had changed; 50 remain."
        )
        assert len(await pending_ids(admin, topic)) == 50
        await scan(page, "progress")
        form = page.locator("form:has(button:text('Continue'))")
        fields = [
            (str(await i.get_attribute("name")), str(await i.get_attribute("value")))
            for i in await form.locator("input[type=hidden]").all()
        ]
        await page.get_by_role("button", name="Continue").click()
        await page.wait_for_url("**done=cancelled+10050")
        assert await page.inner_text(".flash") == "Cancelled 10,050 jobs."
        assert await pending_ids(admin, topic) == set()
        # the same Continue again (a second click, a reload): the selection is gone
        status, html = await post(api, f"/ui/topics/{topic}/jobs/bulk/cancel", fields)
        assert status == 410 and "acted on to its end already" in html
        await page.goto(jobs_path(api, topic))
        await scan(page, "list")
    finally:
        await context.close()
    assert not found, found


async def test_nothing_matching_is_a_page_without_a_button(
    api: Served, page: Any, topic: str
) -> None:
    axe = pytest.importorskip("axe_playwright_python.async_playwright").Axe()
    await pending(api, topic, 3)
    await page.goto(jobs_path(api, topic))
    await page.get_by_label("tick p01").check()
    await api.service.client.cancel(topic, "p01")  # gone before the dry run
    await page.get_by_role("button", name="Run ticked now…").click()
    await page.wait_for_selector("#bulk-said")
    assert await page.inner_text("h1") == "Nothing to run now"
    assert await page.inner_text("#bulk-said") == "None of the 1 ticked is pending any more."
    assert await page.locator("main button").count() == 0
    assert serious_violations((await axe.run(page)).response) == []
    await page.get_by_role("link", name="Back to the list").click()
    await page.wait_for_url("**/jobs?state=pending")
    assert await rows(page) == ["p00", "p02"]


# --- plain HTTP ------------------------------------------------------------------------------


async def test_a_confirmed_selection_acts_and_the_flash_says_how_many(
    api: Served, topic: str
) -> None:
    await pending(api, topic, 3)
    bulk = f"/ui/topics/{topic}/jobs/bulk"
    status, asked = await post(api, f"{bulk}/run_now", [("state", "pending"), ("all", "1")])
    assert status == 200 and "Run 3 pending jobs now?" in asked
    token = re.search(r'name="selection" value="([^"]+)"', asked)
    assert token is not None
    assert Selection.of(token[1], topic).matched == 3
    await api.service.client.cancel(topic, "p01")
    # a selection posted unconfirmed asks again, counting what it still holds
    again = [("state", "pending"), ("selection", token[1])]
    status, asked = await post(api, f"{bulk}/run_now", again)
    assert status == 200 and "Run 3 pending jobs now?" in asked  # still 3 selected
    assert await state_of(api, topic, "p00") == "pending"
    form = [("state", "pending"), ("selection", token[1]), ("confirm", "1")]
    status, where = await post(api, f"{bulk}/run_now", form)
    assert (status, where) == (
        303,
        f"/ui/topics/{topic}/jobs?state=pending&done=run-now+2+changed+1",
    )
    html, _ = await get(api, where)
    assert "Made 2 jobs due now: they fire within a moment; 1 had changed state" in html
    assert await state_of(api, topic, "p02") == "ready"
    # the query is never echoed
    html, _ = await get(api, f"/ui/topics/{topic}/jobs?state=pending&done=cancelled+1+<b>")
    assert "<b>" not in html and 'class="flash"' not in html


@pytest.mark.cluster_too
@pytest.mark.parametrize("tier", TIERS)
async def test_a_confirmed_selection_leaves_jobs_rescheduled_or_enqueued_again(
    api: Served, topic: str, redis_sync: redis.Redis, tier: str
) -> None:
    await api.service.admin.create_topic(topic, 2)
    jobs = await Drift.make(api.service.client, topic, tier)
    low, high = jobs.window_ms
    bulk = f"/ui/topics/{topic}/jobs/bulk"
    window = [("state", "pending"), ("due_after", str(low)), ("due_before", str(high))]
    status, asked = await post(api, f"{bulk}/cancel", [*window, ("all", "1")])
    assert status == 200 and "Cancel 6 pending jobs due from" in asked, asked[:1500]
    token = re.search(r'name="selection" value="([^"]+)"', asked)
    assert token is not None
    await jobs.drift()
    form = [*window, ("selection", token[1]), ("confirm", "1")]
    status, where = await post(api, f"{bulk}/cancel", form)
    assert status == 303 and where.endswith("&done=cancelled+4+changed+2"), where
    html, _ = await get(api, where)
    assert "Cancelled 4 jobs; 2 had changed state and were left alone." in html
    await jobs.check_cancelled(redis_sync, shards=2)


async def test_bad_input_answers_the_error_page_with_a_4xx(api: Served, topic: str) -> None:
    await pending(api, topic, 2)
    await dead_letters(api, f"{topic}-b", 1)
    bulk = f"/ui/topics/{topic}/jobs/bulk"
    _, asked = await post(
        api, f"/ui/topics/{topic}-b/jobs/bulk/purge", [("state", "dead"), ("all", "1")]
    )
    foreign = re.search(r'name="selection" value="([^"]+)"', asked)
    assert foreign is not None
    unknown = Selection(topic, ListState.PENDING, "0" * 16, 5).token()
    p = ("state", "pending")
    cases: list[tuple[str, list[tuple[str, str]], int, str]] = [
        ("cancel", [p], 422, "tick one or more jobs, or take all matching"),
        ("purge", [("state", "dead")], 422, "tick one or more dead letters"),
        ("replay", [p, ("id", "p00")], 422, "replay acts on dead jobs, not pending ones"),
        (
            "cancel",
            [("state", "dead"), ("all", "1")],
            422,
            "cancel acts on pending, awaiting and retrying",
        ),
        ("cancel", [("state", "ready"), ("all", "1")], 422, "not ready ones"),
        ("nope", [p, ("all", "1")], 422, "action must be one of"),
        ("cancel", [("state", "later"), ("all", "1")], 422, "state must be one of"),
        (
            "cancel",
            [p, ("id", "p00"), ("selection", "forged"), ("confirm", "1")],
            422,
            "selection must be a dry run",
        ),
        (
            "purge",
            [("state", "dead"), ("selection", foreign[1]), ("confirm", "1")],
            422,
            "selection is of topic",
        ),
        (
            "cancel",
            [p, ("selection", unknown), ("confirm", "1")],
            410,
            "acted on to its end already",
        ),
        ("cancel", [p, ("all", "1"), ("due_after", "yesterday")], 422, "due_after must be"),
        ("cancel", [p, ("all", "1"), ("group", "g")], 422, "group filters every state"),
        ("reschedule", [p, ("all", "1")], 422, "reschedule by a shift or to a time"),
        (
            "reschedule",
            [p, ("all", "1"), ("shift", "5"), ("at", "2034-01-01T00:00")],
            422,
            "one of them",
        ),
        ("reschedule", [p, ("all", "1"), ("at", "soon")], 422, "at must be"),
        (
            "reschedule",
            [p, ("all", "1"), ("shift", "9999999"), ("unit", "h")],
            422,
            "shift must be within",
        ),
        ("reschedule", [p, ("all", "1"), ("shift", "ten")], 422, "shift"),
        ("reschedule", [p, ("all", "1"), ("shift", "1"), ("unit", "days")], 422, "unit"),
    ]
    for action, form, status, said in cases:
        got, html = await post(api, f"{bulk}/{action}", form)
        assert got == status, (action, form, html[:1500])
        assert 'class="problem"' in html and said in html, (action, form, html[:1500])
    got, _ = await post(api, f"/ui/topics/{topic}-nope/jobs/bulk/cancel", [p, ("all", "1")])
    assert got == 404
    assert await pending_ids(api.service.admin, topic) == {"p00", "p01"}
    assert len(await dead_refs(api, f"{topic}-b")) == 1


async def test_a_bulk_form_from_another_site_is_refused(api: Served, topic: str) -> None:
    await pending(api, topic, 2)
    bulk = f"/ui/topics/{topic}/jobs/bulk"
    _, asked = await post(api, f"{bulk}/cancel", [("state", "pending"), ("all", "1")])
    token = re.search(r'name="selection" value="([^"]+)"', asked)
    assert token is not None
    forms = [
        ("cancel", [("state", "pending"), ("all", "1")]),
        ("cancel", [("state", "pending"), ("selection", token[1]), ("confirm", "1")]),
        ("run_now", [("state", "pending"), ("id", "p00")]),
    ]
    for action, form in forms:
        for origin, headers in (
            ("http://evil.example", {}),
            ("null", {}),
            (None, {}),
            (None, {"Referer": "http://evil.example/ui"}),
            (f"{api.base}.evil.example", {}),
            ("same", {"Sec-Fetch-Site": "cross-site"}),
        ):
            status, _ = await post(api, f"{bulk}/{action}", form, origin, headers=headers)
            assert status == 403, (action, origin, headers)
    assert await pending_ids(api.service.admin, topic) == {"p00", "p01"}
    # the same confirmed form from the page's own origin acts
    status, where = await post(api, f"{bulk}/cancel", forms[1][1])
    assert (status, where) == (303, f"/ui/topics/{topic}/jobs?state=pending&done=cancelled+2")
