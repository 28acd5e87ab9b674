"""Every face a control feature is exposed on, behind the same verbs, for the every-face
matrix (tests/integration/matrix/, docs/contributing.md).

A face is one way a user reaches wheelq: the blocking library (`Client`), the asyncio one
(`AsyncClient`), the command line (``python -m wheelq ...`` in a process of its own), the
HTTP API (``/v1``) and the console (the dashboard's pages and forms, over HTTP, as a
browser posts them). Each driver has the verbs its face offers, with one signature:

    face = await faces.open("cli", redis_url, served)
    await face.pause(topic, "g")
    assert await face.held(topic, {"g", "h"}) == {"g"}

A verb a face does not offer raises `Unsupported`; `having(verb)` lists the faces that
offer it, the rows of a table-driven test (``@pytest.mark.parametrize("face", having(...))``).
A new face is a class here and a row in `FACES`; a new verb is a method on each face that
offers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, ClassVar, NamedTuple

import pytest

from tests.integration.test_web_dashboard import Page, get, post
from tests.support.cli import run_wheelq
from tests.support.clients import SyncAsAsync, admin_of
from tests.support.servers import server_kinds
from tests.support.web import Served
from wheelq import AsyncClient, Client
from wheelq.testing import ServerBinary

CLI_ONCE = (
    "the CLI is the sync Client in a process (about a second a call): within the matrix's "
    "time budget its rows run once, on the single server of the test's first server kind; "
    "the sync face's rows run on every kind and deployment the test runs on"
)
"""Why a CLI row skips on the cluster and on a test's second server kind (the `face` fixture)."""


def cli_once(item: pytest.Item, deployment: str, server_binary: ServerBinary) -> None:
    """Skip a CLI row but on the single server of the first kind the test runs on
    (`tests.support.servers.server_kinds`; `CLI_ONCE`)."""
    if deployment != "single" or server_binary.kind != server_kinds(item)[0].kind:
        pytest.skip(CLI_ONCE)


class DueLine(NamedTuple):
    """A topic's due-line settings as a face shows them."""

    credit_ms: int
    fair: bool
    weights: dict[str, int]


class Unsupported(Exception):
    """The face does not offer this verb."""


class Refused(AssertionError):
    """The CLI exited non-zero, or the API answered another status than expected: `code`
    (exit code or HTTP status) and what it said."""

    def __init__(self, code: int, said: str) -> None:
        super().__init__(f"refused with {code}: {said[-2000:]}")
        self.code, self.said = code, said


class Face:
    """The verbs, each unsupported until a face defines it. `uses_http`: the face needs a
    served app (`tests.support.web.serving`)."""

    name: ClassVar[str]
    uses_http: ClassVar[bool] = False

    async def pause(self, topic: str, group: str | None = None) -> None:
        raise Unsupported

    async def resume(self, topic: str, group: str | None = None) -> None:
        raise Unsupported

    async def held(self, topic: str, groups: set[str]) -> set[str]:
        """Which of `groups` take no new jobs now: paused on their own or with the topic."""
        raise Unsupported

    async def enqueue(
        self, topic: str, payload: Any, *, delay_s: int | None = None, max_attempts: int = 5
    ) -> str:
        raise Unsupported

    async def result(self, topic: str, job_id: str, group: str = "default") -> Any:
        """What `group`'s handler returned for a job that succeeded there (no wait)."""
        raise Unsupported

    async def cancel(self, topic: str, job_id: str) -> None:
        raise Unsupported

    async def payload_known(self, topic: str, job_id: str) -> bool:
        """Whether the face shows the job's payload (not "not kept" / unknown)."""
        raise Unsupported

    async def reschedule(self, topic: str, job_id: str, delay_s: int) -> None:
        raise Unsupported

    async def dead(self, topic: str, reason: str | None = None) -> set[str]:
        """The refs of the topic's dead letters (of `reason`)."""
        raise Unsupported

    async def replay(self, topic: str, reason: str) -> tuple[int, int]:
        """Replay every dead letter of `reason`; how many, and how many it skipped (those
        that cannot be replayed: they stay)."""
        raise Unsupported

    async def purge(self, topic: str, reason: str) -> int:
        """Purge every dead letter of `reason`; how many."""
        raise Unsupported

    async def set_max_pending(self, topic: str, max_pending: int | None) -> None:
        raise Unsupported

    async def max_pending(self, topic: str) -> int | None:
        raise Unsupported

    async def set_due_line(
        self,
        topic: str,
        *,
        credit_ms: int | None = None,
        fair: bool | None = None,
        weights: dict[str, int] | None = None,
    ) -> None:
        """Set the topic's priority credit, fair shares and fair weights (None: unchanged;
        `weights` replace the topic's, {} clears them)."""
        raise Unsupported

    async def due_line(self, topic: str) -> DueLine:
        """The topic's priority credit, fair shares and fair weights, as the face shows them."""
        raise Unsupported

    async def pause_schedule(self, name: str, topic: str) -> None:
        raise Unsupported

    async def resume_schedule(self, name: str, topic: str) -> None:
        raise Unsupported

    async def schedule_paused(self, name: str, topic: str) -> bool:
        raise Unsupported

    async def create_group(self, topic: str, group: str) -> None:
        raise Unsupported

    async def group_names(self, topic: str) -> set[str]:
        raise Unsupported

    async def delete_group(self, topic: str, group: str) -> None:
        raise Unsupported

    async def set_events(self, topic: str, on: bool) -> None:
        raise Unsupported

    async def events_on(self, topic: str) -> bool:
        raise Unsupported

    async def events(self, topic: str, count: int) -> list[tuple[str, str | None, str | None]]:
        """The first `count` events the topic's streams hold: (kind, job id, group) each."""
        raise Unsupported

    async def aclose(self) -> None:
        pass


class Library(Face):
    """`AsyncClient`, or `Client` through `SyncAsAsync` (the calls run on the loop's thread:
    each is short, and `result` only looks)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.admin = admin_of(client)

    async def pause(self, topic: str, group: str | None = None) -> None:
        await self.admin.pause(topic, group)

    async def resume(self, topic: str, group: str | None = None) -> None:
        await self.admin.resume(topic, group)

    async def held(self, topic: str, groups: set[str]) -> set[str]:
        state = await self.admin.paused(topic)
        return {g for g in groups if state.group_paused(g)}

    async def enqueue(
        self, topic: str, payload: Any, *, delay_s: int | None = None, max_attempts: int = 5
    ) -> str:
        delay = None if delay_s is None else timedelta(seconds=delay_s)
        job_id: str = await self.client.enqueue(
            topic, payload, delay=delay, max_attempts=max_attempts
        )
        return job_id

    async def result(self, topic: str, job_id: str, group: str = "default") -> Any:
        return await self.client.result(topic, job_id, group=group, timeout=0)

    async def cancel(self, topic: str, job_id: str) -> None:
        assert await self.client.cancel(topic, job_id)

    async def payload_known(self, topic: str, job_id: str) -> bool:
        return bool((await self.client.get(topic, job_id)).payload_kept)

    async def reschedule(self, topic: str, job_id: str, delay_s: int) -> None:
        assert await self.client.reschedule(topic, job_id, delay=timedelta(seconds=delay_s))

    async def dead(self, topic: str, reason: str | None = None) -> set[str]:
        return {d.ref for d in await self.admin.dead_letters(topic, 1000, reason=reason)}

    async def replay(self, topic: str, reason: str) -> tuple[int, int]:
        count = await self.admin.replay(topic, reason=reason)
        return int(count), count.skipped

    async def purge(self, topic: str, reason: str) -> int:
        count: int = await self.admin.purge_dead(topic, reason=reason)
        return count

    async def set_max_pending(self, topic: str, max_pending: int | None) -> None:
        await self.admin.set_limits(topic, max_pending=max_pending)

    async def max_pending(self, topic: str) -> int | None:
        limit: int | None = (await self.admin.limits(topic)).max_pending
        return limit

    async def set_due_line(
        self,
        topic: str,
        *,
        credit_ms: int | None = None,
        fair: bool | None = None,
        weights: dict[str, int] | None = None,
    ) -> None:
        await self.admin.set_limits(
            topic, priority_credit_ms=credit_ms, fair=fair, fair_weights=weights
        )

    async def due_line(self, topic: str) -> DueLine:
        limits = await self.admin.limits(topic)
        return DueLine(limits.priority_credit_ms, limits.fair, limits.fair_weights)

    async def pause_schedule(self, name: str, topic: str) -> None:
        assert await self.admin.pause_schedule(name, topic)

    async def resume_schedule(self, name: str, topic: str) -> None:
        assert await self.admin.resume_schedule(name, topic)

    async def schedule_paused(self, name: str, topic: str) -> bool:
        found = await self.admin.get_schedule(name, topic)
        assert found is not None
        return bool(found.paused)

    async def create_group(self, topic: str, group: str) -> None:
        await self.admin.create_group(topic, group)

    async def group_names(self, topic: str) -> set[str]:
        return {g.name for g in await self.admin.groups(topic) or []}

    async def delete_group(self, topic: str, group: str) -> None:
        await self.admin.delete_group(topic, group)

    async def set_events(self, topic: str, on: bool) -> None:
        await self.admin.set_events(topic, on)

    async def events_on(self, topic: str) -> bool:
        return bool((await self.admin.events_config(topic)).enabled)


class SyncLibrary(Library):
    name = "sync"

    async def aclose(self) -> None:
        self.client.sync.close()


class AsyncLibrary(Library):
    name = "async"

    async def events(self, topic: str, count: int) -> list[tuple[str, str | None, str | None]]:
        got: list[tuple[str, str | None, str | None]] = []
        stream = self.admin.events(topic, since="start", block_ms=100)
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                got.append((event.kind, event.job_id, event.group))
                if len(got) == count:
                    break
        return got

    async def aclose(self) -> None:
        await self.client.aclose()


class Cli(Face):
    """``wheelq ...`` in a process of its own (on a thread: the loop's workers run on)."""

    name = "cli"

    def __init__(self, url: str) -> None:
        self.url = url

    async def run(self, *args: str, ok: bool = True, timeout_s: float = 30) -> str:
        done = await asyncio.to_thread(
            run_wheelq, *args, "--redis-url", self.url, timeout_s=timeout_s
        )
        if ok and done.returncode != 0:
            raise Refused(done.returncode, done.stderr)
        return done.stdout

    @staticmethod
    def _group(group: str | None) -> list[str]:
        return [] if group is None else ["--group", group]

    async def pause(self, topic: str, group: str | None = None) -> None:
        await self.run("topics", "pause", topic, *self._group(group))

    async def resume(self, topic: str, group: str | None = None) -> None:
        await self.run("topics", "resume", topic, *self._group(group))

    async def held(self, topic: str, groups: set[str]) -> set[str]:
        rows = (await self.run("groups", "list", topic)).splitlines()[1:]
        paused = {row.split()[0] for row in rows if row.split()[-1] == "yes"}
        return groups & paused

    async def enqueue(
        self, topic: str, payload: Any, *, delay_s: int | None = None, max_attempts: int = 5
    ) -> str:
        delay = [] if delay_s is None else ["--delay", str(delay_s)]
        out = await self.run(
            "enqueue", topic, json.dumps(payload), *delay, "--max-attempts", str(max_attempts)
        )
        return out.strip()

    async def result(self, topic: str, job_id: str, group: str = "default") -> Any:
        info = json.loads(await self.run("job", topic, job_id, "--json"))
        (mine,) = [g for g in info["groups"] if g["group"] == group]
        assert mine["state"] == "succeeded", mine
        return mine["result"]

    async def cancel(self, topic: str, job_id: str) -> None:
        await self.run("cancel", topic, job_id)

    async def payload_known(self, topic: str, job_id: str) -> bool:
        shown = json.loads(await self.run("job", topic, job_id, "--json"))
        text = await self.run("job", topic, job_id)
        assert ("not kept" in text) is not shown["payload_kept"], text
        return bool(shown["payload_kept"])

    async def reschedule(self, topic: str, job_id: str, delay_s: int) -> None:
        await self.run("reschedule", topic, job_id, "--delay", str(delay_s))

    async def dead(self, topic: str, reason: str | None = None) -> set[str]:
        which = [] if reason is None else ["--reason", reason]
        out = await self.run("dlq", "list", topic, "--json", "--limit", "1000", *which)
        return {json.loads(line)["ref"] for line in out.splitlines()}

    async def _settle(self, action: str, topic: str, reason: str) -> tuple[int, int]:
        args = ("dlq", action, topic, "--all", "--reason", reason, "--redis-url", self.url)
        done = await asyncio.to_thread(run_wheelq, *args)
        if done.returncode != 0:
            raise Refused(done.returncode, done.stderr)
        verb, count = done.stdout.split()
        assert verb == ("purged" if action == "purge" else "replayed"), done
        skipped = re.search(r"(\d+) dead letters? cannot be replayed", done.stderr)
        return int(count), int(skipped[1]) if skipped else 0

    async def replay(self, topic: str, reason: str) -> tuple[int, int]:
        return await self._settle("replay", topic, reason)

    async def purge(self, topic: str, reason: str) -> int:
        return (await self._settle("purge", topic, reason))[0]

    async def set_max_pending(self, topic: str, max_pending: int | None) -> None:
        limit = "none" if max_pending is None else str(max_pending)
        await self.run("topics", "limits", topic, "--max-pending", limit)

    async def max_pending(self, topic: str) -> int | None:
        out = await self.run("topics", "limits", topic)
        value = out.split("max_pending=")[1].split(",")[0]
        return None if value == "None" else int(value)

    async def set_due_line(
        self,
        topic: str,
        *,
        credit_ms: int | None = None,
        fair: bool | None = None,
        weights: dict[str, int] | None = None,
    ) -> None:
        flags = [] if credit_ms is None else ["--priority-credit-ms", str(credit_ms)]
        flags += [] if fair is None else ["--fair" if fair else "--no-fair"]
        if weights == {}:
            flags.append("--clear-fair-weights")
        for key, weight in (weights or {}).items():
            flags.append(f"--fair-weight={key}={weight}")
        await self.run("topics", "limits", topic, *flags)

    async def due_line(self, topic: str) -> DueLine:
        first, *more = (await self.run("topics", "limits", topic)).splitlines()
        credit = int(first.split("priority_credit_ms=")[1].split(",")[0])
        fair = first.split("fair=")[1] == "on"
        weights = json.loads(more[0].removeprefix("fair_weights=")) if more else {}
        return DueLine(credit, fair, weights)

    async def pause_schedule(self, name: str, topic: str) -> None:
        await self.run("schedule", "pause", name, topic)

    async def resume_schedule(self, name: str, topic: str) -> None:
        await self.run("schedule", "resume", name, topic)

    async def schedule_paused(self, name: str, topic: str) -> bool:
        return bool(json.loads(await self.run("schedule", "show", name, topic))["paused"])

    async def create_group(self, topic: str, group: str) -> None:
        await self.run("groups", "create", topic, group)

    async def group_names(self, topic: str) -> set[str]:
        rows = (await self.run("groups", "list", topic)).splitlines()[1:]
        return {row.split()[0] for row in rows}

    async def delete_group(self, topic: str, group: str) -> None:
        await self.run("groups", "delete", topic, group)

    async def set_events(self, topic: str, on: bool) -> None:
        await self.run("topics", "events", topic, "--on" if on else "--off")

    async def events_on(self, topic: str) -> bool:
        return "events on" in await self.run("topics", "events", topic)

    async def events(self, topic: str, count: int) -> list[tuple[str, str | None, str | None]]:
        out = await self.run(
            "events", topic, "--since", "start", "--json", "--count", str(count), timeout_s=20
        )
        lines = [json.loads(line) for line in out.splitlines()]
        return [(e["kind"], e["job_id"], e["group"]) for e in lines]


class Http(Face):
    """The ``/v1`` API of a served app."""

    name = "http"
    uses_http = True

    def __init__(self, served: Served) -> None:
        self.api = served

    async def call(
        self, method: str, path: str, body: Any = None, status: int = 200, **kw: Any
    ) -> Any:
        got, answer, _ = await self.api.call(method, f"/v1/topics/{path}", body, **kw)
        if got != status:
            raise Refused(got, json.dumps(answer))
        return answer

    @staticmethod
    def _group(group: str | None) -> dict[str, Any]:
        return {} if group is None else {"params": {"group": group}}

    async def pause(self, topic: str, group: str | None = None) -> None:
        await self.call("POST", f"{topic}/pause", **self._group(group))

    async def resume(self, topic: str, group: str | None = None) -> None:
        await self.call("POST", f"{topic}/resume", **self._group(group))

    async def set_events(self, topic: str, on: bool) -> None:
        await self.call("POST", f"{topic}/events/{'on' if on else 'off'}")

    async def events_on(self, topic: str) -> bool:
        return bool((await self.call("GET", f"{topic}/events/config"))["enabled"])

    async def held(self, topic: str, groups: set[str]) -> set[str]:
        stats = await self.call("GET", topic)
        return set(groups) if stats["paused_since_ms"] else groups & set(stats["paused_groups"])

    async def enqueue(
        self, topic: str, payload: Any, *, delay_s: int | None = None, max_attempts: int = 5
    ) -> str:
        job: dict[str, Any] = {"payload": payload, "max_attempts": max_attempts}
        if delay_s is not None:
            job["delay_ms"] = delay_s * 1000
        job_id: str = (await self.call("POST", f"{topic}/jobs", job, 201))["id"]
        return job_id

    async def result(self, topic: str, job_id: str, group: str = "default") -> Any:
        answer = await self.call("GET", f"{topic}/jobs/{job_id}/result", params={"group": group})
        assert answer["state"] == "succeeded", answer
        return answer["result"]

    async def cancel(self, topic: str, job_id: str) -> None:
        await self.call("DELETE", f"{topic}/jobs/{job_id}", status=204)

    async def payload_known(self, topic: str, job_id: str) -> bool:
        return bool((await self.call("GET", f"{topic}/jobs/{job_id}"))["payload_kept"])

    async def reschedule(self, topic: str, job_id: str, delay_s: int) -> None:
        await self.call("PATCH", f"{topic}/jobs/{job_id}", {"delay_ms": delay_s * 1000})

    async def dead(self, topic: str, reason: str | None = None) -> set[str]:
        params = {"limit": "1000", **({} if reason is None else {"reason": reason})}
        return {d["ref"] for d in (await self.call("GET", f"{topic}/dead", params=params))["dead"]}

    async def replay(self, topic: str, reason: str) -> tuple[int, int]:
        body = {"all": True, "reason": reason}
        answer = await self.call("POST", f"{topic}/dead/replay", body)
        return answer["count"], answer["skipped"]

    async def purge(self, topic: str, reason: str) -> int:
        params = {"all": "true", "reason": reason}
        count: int = (await self.call("DELETE", f"{topic}/dead", params=params))["count"]
        return count

    async def set_max_pending(self, topic: str, max_pending: int | None) -> None:
        await self.call("PUT", f"{topic}/limits", {"max_pending": max_pending})

    async def max_pending(self, topic: str) -> int | None:
        limit: int | None = (await self.call("GET", f"{topic}/limits"))["max_pending"]
        return limit

    async def set_due_line(
        self,
        topic: str,
        *,
        credit_ms: int | None = None,
        fair: bool | None = None,
        weights: dict[str, int] | None = None,
    ) -> None:
        sent = {"priority_credit_ms": credit_ms, "fair": fair, "fair_weights": weights}
        body = {name: value for name, value in sent.items() if value is not None}
        await self.call("PATCH", f"{topic}/limits", body)

    async def due_line(self, topic: str) -> DueLine:
        shown = await self.call("GET", f"{topic}/limits")
        return DueLine(shown["priority_credit_ms"], shown["fair"], shown["fair_weights"])

    async def pause_schedule(self, name: str, topic: str) -> None:
        await self.call("POST", f"{topic}/schedules/{name}/pause")

    async def resume_schedule(self, name: str, topic: str) -> None:
        await self.call("POST", f"{topic}/schedules/{name}/resume")

    async def schedule_paused(self, name: str, topic: str) -> bool:
        return bool((await self.call("GET", f"{topic}/schedules/{name}"))["paused"])

    async def create_group(self, topic: str, group: str) -> None:
        await self.call("POST", f"{topic}/groups", {"name": group}, 201)

    async def group_names(self, topic: str) -> set[str]:
        return {g["group"] for g in (await self.call("GET", f"{topic}/groups"))["groups"]}

    async def delete_group(self, topic: str, group: str) -> None:
        await self.call("DELETE", f"{topic}/groups/{group}", status=204)

    async def events(self, topic: str, count: int) -> list[tuple[str, str | None, str | None]]:
        got: list[tuple[str, str | None, str | None]] = []
        url = f"{self.api.base}/v1/topics/{topic}/events"
        async with self.api.http.get(url, params={"since": "start"}) as r:
            if r.status != 200:
                raise Refused(r.status, await r.text())
            async for raw in r.content:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    e = json.loads(line[len("data: ") :])
                    got.append((e["kind"], e["job_id"], e["group"]))
                    if len(got) == count:
                        break
        return got


class Console(Face):
    """The dashboard: its forms posted as a browser posts them (same Origin, confirmed where
    the page asks), its pages read by element id."""

    name = "console"
    uses_http = True

    def __init__(self, served: Served) -> None:
        self.api = served

    async def form(self, path: str, fields: list[tuple[str, str]]) -> str:
        """POST a form of the dashboard; the page it sends the browser back to."""
        status, location = await post(self.api, f"/ui/topics/{path}", fields)
        assert status == 303, (path, status, location[:2000])
        return location

    async def page(self, path: str) -> Page:
        return (await get(self.api, f"/ui{path}"))[1]

    @staticmethod
    def _group(group: str | None) -> list[tuple[str, str]]:
        return [] if group is None else [("group", group)]

    async def pause(self, topic: str, group: str | None = None) -> None:
        await self.form(f"{topic}/pause", self._group(group))

    async def resume(self, topic: str, group: str | None = None) -> None:
        await self.form(f"{topic}/resume", self._group(group))

    async def held(self, topic: str, groups: set[str]) -> set[str]:
        shown = (await self.page(f"?after={topic[:-1]}")).ids[f"{topic}-paused"]
        if shown == "all":
            return set(groups)
        return set() if shown == "no" else groups & set(shown.split(", "))

    async def result(self, topic: str, job_id: str, group: str = "default") -> Any:
        ids = (await self.page(f"/topics/{topic}/jobs/{job_id}")).ids
        outcomes = [v for k, v in ids.items() if k.startswith("group-") and k.endswith("-outcome")]
        (outcome,) = outcomes  # the matrix's jobs run in one group
        return json.loads(outcome)

    async def cancel(self, topic: str, job_id: str) -> None:
        await self.form(f"{topic}/job/cancel", [("id", job_id), ("confirm", "1")])

    async def payload_known(self, topic: str, job_id: str) -> bool:
        ids = (await self.page(f"/topics/{topic}/jobs/{job_id}")).ids
        assert ("payload" in ids) is not ("payload-gone" in ids), ids
        return "payload" in ids

    async def reschedule(self, topic: str, job_id: str, delay_s: int) -> None:
        await self.form(f"{topic}/job/move", [("id", job_id), ("delay_s", str(delay_s))])

    async def dead(self, topic: str, reason: str | None = None) -> set[str]:
        query = f"?limit=1000{'' if reason is None else '&reason=' + reason}"
        return set((await self.page(f"/topics/{topic}/dead{query}")).refs)

    async def _settle(self, action: str, topic: str, reason: str) -> tuple[int, int]:
        fields = [("all", "1"), ("reason", reason), ("confirm", "1")]
        done = (await self.form(f"{topic}/dead/{action}", fields)).split("done=")[1]
        verb, count, *skipped = done.split("&")[0].split("+")
        assert verb == ("purged" if action == "purge" else "replayed"), done
        assert not skipped or (len(skipped), skipped[0]) == (2, "skipped"), done
        return int(count), int(skipped[-1]) if skipped else 0

    async def replay(self, topic: str, reason: str) -> tuple[int, int]:
        return await self._settle("replay", topic, reason)

    async def purge(self, topic: str, reason: str) -> int:
        return (await self._settle("purge", topic, reason))[0]

    async def pause_schedule(self, name: str, topic: str) -> None:
        await self.form(f"{topic}/schedules/pause", [("name", name)])

    async def resume_schedule(self, name: str, topic: str) -> None:
        await self.form(f"{topic}/schedules/resume", [("name", name)])

    async def schedule_paused(self, name: str, topic: str) -> bool:
        ids = (await self.page(f"/topics/{topic}/schedules")).ids
        (row,) = [v for k, v in ids.items() if k.startswith("schedule-") and v.split()[0] == name]
        return row.split()[-4:-3] == ["paused"] or " paused " in f" {row} "

    async def delete_group(self, topic: str, group: str) -> None:
        await self.form(f"{topic}/groups/delete", [("group", group), ("confirm", "1")])

    async def group_names(self, topic: str) -> set[str]:
        ids = (await self.page(f"/topics/{topic}")).ids
        rows = [k for k in ids if k.startswith("group-") and k.count("-") == 1]
        return {ids[k].split()[0] for k in rows}

    async def events_on(self, topic: str) -> bool:
        return (await self.page(f"/topics/{topic}")).ids["events"] == "on"

    async def due_line(self, topic: str) -> DueLine:
        ids = (await self.page(f"/topics/{topic}")).ids
        credit = int(ids["priority-credit"].removesuffix(" ms").replace(",", ""))
        weights = {
            ids[f"{k}-key"]: int(v.replace(",", ""))
            for k, v in ids.items()
            if k.startswith("weight-") and not k.endswith("-key")
        }
        return DueLine(credit, ids["fair"] == "on", weights)


FACES: dict[str, type[Face]] = {f.name: f for f in (SyncLibrary, AsyncLibrary, Cli, Http, Console)}
"""Every face by name: the matrix's columns."""


def having(verb: str) -> list[str]:
    """The faces that offer `verb`, by name (a test's parametrize rows)."""
    return [name for name, face in FACES.items() if getattr(face, verb) is not getattr(Face, verb)]


@contextlib.asynccontextmanager
async def opened(name: str, url: str, served: Served | None = None) -> AsyncIterator[Face]:
    """Face `name` on the server at `url` (HTTP and console: through `served`)."""
    face: Face
    if name == "sync":
        face = SyncLibrary(SyncAsAsync(Client.from_url(url)))
    elif name == "async":
        face = AsyncLibrary(AsyncClient.from_url(url))
    elif name == "cli":
        face = Cli(url)
    else:
        assert served is not None, f"face {name} needs a served app"
        face = FACES[name](served)  # type: ignore[call-arg]
    try:
        yield face
    finally:
        await face.aclose()
