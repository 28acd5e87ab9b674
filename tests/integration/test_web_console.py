"""The dashboard as an operator uses it, in a real headless Chromium (Debian's, through
playwright): every action clicked through its page, its effect checked through the
library, and each destructive one left unconfirmed changing nothing; an accessibility scan
(axe-core) of every page; every page usable 390 px wide."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.test_web_dashboard import dead_letters, dead_list, enqueue, get, post
from tests.support.clients import admin_of
from tests.support.web import Served, serving
from wheelq import AsyncClient

PHONE = {"width": 390, "height": 844}
SERIOUS = {"serious", "critical"}


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def pages_of(api: Served, topic: str) -> dict[str, str]:
    """A topic with something on every page: a pending job, dead letters, a group, a
    schedule; each page's path by name."""
    await enqueue(api, topic, 1, 3_600_000, "j")
    await dead_letters(api, topic, 2)
    schedule = {"payload": {"report": "daily"}, "cron": "30 2 * * *"}
    await api.call("PUT", f"/v1/topics/{topic}/schedules/nightly", schedule)
    base = f"/ui/topics/{topic}"
    return {
        "overview": f"/ui?after={topic[:-1]}",
        "topic": base,
        "job": f"{base}/jobs/j0",
        "dead letters": f"{base}/dead",
        "schedules": f"{base}/schedules",
    }


async def state(client: AsyncClient, topic: str, job_id: str) -> str:
    return (await client.get(topic, job_id)).state.value


# --- every action, clicked -----------------------------------------------------------------


async def test_a_job_is_moved_run_now_and_cancelled_only_once_confirmed(
    api: Served, page: Any, topic: str
) -> None:
    client = api.service.client
    await enqueue(api, topic, 2, 3_600_000, "j")
    await page.goto(f"{api.base}/ui/topics/{topic}/jobs/j0")
    await page.fill("#move-delay", "7200")
    now = api.service.clock.now_ms()
    await page.locator("#move-delay").press("Enter")
    await page.wait_for_url("**done=moved")
    assert "Moved the job" in await page.inner_text(".flash")
    assert 7_100_000 < (await client.get(topic, "j0")).due_ms - now < 7_300_000
    await page.fill("#move-at", "2030-01-31T09:30:00")
    await page.locator("#move-at").press("Enter")
    await page.wait_for_url("**done=moved")
    assert (await client.get(topic, "j0")).due_ms == 1_896_082_200_000

    await page.get_by_role("button", name="Cancel…").click()  # asks first
    await page.wait_for_selector("#confirm-what")
    await page.get_by_role("link", name="No, go back").click()
    await page.wait_for_url("**/jobs/j0")
    assert await state(client, topic, "j0") == "pending"  # unconfirmed: nothing changed
    await page.get_by_role("button", name="Cancel…").click()
    await page.get_by_role("button", name="Yes: cancel this job").click()
    await page.wait_for_url("**done=cancelled")
    assert await state(client, topic, "j0") == "cancelled"

    await page.goto(f"{api.base}/ui/topics/{topic}/jobs/j1")
    await page.get_by_role("button", name="Run now").click()
    await page.wait_for_url("**done=run")
    assert await state(client, topic, "j1") == "ready"  # fired by the move itself


async def test_a_topic_and_a_group_are_paused_resumed_and_deleted_and_dropped(
    api: Served, page: Any, topic: str
) -> None:
    client = api.service.client
    admin = admin_of(client)
    await enqueue(api, topic, 1, 3_600_000, "j")
    await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "g"})
    await page.goto(f"{api.base}/ui/topics/{topic}")
    await page.get_by_role("button", name="Pause topic").click()
    await page.wait_for_url("**done=paused")
    assert (await admin.paused(topic)).paused
    await page.get_by_role("button", name="Resume topic").click()
    await page.wait_for_url("**done=resumed")
    assert not (await admin.paused(topic)).paused
    await page.get_by_role("button", name="pause group g").click()
    await page.wait_for_url("**done=paused")
    assert set((await admin.paused(topic)).groups) == {"g"}
    await page.get_by_role("button", name="resume group g").click()
    await page.wait_for_url("**done=resumed")
    assert not (await admin.paused(topic)).groups

    await page.get_by_role("button", name="delete… group g").click()
    await page.wait_for_selector("#confirm-what")
    await page.goto(f"{api.base}/ui/topics/{topic}")  # walked away: nothing changed
    assert [g.name for g in await admin.groups(topic) or []] == ["g"]
    await page.get_by_role("button", name="delete… group g").click()
    await page.get_by_role("button", name="Yes: delete consumer group g").click()
    await page.wait_for_url("**done=group-deleted")
    assert await admin.groups(topic) == []

    await page.get_by_role("button", name="Drop topic…").click()
    await page.get_by_role("button", name=f"Yes: drop topic {topic}").click()
    assert "Topic holds jobs" in await page.inner_text("h1")  # a job waits: refused
    assert topic in await admin.topics()
    await page.goto(f"{api.base}/ui/topics/{topic}")
    await page.get_by_role("button", name="Drop topic…").click()
    await page.get_by_label("also while jobs are pending").check()
    await page.get_by_role("button", name=f"Yes: drop topic {topic}").click()
    await page.wait_for_url("**/ui?done=dropped")
    assert "Dropped the topic" in await page.inner_text(".flash")
    assert topic not in await admin.topics()


async def test_dead_letters_are_replayed_and_purged_ticked_or_by_filter(
    api: Served, page: Any, topic: str
) -> None:
    await dead_letters(api, topic, 4)
    refs = [d["ref"] for d in await dead_list(api, topic)]
    dead = f"{api.base}/ui/topics/{topic}/dead"
    await page.goto(dead)
    await page.get_by_label(f"tick {refs[0]}").check()
    await page.get_by_label(f"tick {refs[1]}").check()
    await page.get_by_role("button", name="Replay ticked").click()
    await page.wait_for_url("**done=replayed+2")
    assert [d["ref"] for d in await dead_list(api, topic)] == refs[2:]
    await page.get_by_label(f"tick {refs[2]}").check()
    await page.get_by_role("button", name="Purge ticked…").click()
    await page.wait_for_selector("#confirm-what")
    assert len(await dead_list(api, topic)) == 2  # asked, not done
    await page.get_by_role("button", name="Yes: purge dead letters").click()
    await page.wait_for_url("**done=purged+1")
    assert [d["ref"] for d in await dead_list(api, topic)] == refs[3:]
    await page.select_option("#f-group", "g")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url("**group=g")
    for bulk in ("Replay all", "Purge all"):  # one block of them (issue 43 item 8)
        assert await page.get_by_role("button", name=bulk).count() == 1
    await page.get_by_role("button", name="Purge all matching…").click()
    await page.get_by_role("button", name="Yes: purge dead letters").click()
    await page.wait_for_url("**done=purged+1")
    assert await dead_list(api, topic) == []


async def test_a_schedule_is_paused_resumed_and_deleted_once_confirmed(
    api: Served, page: Any, topic: str
) -> None:
    client = api.service.client
    admin = admin_of(client)
    await api.call("PUT", f"/v1/topics/{topic}/schedules/nightly", {"payload": 1, "cron": "@daily"})
    await page.goto(f"{api.base}/ui/topics/{topic}")
    await page.get_by_role("link", name="Schedules »").click()
    assert "cron 0 0 * * *" in await page.inner_text("#schedule-1")
    await page.get_by_role("button", name="pause nightly").click()
    await page.wait_for_url("**done=schedule-paused")
    assert (await admin.get_schedule("nightly", topic)).paused  # type: ignore[union-attr]
    await page.get_by_role("button", name="resume nightly").click()
    await page.wait_for_url("**done=schedule-resumed")
    await page.get_by_role("button", name="delete… nightly").click()
    assert await admin.get_schedule("nightly", topic) is not None  # asked, not done
    await page.get_by_role("button", name="Yes: delete schedule nightly").click()
    await page.wait_for_url("**done=schedule-deleted")
    assert await admin.get_schedule("nightly", topic) is None


# --- every destructive form, as its page has it --------------------------------------------

DESTRUCTIVE = ("/cancel", "/purge", "/drop", "/groups/delete", "/schedules/delete")


async def test_every_destructive_form_of_every_page_asks_first_and_changes_nothing(
    api: Served, topic: str
) -> None:
    # Issue 43 item 8: a purge posted with a ticked checkbox skipped the confirmation page.
    client = api.service.client
    admin = admin_of(client)
    paths = await pages_of(api, topic)
    before = (await dead_list(api, topic), await admin.get_schedule("nightly", topic))
    seen: set[str] = set()
    for name, path in paths.items():
        _, page = await get(api, path)
        for form in page.forms:
            if not form.action.endswith(DESTRUCTIVE):
                continue
            seen.add(form.action.rsplit("/", 1)[1])
            assert "confirm" not in form.inputs, (name, form)
            assert "confirm" not in dict(form.hidden), (name, form)
            status, asked = await post(api, form.action, form.hidden)
            assert status == 200 and 'name="confirm" value="1"' in asked, (name, form)
    assert seen == {"cancel", "purge", "drop", "delete"}
    assert (await dead_list(api, topic), await admin.get_schedule("nightly", topic)) == before
    assert await state(client, topic, "j0") == "pending"
    assert [g.name for g in await admin.groups(topic) or []] == ["g"]


# --- accessibility and a phone's width -----------------------------------------------------


async def test_no_page_has_a_serious_or_critical_accessibility_violation(
    api: Served, browser: Any, topic: str
) -> None:
    axe = pytest.importorskip("axe_playwright_python.async_playwright").Axe()
    paths = await pages_of(api, topic)
    found: dict[str, list[str]] = {}
    for scheme in ("light", "dark"):
        context = await browser.new_context(color_scheme=scheme)
        try:
            page = await context.new_page()
            for name, path in [*paths.items(), ("confirmation", None)]:
                if path is None:  # a confirmation step: purge every dead letter
                    await page.goto(api.base + paths["dead letters"])
                    await page.get_by_role("button", name="Purge all…").click()
                    await page.wait_for_selector("#confirm-what")
                else:
                    await page.goto(api.base + path)
                results = await axe.run(page)
                bad = [
                    f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}"
                    for v in results.response["violations"]
                    if v["impact"] in SERIOUS
                ]
                if bad:
                    found[f"{name} ({scheme})"] = bad
        finally:
            await context.close()
    assert not found, found


async def test_every_page_is_usable_390_px_wide(api: Served, browser: Any, topic: str) -> None:
    paths = await pages_of(api, topic)
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = await context.new_page()
        for name, path in paths.items():
            await page.goto(api.base + path)
            # The page itself never scrolls sideways (wide tables scroll in their own box)...
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (name, width)
            # ...and every button, and every link not inline in text or a table, is a
            # target of at least 24 px (WCAG 2.5.8; inline links are exempt).
            standalone = "main button:visible, main a:visible:not(:is(td, th, p, dd, li) a)"
            for control in await page.locator(standalone).all():
                box = await control.bounding_box()
                assert box is not None and box["height"] >= 24, (name, await control.inner_text())
        await page.goto(api.base + paths["job"])
        await page.get_by_role("button", name="Run now").tap()
        await page.wait_for_url("**done=run")
    finally:
        await context.close()
