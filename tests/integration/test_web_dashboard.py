"""The dashboard at /ui against a real server through uvicorn: every page and form over
plain HTTP (the numbers against the API's, paging, replay and purge, 404/401/403, no
script needed), then in a real headless Chromium (Debian's, through playwright), with
JavaScript on and off."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.clients import admin_of
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq import Job, Worker
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import ServeSettings
from wheelq.web import ui
from wheelq.web.auth import Token
from wheelq.web.ui import NOTHING

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


@dataclass
class Form:
    """A POST form of a page: where it posts, its hidden fields, the other inputs' names."""

    action: str
    hidden: list[tuple[str, str]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)


class Page(HTMLParser):
    """The text of each element with an id, each dead-letter row's ref, and the POST
    forms of a page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.ids: dict[str, str] = {}
        self.refs: list[str] = []
        self.links: dict[str, str] = {}
        self.forms: list[Form] = []
        self._form: Form | None = None
        self._open: list[tuple[str, str | None]] = []
        self.feed(html)
        self.ids = {k: " ".join(v.split()) for k, v in self.ids.items()}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("data-ref"):
            self.refs.append(str(a["data-ref"]))
        if tag == "a" and a.get("rel"):
            self.links[str(a["rel"])] = str(a["href"])
        if tag == "form" and a.get("method") == "post":
            self._form = Form(str(a["action"]))
            self.forms.append(self._form)
        elif tag == "input" and self._form is not None and "form" not in a:
            if a.get("type") == "hidden":
                self._form.hidden.append((str(a["name"]), str(a["value"])))
            else:
                self._form.inputs.append(str(a.get("name")))
        if tag not in VOID:
            self._open.append((tag, a.get("id")))
            if a.get("id"):
                self.ids[str(a["id"])] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        for _, found in self._open:
            if found:
                self.ids[found] += data


def basic(secret: str) -> dict[str, str]:
    """What a browser sends once logged in with the token as password."""
    return {"Authorization": "Basic " + base64.b64encode(f"me:{secret}".encode()).decode()}


def num(text: str) -> int:
    return int(text.replace(",", ""))


async def get(served: Served, path: str, status: int = 200, **kwargs: Any) -> tuple[str, Page]:
    """A page, checked for its status, its headers and for needing no script to read."""
    async with served.http.get(served.base + path, allow_redirects=False, **kwargs) as r:
        html = await r.text()
        assert r.status == status, html[:2000]
        assert r.headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]
    assert "<script" not in html.lower()
    return html, Page(html)


async def post(
    served: Served, path: str, form: list[tuple[str, str]], origin: str | None = "same", **kw: Any
) -> tuple[int, str]:
    """A form POST; `origin` "same" sends the served origin (what a browser sends)."""
    headers = kw.pop("headers", {})
    if origin is not None:
        headers["Origin"] = served.base if origin == "same" else origin
    async with served.http.post(
        served.base + path, data=form, headers=headers, allow_redirects=False, **kw
    ) as r:
        return r.status, r.headers.get("Location", await r.text())


async def pull(api: Served, topic: str, n: int, group: str = "g", **kw: Any) -> list[str]:
    """Receipts of `n` jobs pulled by `group` (pulling again: a pull of fewer jobs than the
    topic has shards reads only some shards, so it may bring fewer than are there)."""
    receipts: list[str] = []
    await api.call("POST", f"/v1/topics/{topic}/groups", {"name": group}, **kw)

    async def pulled_all() -> bool:
        asked = {"max": n - len(receipts)}
        path = f"/v1/topics/{topic}/groups/{group}/pull"
        _, got, _ = await api.call("POST", path, asked, **kw)
        receipts.extend(j["receipt"] for j in got["jobs"])
        return len(receipts) == n

    await eventually(pulled_all, timeout_s=10, what=f"{n} jobs pulled")
    return receipts


async def dead_letters(api: Served, topic: str, n: int, **kw: Any) -> None:
    """Make `n` dead letters ``d0``... through a pull consumer's nacks (1 attempt each)."""
    jobs = [{"payload": {"n": i}, "id": f"d{i}", "max_attempts": 1} for i in range(n)]
    await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs}, **kw)
    await nack_all(api, topic, n, "g", **kw)


async def nack_all(api: Served, topic: str, n: int, group: str, **kw: Any) -> None:
    """`group` pulls `n` jobs and nacks them: dead letters of that group (1 attempt each)."""
    receipts = await pull(api, topic, n, group, **kw)
    nack = f"/v1/topics/{topic}/groups/{group}/nack"
    _, nacked, _ = await api.call("POST", nack, {"receipts": receipts}, **kw)
    assert (nacked["retried"], nacked["dead_lettered"]) == (0, n)
    assert {r["outcome"] for r in nacked["results"]} == {"dead_lettered"}


async def enqueue(api: Served, topic: str, n: int, delay_ms: int, prefix: str) -> None:
    jobs = [{"payload": i, "id": f"{prefix}{i}", "delay_ms": delay_ms} for i in range(n)]
    status, _, _ = await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs})
    assert status == 200


async def dead_refs(api: Served, topic: str) -> list[str]:
    return [d["ref"] for d in await dead_list(api, topic)]


async def dead_list(api: Served, topic: str) -> list[dict[str, Any]]:
    _, body, _ = await api.call("GET", f"/v1/topics/{topic}/dead", params={"limit": "1000"})
    dead: list[dict[str, Any]] = body["dead"]
    return dead


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


# --- plain HTTP --------------------------------------------------------------------------


async def test_the_front_page_leads_to_the_dashboard(api: Served) -> None:
    async with api.http.get(api.base + "/", allow_redirects=False) as r:
        assert (r.status, r.headers["Location"]) == (307, "/ui")
    async with api.http.get(api.base + "/") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        assert str(r.url) == api.base + "/ui"


async def test_the_topic_list_shows_the_api_numbers_a_page_at_a_time(
    api: Served, topic: str
) -> None:
    await enqueue(api, f"{topic}-a", 3, 60_000, "p")
    await dead_letters(api, f"{topic}-b", 2)
    await enqueue(api, f"{topic}-b", 2, 0, "r")
    await enqueue(api, f"{topic}-c", 1, 60_000, "p")
    _, page = await get(api, f"/ui?after={topic}&limit=2")
    for name in (f"{topic}-a", f"{topic}-b"):
        _, stats, _ = await api.call("GET", f"/v1/topics/{name}")
        for k in ("pending", "ready", "dead"):
            assert num(page.ids[f"{name}-{k}"]) == stats[k], (name, k)
        assert num(page.ids[f"{name}-shards"]) == len(stats["shards"])
    assert f"topic-{topic}-c" not in page.ids
    assert page.links["next"] == f"/ui?after={topic}-b&limit=2"
    _, page = await get(api, page.links["next"])
    assert num(page.ids[f"{topic}-c-pending"]) == 1
    await get(api, "/ui?limit=0", 422)


async def test_a_topic_that_cannot_be_read_is_one_row_and_the_others_show(
    api: Served, topic: str
) -> None:
    """The wrong-typed key is removed after: left on the shared server, it made every later
    listing of every topic show a broken one (test_cli_commands' failed on it)."""
    await enqueue(api, f"{topic}-a", 2, 60_000, "p")
    await enqueue(api, f"{topic}-b", 1, 60_000, "p")
    bad = ShardKeys(f"{topic}-b", 0).ready
    await api.service.client.redis.set(bad, "not a stream")
    try:
        _, page = await get(api, f"/ui?after={topic}&limit=2")
        assert num(page.ids[f"{topic}-a-pending"]) == 2
        assert "WRONGTYPE" in page.ids[f"{topic}-b-error"]
        assert f"{topic}-b-pending" not in page.ids
    finally:
        await api.service.client.redis.delete(bad)


async def test_the_topic_page_shows_shards_leaders_groups_rates_and_the_api_numbers(
    api: Served, topic: str
) -> None:
    client = api.service.client
    admin = admin_of(client)
    await admin.create_topic(topic, 3)
    await client.redis.set(ShardKeys(topic, 0).lease, "node-7", px=60_000)
    await enqueue(api, topic, 5, 60_000, "p")
    await dead_letters(api, topic, 2)
    await enqueue(api, topic, 3, 0, "r")
    await pull(api, topic, 2)
    _, page = await get(api, f"/ui/topics/{topic}")
    _, stats, _ = await api.call("GET", f"/v1/topics/{topic}")
    for k in ("pending", "ready", "in_flight", "in_stream", "dead"):
        assert num(page.ids[f"total-{k.replace('_', '-')}"]) == stats[k], k
        for s in stats["shards"]:
            assert num(page.ids[f"s{s['shard']}-{k.replace('_', '-')}"]) == s[k], (s, k)
    assert (num(page.ids["total-in-flight"]), num(page.ids["total-ready"])) == (2, 1)
    assert page.ids["s0-leader"] == "node-7"
    assert page.ids["s1-leader"] == page.ids["s2-leader"] == "none"
    assert page.ids["group-1"].split()[:3] == ["g", "2", "1"]  # name, in flight, ready
    assert page.ids["total-fired"] == NOTHING  # no earlier view to compare with
    assert page.ids["total-late-p50"].endswith(" ms")  # the 3 fired at once
    await enqueue(api, topic, 4, 0, "later")

    async def rated() -> str:
        fired = (await get(api, f"/ui/topics/{topic}"))[1].ids["total-fired"]
        return "" if fired == NOTHING else fired

    fired = await eventually(rated, timeout_s=10, what="a fired/s rate")
    assert float(fired.replace(",", "")) > 0
    await get(api, f"/ui/topics/{topic}-nope", 404)
    await get(api, f"/ui/topics/{topic}?refresh=1", 422)


async def test_a_paused_topic_or_group_shows_on_the_list_and_the_topic_page(
    api: Served, topic: str
) -> None:
    client = api.service.client
    admin = admin_of(client)
    await enqueue(api, topic, 1, 60_000, "p")
    await admin.create_group(topic, "g")
    await admin.create_group(topic, "h")
    _, page = await get(api, f"/ui?after={topic[:-1]}")
    assert page.ids[f"{topic}-paused"] == "no"
    _, page = await get(api, f"/ui/topics/{topic}")
    assert "paused" not in page.ids and page.ids["group-1-paused"] == "no"
    assert page.ids["events"] == "off"
    await admin.set_events(topic)
    assert (await get(api, f"/ui/topics/{topic}"))[1].ids["events"] == "on"

    await admin.pause(topic, "h")
    _, page = await get(api, f"/ui?after={topic[:-1]}")
    assert page.ids[f"{topic}-paused"] == "h"
    _, page = await get(api, f"/ui/topics/{topic}")
    assert page.ids["paused"].startswith("Paused: h;")
    # the command it suggests resumes the group, not the whole topic (issue 43 item 18)
    assert page.ids["paused"].endswith(f"(wheelq topics resume {topic} --group h).")
    assert page.ids["group-1-paused"] == "no" and page.ids["group-2-paused"].startswith("since ")

    state = await admin.pause(topic)
    _, page = await get(api, f"/ui?after={topic[:-1]}")
    assert page.ids[f"{topic}-paused"] == "all"
    _, page = await get(api, f"/ui/topics/{topic}")
    assert page.ids["paused"].startswith(f"Paused since {ui.utc(state.since_ms)}")
    assert page.ids["paused"].endswith(f"(wheelq topics resume {topic}).")
    assert page.ids["group-1-paused"].startswith("since ")


async def test_an_error_on_a_dashboard_page_is_a_page_and_on_the_api_a_problem(
    api: Served, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await api.service.admin.create_topic(topic, 1)

    async def broken(*args: object, **kwargs: object) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ui, "topic_view", broken)
    monkeypatch.setattr(api.service.admin, "stats", broken)
    for path, status, title in [
        (f"/ui/topics/{topic}", 500, "Internal error"),
        ("/ui/no/such/page", 404, "Not Found"),
    ]:
        code, html, headers = await api.call("GET", path)
        assert (code, headers["Content-Type"]) == (status, "text/html; charset=utf-8"), html
        assert headers["Content-Security-Policy"].startswith("default-src 'none'")
        assert f"<h1>{title} " in html and 'href="/ui"' in html, html
    code, problem, headers = await api.call("GET", f"/v1/topics/{topic}")
    assert (code, headers["Content-Type"]) == (500, "application/problem+json"), problem
    assert problem["detail"] == "RuntimeError: a bug"


async def test_a_job_is_looked_up_and_shown_escaped_and_an_unknown_one_is_404(
    api: Served, topic: str
) -> None:
    job_id = "a/b c?<x>"
    payload = {"html": "<script>alert(1)</script>", "n": 1}
    body = {"id": job_id, "payload": payload, "delay_ms": 60_000}
    assert (await api.call("POST", f"/v1/topics/{topic}/jobs", body))[0] == 201
    async with api.http.get(
        f"{api.base}/ui/topics/{topic}/job", params={"id": job_id}, allow_redirects=False
    ) as r:
        assert r.status == 303
        where = r.headers["Location"]
    assert where == f"/ui/topics/{topic}/jobs/{quote(job_id, safe='')}"
    html, page = await get(api, where)
    assert page.ids["job-state"] == "pending"
    assert "<script>alert(1)</script>" in page.ids["payload"]
    assert "&lt;script&gt;" in html
    await dead_letters(api, topic, 1)
    _, page = await get(api, f"/ui/topics/{topic}/jobs/d0")
    assert page.ids["job-state"] == "dead"
    html, _ = await get(api, f"/ui/topics/{topic}/jobs/nope", 404)
    assert "Job not found" in html
    for path in ("", "/jobs/d0", "/dead"):
        await get(api, f"/ui/topics/{topic}-nope{path}", 404)


async def test_a_cancelled_jobs_page_says_when_and_the_attempts_made(
    api: Served, topic: str
) -> None:
    # Issue 43 item 18: it showed "due -, attempt - of -".
    await enqueue(api, topic, 1, 3_600_000, "c")
    await api.service.client.cancel(topic, "c0")
    info = await api.service.client.get(topic, "c0")
    html, page = await get(api, f"/ui/topics/{topic}/jobs/c0")
    assert page.ids["job-state"] == "cancelled"
    assert page.ids["job-cancelled"] == ui.utc(info.cancelled_ms)
    assert page.ids["job-attempts"] == "none: cancelled before it fired"
    assert "<dt>due</dt>" not in html and "<dt>attempt</dt>" not in html


async def test_every_page_has_an_icon_and_the_site_serves_it(api: Served, topic: str) -> None:
    # Issue 43 item 18: /favicon.ico was 404 on every page.
    await enqueue(api, topic, 1, 3_600_000, "j")
    icons = set()
    for path in ("/ui", f"/ui/topics/{topic}", f"/ui/topics/{topic}/jobs/j0"):
        html, _ = await get(api, path)
        found = re.search(r'<link rel="icon" href="([^"]+)"', html)
        assert found is not None, path
        icons.add(found[1])
    for path in (*icons, "/favicon.ico"):
        async with api.http.get(api.base + path) as r:
            body = await r.read()
            assert r.status == 200 and body.startswith(b"\0\0\1\0"), path  # an ICO file
            assert r.headers["Content-Type"] in ("image/x-icon", "image/vnd.microsoft.icon")


async def test_a_jobs_page_shows_each_groups_result_escaped(api: Served, topic: str) -> None:
    client = api.service.client
    job_id = await client.enqueue(topic, "report")

    async def build(job: Job) -> dict[str, str]:
        return {"url": "<b>/reports/1</b>"}

    worker = Worker(client.redis, topic, build)
    async with worker:
        assert await client.result(topic, job_id, timeout=10) == {"url": "<b>/reports/1</b>"}
    html, page = await get(api, f"/ui/topics/{topic}/jobs/{job_id}")
    assert page.ids["group-1-outcome"] == '{"url": "<b>/reports/1</b>"}'
    assert "&lt;b&gt;/reports/1&lt;/b&gt;" in html


async def test_a_jobs_last_error_shows_its_line_and_keeps_the_traceback_folded(
    api: Served, topic: str
) -> None:
    async def fails(job: Job) -> None:
        raise ValueError(f"no invoice {job.payload}")

    client = api.service.client
    job_id = await client.enqueue(topic, 42, max_attempts=1)
    async with Worker(client.redis, topic, fails):
        await eventually(
            lambda: _state_is(client, topic, job_id, "dead"), timeout_s=10, what="dead"
        )
    html, page = await get(api, f"/ui/topics/{topic}/jobs/{job_id}")
    assert page.ids["last-error"] == "attempt 1 of 1: ValueError: no invoice 42"
    folded = html.split('id="last-error"', 1)[1].split("</dd>", 1)[0]
    assert "<details><summary>traceback</summary>" in folded and "Traceback" in folded


async def _state_is(client: Any, topic: str, job_id: str, state: str) -> bool:
    return bool((await client.get(topic, job_id)).state.value == state)


async def test_dead_letters_are_listed_a_page_at_a_time(api: Served, topic: str) -> None:
    await dead_letters(api, topic, 7)
    expected = await dead_refs(api, topic)
    seen: list[str] = []
    path: str | None = f"/ui/topics/{topic}/dead?limit=3"
    while path is not None:
        html, page = await get(api, path)
        assert num(page.ids["dead-total"]) == 7
        assert len(page.refs) <= 3
        if seen:
            assert f"after {seen[-1]}" in html  # where we are, in the breadcrumbs
        seen += page.refs
        path = page.links.get("next")
    assert seen == expected
    assert "nacked by a pull consumer" in html
    await get(api, f"/ui/topics/{topic}/dead?after=nope", 422)


async def test_the_forms_replay_and_purge_and_say_how_many(api: Served, topic: str) -> None:
    dead = f"/ui/topics/{topic}/dead"
    await dead_letters(api, topic, 4)
    first, second, *_ = await dead_refs(api, topic)
    status, where = await post(api, f"{dead}/replay", [("ref", first), ("limit", "2")])
    assert (status, where) == (303, f"{dead}?limit=2&done=replayed+1")
    html, page = await get(api, where)
    assert "Replayed 1 dead letter." in html
    assert num(page.ids["dead-total"]) == 3
    assert first not in await dead_refs(api, topic)
    headers = {"Referer": f"{api.base}{dead}"}  # no Origin: the Referer is checked
    # A purge unconfirmed asks first (a page whose form posts the same, confirmed).
    status, asked = await post(api, f"{dead}/purge", [("ref", second)], None, headers=headers)
    assert status == 200 and 'name="confirm" value="1"' in asked and second in asked
    assert len(await dead_refs(api, topic)) == 3
    confirmed = [("ref", second), ("confirm", "1")]
    status, where = await post(api, f"{dead}/purge", confirmed, None, headers=headers)
    assert (status, where) == (303, f"{dead}?done=purged+1")
    assert len(await dead_refs(api, topic)) == 2
    for form in ([], [("ref", second), ("all", "1")]):
        assert (await post(api, f"{dead}/purge", form))[0] == 422, form
    assert (await post(api, f"{dead}/purge", [("all", "1")]))[0] == 200  # asks first
    assert (await post(api, f"{dead}/replay", [("ref", "9/1-0")]))[0] == 422
    assert len(await dead_refs(api, topic)) == 2
    assert await post(api, f"{dead}/replay", [("all", "1")]) == (303, f"{dead}?done=replayed+2")
    assert await dead_refs(api, topic) == []
    await dead_letters(api, f"{topic}-p", 2)
    form = [("all", "1"), ("confirm", "1")]
    assert await post(api, f"/ui/topics/{topic}-p/dead/purge", form) == (
        303,
        f"/ui/topics/{topic}-p/dead?done=purged+2",
    )
    assert await dead_refs(api, f"{topic}-p") == []
    assert (await post(api, f"/ui/topics/{topic}-nope/dead/purge", form))[0] == 404


async def test_dead_letters_are_filtered_and_all_matching_are_replayed_or_purged(
    api: Served, topic: str
) -> None:
    dead = f"/ui/topics/{topic}/dead"
    await dead_letters(api, topic, 3)  # group g
    await nack_all(api, topic, 3, "h")  # group h, made after: it reads the same 3 entries
    assert len(await dead_refs(api, topic)) == 6
    _, page = await get(api, f"{dead}?group=h&limit=2")
    assert len(page.refs) == 2 and "group=h" in page.links["next"]
    _, rest = await get(api, page.links["next"])
    by_group = {d["ref"]: d["group"] for d in await dead_list(api, topic)}
    assert {by_group[r] for r in page.refs + rest.refs} == {"h"}
    assert len(set(page.refs + rest.refs)) == 3
    # all matching: only group h's go; the purge asks first
    form = [("all", "1"), ("group", "h")]
    assert (await post(api, f"{dead}/purge", form))[0] == 200
    assert len(await dead_refs(api, topic)) == 6
    status, where = await post(api, f"{dead}/replay", form)
    assert (status, where) == (303, f"{dead}?group=h&done=replayed+3")
    assert {d["group"] for d in await dead_list(api, topic)} == {"g"}
    status, where = await post(api, f"{dead}/purge", [*form, ("confirm", "1")])
    assert (status, where) == (303, f"{dead}?group=h&done=purged+0")
    status, where = await post(
        api, f"{dead}/purge", [("all", "1"), ("reason", "failed"), ("confirm", "1")]
    )
    assert (status, where) == (303, f"{dead}?reason=failed&done=purged+3")
    assert await dead_refs(api, topic) == []


async def test_a_filtered_dead_page_has_one_action_block_and_it_keeps_the_filter(
    api: Served, topic: str
) -> None:
    # Issue 43 item 8: a second, stale block replayed every dead letter from a filtered
    # page and purged them with a checkbox instead of the confirmation page.
    dead = f"/ui/topics/{topic}/dead"
    await dead_letters(api, topic, 3)  # group g
    await nack_all(api, topic, 3, "h")
    html, page = await get(api, f"{dead}?group=h")
    assert html.count(" shown") == 1
    forms = [f for f in page.forms if ("all", "1") in f.hidden]
    assert sorted(f.action for f in forms) == [f"{dead}/purge", f"{dead}/replay"]
    bulk = {f.action: f for f in forms}
    for form in forms:
        assert ("group", "h") in form.hidden and "confirm" not in form.inputs, form
    # posted as the page has them: the purge asks first, the replay takes group h's only
    status, asked = await post(api, f"{dead}/purge", bulk[f"{dead}/purge"].hidden)
    assert status == 200 and "matching the filter" in asked
    assert len(await dead_refs(api, topic)) == 6
    status, where = await post(api, f"{dead}/replay", bulk[f"{dead}/replay"].hidden)
    assert (status, where) == (303, f"{dead}?group=h&done=replayed+3")
    assert {d["group"] for d in await dead_list(api, topic)} == {"g"}


async def test_the_job_forms_move_run_now_and_cancel_once_confirmed(
    api: Served, topic: str
) -> None:
    client = api.service.client
    await enqueue(api, topic, 2, 3_600_000, "j")
    act, page = f"/ui/topics/{topic}/job", f"/ui/topics/{topic}/jobs/j0"
    html, _ = await get(api, page)
    for form in ("/run", "/move", "/cancel"):
        assert f'action="{act}{form}"' in html  # the page offers each action
    now = api.service.clock.now_ms()
    status, where = await post(api, f"{act}/move", [("id", "j0"), ("delay_s", "7200")])
    assert (status, where) == (303, f"{page}?done=moved")
    assert 7_100_000 < (await client.get(topic, "j0")).due_ms - now < 7_300_000
    assert "Moved the job" in (await get(api, where))[0]
    status, where = await post(api, f"{act}/move", [("id", "j0"), ("at", "2030-01-31T09:30")])
    assert (await client.get(topic, "j0")).due_ms == 1_896_082_200_000  # read as UTC
    bad = [
        [("id", "j0")],  # neither delay_s nor at
        [("id", "j0"), ("delay_s", "5"), ("at", "2030-01-31T09:30")],
        [("id", "j0"), ("delay_s", "-1")],
        [("id", "j0"), ("delay_s", "1e9")],
        [("id", "j0"), ("at", "tomorrow")],
        [("id", ""), ("delay_s", "5")],
        [("id", "j" * 1001), ("delay_s", "5")],
    ]
    for form in bad:
        assert (await post(api, f"{act}/move", form))[0] == 422, form
    assert (await post(api, f"{act}/nap", [("id", "j0")]))[0] == 422
    assert (await client.get(topic, "j0")).due_ms == 1_896_082_200_000  # nothing changed
    # run now: due now, so it fires at once (moved to now, it is fired by the move itself)
    status, where = await post(api, f"{act}/run", [("id", "j1")])
    assert (status, where) == (303, f"/ui/topics/{topic}/jobs/j1?done=run")
    assert (await client.get(topic, "j1")).state.value == "ready"
    # cancel asks first; confirmed, it cancels; again, it says it could not
    status, asked = await post(api, f"{act}/cancel", [("id", "j0")])
    assert status == 200 and 'name="confirm" value="1"' in asked
    assert (await client.get(topic, "j0")).state.value == "pending"
    confirmed = [("id", "j0"), ("confirm", "1")]
    assert await post(api, f"{act}/cancel", confirmed) == (303, f"{page}?done=cancelled")
    assert (await client.get(topic, "j0")).state.value == "cancelled"
    assert await post(api, f"{act}/cancel", confirmed) == (303, f"{page}?done=not-cancelled")
    assert await post(api, f"{act}/run", [("id", "nope")]) == (
        303,
        f"/ui/topics/{topic}/jobs/nope?done=not-moved",
    )


async def test_the_topic_forms_pause_resume_delete_a_group_and_drop_once_confirmed(
    api: Served, topic: str
) -> None:
    client = api.service.client
    admin = admin_of(client)
    here = f"/ui/topics/{topic}"
    await enqueue(api, topic, 2, 3_600_000, "p")
    await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "g"})
    assert await post(api, f"{here}/pause", []) == (303, f"{here}?done=paused")
    assert (await admin.paused(topic)).paused
    html, _ = await get(api, f"{here}?done=paused")
    assert "Resume topic" in html and "Paused: no new jobs start" in html
    assert await post(api, f"{here}/resume", []) == (303, f"{here}?done=resumed")
    assert await post(api, f"{here}/pause", [("group", "g")]) == (303, f"{here}?done=paused")
    state = await admin.paused(topic)
    assert not state.paused and set(state.groups) == {"g"}
    assert (await post(api, f"{here}/pause", [("group", "nope")]))[0] == 404
    assert await post(api, f"{here}/resume", [("group", "g")]) == (303, f"{here}?done=resumed")
    assert not (await admin.paused(topic)).groups
    # delete the group: asks first, then deletes
    status, asked = await post(api, f"{here}/groups/delete", [("group", "g")])
    assert status == 200 and 'name="force"' in asked
    assert [g.name for g in await admin.groups(topic) or []] == ["g"]
    confirmed = [("group", "g"), ("confirm", "1")]
    assert await post(api, f"{here}/groups/delete", confirmed) == (
        303,
        f"{here}?done=group-deleted",
    )
    assert await admin.groups(topic) == []
    # drop: asks first; confirmed it is refused while jobs wait; forced it drops
    status, asked = await post(api, f"{here}/drop", [])
    assert status == 200 and 'name="force"' in asked
    assert (await post(api, f"{here}/drop", [("confirm", "1")]))[0] == 409
    assert topic in await admin.topics()
    forced = [("confirm", "1"), ("force", "1")]
    assert await post(api, f"{here}/drop", forced) == (303, "/ui?done=dropped")
    assert topic not in await admin.topics()
    assert (await post(api, f"{here}/drop", forced))[0] == 404


async def test_a_form_from_another_origin_is_refused(api: Served, topic: str) -> None:
    await dead_letters(api, topic, 1)
    await enqueue(api, topic, 1, 3_600_000, "j")
    here = f"/ui/topics/{topic}"
    forms = [
        ("dead/replay", [("all", "1")]),
        ("dead/purge", [("all", "1"), ("confirm", "1")]),
        ("job/cancel", [("id", "j0"), ("confirm", "1")]),
        ("job/run", [("id", "j0")]),
        ("pause", []),
        ("groups/delete", [("group", "g"), ("confirm", "1"), ("force", "1")]),
        ("drop", [("confirm", "1"), ("force", "1")]),
    ]
    for action, form in forms:
        for origin, headers in (
            ("http://evil.example", {}),
            ("null", {}),
            (None, {}),
            (None, {"Referer": "http://evil.example/ui"}),
            (f"{api.base}.evil.example", {}),  # the host as a prefix of another
        ):
            status, _ = await post(api, f"{here}/{action}", form, origin, headers=headers)
            assert status == 403, (action, origin, headers)
    client = api.service.client
    admin = admin_of(client)
    assert len(await dead_refs(api, topic)) == 1
    assert (await client.get(topic, "j0")).state.value == "pending"
    assert not (await admin.paused(topic)).paused
    assert [g.name for g in await admin.groups(topic) or []] == ["g"]


async def test_tokens_ask_the_browser_to_log_in_and_grant_reading_or_writing(
    redis_url: str, topic: str
) -> None:
    reader, writer = "r" * 20, "w" * 20
    other = "o" * 20
    tokens = (Token(reader, "read"), Token(writer, "write"), Token(other, "read", ("zz-*",)))
    async with serving(redis_url, tokens=tokens) as api:
        auth = {"headers": {"Authorization": f"Bearer {writer}"}}
        await dead_letters(api, topic, 1, **auth)
        async with api.http.get(f"{api.base}/ui/topics/{topic}") as r:
            assert r.status == 401
            assert r.headers["WWW-Authenticate"] == 'Basic realm="wheelq"'
            assert "text/html" in r.headers["Content-Type"]
        for secret in (reader, writer):
            await get(api, f"/ui/topics/{topic}", headers=basic(secret))
        await get(api, f"/ui/topics/{topic}", 403, headers=basic(other))
        await get(api, f"/ui/topics/{topic}", 401, headers=basic("x" * 20))
        path = f"/ui/topics/{topic}/dead/replay"
        form = [("all", "1")]
        assert (await post(api, path, form, headers=basic(reader)))[0] == 403
        assert (await post(api, path, form))[0] == 401
        status, where = await post(api, path, form, **auth)
        assert (status, where) == (303, f"/ui/topics/{topic}/dead?done=replayed+1")


# --- in Chromium -------------------------------------------------------------------------


@pytest.fixture
async def wide(redis_url: str) -> AsyncIterator[Served]:
    """The service with every topic of the shared server on the first page."""
    async with serving(redis_url, settings=ServeSettings(page_limit=10_000)) as served:
        yield served


async def test_in_a_browser_the_list_leads_to_the_topic_and_the_lookup_to_the_job(
    wide: Served, browser: Any, topic: str
) -> None:
    await enqueue(wide, topic, 1, 60_000, "b-")
    page = await browser.new_page()
    # The shared server holds every earlier test's topics: start the list just before this one.
    await page.goto(f"{wide.base}/ui?after={quote(topic[:-1])}")
    await page.get_by_role("link", name=topic, exact=True).click()
    await page.wait_for_url(f"**/ui/topics/{topic}")
    assert await page.inner_text("#total-pending") == "1"
    await page.fill("#job-id", "b-0")
    await page.press("#job-id", "Enter")
    await page.wait_for_url(f"**/ui/topics/{topic}/jobs/b-0")
    assert await page.inner_text("#job-state") == "pending"


async def test_in_a_browser_a_dead_letter_is_replayed_from_its_row(
    api: Served, browser: Any, topic: str
) -> None:
    await dead_letters(api, topic, 3)
    first = (await dead_list(api, topic))[0]
    ref = first["ref"]
    page = await browser.new_page()
    await page.goto(f"{api.base}/ui/topics/{topic}/dead")
    assert await page.inner_text("#dead-total") == "3"
    row = page.locator(f'tr[data-ref="{ref}"]')
    await row.get_by_role("button", name="replay").click()
    await page.wait_for_url("**done=replayed+1")
    assert await page.inner_text(".flash") == "Replayed 1 dead letter."
    assert await page.inner_text("#dead-total") == "2"
    assert ref not in await dead_refs(api, topic)
    _, job, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{first['job_id']}")
    assert job["state"] == "ready"  # back in the stream


async def test_in_a_browser_without_javascript_the_topic_page_reads(
    api: Served, browser: Any, topic: str
) -> None:
    await api.service.admin.create_topic(topic, 2)
    await enqueue(api, topic, 4, 60_000, "p")
    await dead_letters(api, topic, 1)
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    await page.goto(f"{api.base}/ui/topics/{topic}")
    _, stats, _ = await api.call("GET", f"/v1/topics/{topic}")
    assert await page.inner_text("#total-pending") == str(stats["pending"]) == "4"
    assert await page.locator("#shard-0, #shard-1").count() == 2
    await page.get_by_role("link", name="Dead letters (1) »").click()
    await page.wait_for_url(f"**/ui/topics/{topic}/dead")
    assert await page.locator("tbody tr").count() == 1
    await context.close()


async def test_in_a_browser_basic_auth_logs_in(redis_url: str, browser: Any, topic: str) -> None:
    secret = "s" * 24
    async with serving(redis_url, tokens=(Token(secret, "read"),)) as api:
        anonymous = await browser.new_page()
        # Headless, the browser's prompt for the Basic challenge is answered "no login".
        with pytest.raises(Exception, match="ERR_INVALID_AUTH_CREDENTIALS"):
            await anonymous.goto(f"{api.base}/ui")
        context = await browser.new_context(http_credentials={"username": "me", "password": secret})
        page = await context.new_page()
        assert (await page.goto(f"{api.base}/ui")).status == 200
        assert await page.locator("h1").first.inner_text() != ""
        await context.close()


@pytest.mark.parametrize(
    ("path", "title"), [("/docs", ".swagger-ui .info .title"), ("/redoc", "h1")]
)
async def test_in_a_browser_without_internet_the_api_docs_render(
    api: Served, browser: Any, path: str, title: str
) -> None:
    elsewhere: list[tuple[str, str]] = []

    async def only_the_service(route: Any) -> None:
        if route.request.url.startswith(api.base + "/"):
            await route.continue_()
        else:  # what a host without internet access gets
            elsewhere.append((route.request.resource_type, route.request.url))
            await route.abort("internetdisconnected")

    page = await browser.new_page()
    await page.route("**/*", only_the_service)
    await page.goto(api.base + path)
    await page.wait_for_selector(title, timeout=15_000)
    assert (await page.inner_text(title)).startswith("wheelq")
    assert await page.get_by_text("/v1/topics/{topic}/jobs/batch").count() >= 1
    # Nothing of another host: ReDoc's bundle asked its own site for its side bar's logo
    # (issue 43); the service serves it with that URL taken out.
    assert elsewhere == []
