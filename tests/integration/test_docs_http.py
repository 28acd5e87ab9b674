"""The HTTP service's guides run as written: docs/guides/http-service.md and
docs/guides/pull.md.

Each test takes its sections' blocks from the page as they are (`tests.support.docs`),
with the Redis URL and the service's port swapped for the test's own. `wheelq server` is
left out (the test's server stands in for it), the other `wheelq` commands start in the
background, and each `curl` runs to completion with its status code written after its
body, so every answer is checked: its status and what it says.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.clients import admin_of
from tests.support.docs import Services, blocks, count, run_code, snippets
from tests.support.servers import dedicated_server, free_port
from tests.support.waiting import eventually_sync
from wheelq import Admin, Client
from wheelq.runtime.clock import wall_ms
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the guides use curl")


def curl(command: list[str]) -> tuple[int, str, Any]:
    """Run a docs `curl` command: its status, its Content-Type and its body (JSON, or the
    text when it is not JSON)."""
    assert command[0] == "curl", command
    argv = [*command, "-w", "\n%{http_code} %{content_type}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, (command, done.stderr)
    body, _, trailer = done.stdout.rpartition("\n")
    status, _, content_type = trailer.partition(" ")
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = body
    return int(status), content_type, parsed


def start(services: Services, command: list[str], port: int) -> None:
    """Start a docs `wheelq` command in the background (`wheelq serve` on `port`)."""
    assert command[0] == "wheelq", command
    argv = [word for word in command if word != "&"]
    if argv[1] == "serve":
        argv += ["--port", str(port)]
    services.start(argv)


def serving(services: Services, port: int) -> None:
    """Wait until the service on `port` is ready (failing at once if a service exited)."""

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    eventually_sync(lambda: services.alive() and ready(), timeout_s=30, what="wheelq serve")


@contextmanager
def service_scaffold(
    server_binary: ServerBinary, tmp_path: Path
) -> Iterator[tuple[ExitStack, str, int, Services]]:
    """A dedicated server's URL, a free port for `wheelq serve` and the background services
    of a test, with the stack that stops them all when the block ends."""
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        yield stack, f"{server.url}/0", free_port(), Services(tmp_path, stack)


def json_block(page: str, section: str) -> Any:
    """The one ``json`` block of `page`'s `section`, parsed."""
    (found,) = [b for b in blocks(page) if b.section == section and b.lang == "json"]
    return json.loads(found.body)


def test_http_service_guide_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    page = "docs/guides/http-service.md"
    with service_scaffold(server_binary, tmp_path) as (_, url, port, services):
        started = snippets(page, "Start it", url, port=port).commands
        assert [c[:2] for c in started] == [
            ["wheelq", "server"],
            ["wheelq", "scheduler"],
            ["wheelq", "serve"],
        ]
        for command in started[1:]:
            start(services, command, port)
        serving(services, port)

        before = wall_ms()
        jobs = [
            curl(c)
            for c in snippets(
                page, "Enqueue, look up, move and cancel jobs", url, port=port
            ).commands
        ]
        made, scheduled, state, moved, cancelled, batch, topic = jobs
        assert made[0] == 201 and made[2]["topic"] == "emails", made
        assert before + 30_000 <= made[2]["due_ms"] <= wall_ms() + 30_000
        at = int(datetime(2030, 12, 1, 9, tzinfo=UTC).timestamp() * 1000)
        assert scheduled[0] == 201, scheduled
        assert scheduled[2] == {"id": "invoice-42", "topic": "invoices", "due_ms": at}
        assert state[0] == 200 and state[2]["state"] == "pending", state
        assert state[2]["due_ms"] == at, state
        assert moved[0] == 200 and moved[2]["id"] == "invoice-42", moved
        assert before + 60_000 <= moved[2]["due_ms"] <= wall_ms() + 60_000
        assert cancelled[:3:2] == (204, ""), cancelled
        assert batch[0] == 200, batch
        assert [r["status"] for r in batch[2]["results"]] == [201, 201], batch
        assert topic[0] == 200 and topic[2]["pending"] == 3, topic

        (refused,) = [curl(c) for c in snippets(page, "Read an error", url, port=port).commands]
        status, content_type, problem = refused
        assert (status, content_type) == (422, "application/problem+json"), refused
        assert problem == json_block(page, "Read an error")
        with Admin.from_url(url) as admin:
            assert admin.stats("emails").pending == 3, "the refused batch enqueued a job"

        section = "Manage schedules, limits and topics"
        managed = [curl(c) for c in snippets(page, section, url, port=port).commands]
        made, listed, paused, deleted, limited, lined, dropped = managed
        assert made[0] == 201 and made[2]["cron"] == "30 2 * * *", made
        assert made[2]["tz"] == "Europe/Berlin" and made[2]["next_run_ms"] > before, made
        assert [s["name"] for s in listed[2]["schedules"]] == ["nightly"], listed
        assert paused[0] == 200 and paused[2]["paused"] is True, paused
        assert deleted[:3:2] == (204, ""), deleted
        assert limited[0] == 200, limited
        assert (limited[2]["max_pending"], limited[2]["max_ready"]) == (1_000_000, 50_000)
        assert lined[0] == 200 and lined[2]["max_ready"] == 50_000, lined  # PATCH: the rest kept
        assert (lined[2]["fair"], lined[2]["fair_weights"]) == (True, {"acme": 3}), lined
        assert lined[2]["priority_credit_ms"] == 2000, lined
        assert dropped[:3:2] == (204, ""), dropped
        with Admin.from_url(url) as admin:
            assert admin.limits("emails").max_ready == 50_000
            assert admin.limits("emails").fair
            assert "reports" not in admin.topics() and admin.schedules("reports") == []
        services.stop()


def test_http_service_tokens_run_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    page = "docs/guides/http-service.md"
    section = "Give access with tokens"
    (config,) = [b for b in blocks(page) if b.section == section and b.lang == "toml"]
    name, _, _ = config.body.partition("\n")
    assert name == "# wheelq.toml", name
    (tmp_path / "wheelq.toml").write_text(config.body)
    with service_scaffold(server_binary, tmp_path) as (_, url, port, services):
        commands = snippets(page, section, url, port=port).commands
        start(services, commands[0], port)
        assert commands[0][:2] == ["wheelq", "serve"]
        serving(services, port)
        answers = [curl(c) for c in commands[1:]]
        assert [a[0] for a in answers] == [401, 403, 201, 200, 403], answers
        assert answers[2][2]["id"] == "welcome-ada"
        assert answers[3][2]["state"] == "pending"
        assert all(a[1] == "application/problem+json" for a in answers if a[0] >= 400)
        services.stop()


def test_pull_guide_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    page = "docs/guides/pull.md"
    with service_scaffold(server_binary, tmp_path) as (stack, url, port, services):
        start(services, ["wheelq", "scheduler", "--redis-url", url], port)
        start(services, ["wheelq", "serve", "--redis-url", url], port)
        serving(services, port)
        client = stack.enter_context(Client.from_url(url))
        admin = admin_of(client)
        later = client.enqueue("emails", {"to": "later@example.com"}, delay=3600)

        guide = snippets(page, "*", url, port=port)
        made, pulled = [curl(c) for c in guide.commands]
        assert made[0] == 201, made
        assert made[2] == {"group": "mailer", "created": True, "shards": 4}
        assert pulled[:3:2] == (200, {"jobs": []}), "a job due in an hour was pulled"

        due = [client.enqueue("emails", {"to": f"{n}@example.com"}) for n in ("ada", "bob")]
        broken = client.enqueue("emails", {"subject": "no address"})
        eventually_sync(
            lambda: count(redis.Redis.from_url(url), "emails", "ready") == 3,
            timeout_s=30,
            what="the due jobs to fire",
        )
        namespace = run_code(guide.code, url)
        assert sorted(namespace["sent"]) == ["ada@example.com", "bob@example.com"]  # type: ignore[call-overload]
        (mailer,) = [g for g in admin.groups("emails") or () if g.name == "mailer"]
        assert mailer.in_flight == 0, "a job was left in flight"
        retried = client.get("emails", broken)
        assert (retried.state, retried.attempt) == ("retrying", 2), "the nack did not retry it"
        assert [client.get("emails", j).state for j in due] == ["succeeded"] * 2
        assert client.get("emails", later).state == "pending"
        services.stop()
