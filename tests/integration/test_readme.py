"""The README's examples run as written: the Quickstart, the HTTP service's, and
``wheelq --help``'s first steps (the guides' examples: test_docs_guides.py).

The fenced blocks of those sections are taken from README.md as they are; only the Redis
URL (and the HTTP service's port) is swapped for a server of the test's own. Python blocks
starting with a ``# NAME.py`` line are written to files; each command of a bash block (a
line, or lines joined by a backslash or an open quote) is run. In the Quickstart,
`wheelq server` is left out (the test's server stands in for it), `wheelq scheduler` and
`wheelq worker` start in the background (stopped with SIGTERM at the end), everything
else runs to completion and must exit 0. Then every job must have been handled by both
groups, and none may be a dead letter.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from tests.support.cli import clean_env, wheelq_argv
from tests.support.docs import (
    README_URL,
    Services,
    argv_of,
    count,
    handled_by,
    run_command,
    shell_commands,
    snippets,
)
from tests.support.servers import dedicated_server, free_port
from tests.support.waiting import eventually_sync
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary

SERVICES = ("scheduler", "worker")


def test_readme_quickstart_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        found = snippets("README.md", "Quickstart", url)
        files, commands = found.files, found.commands
        assert {"handlers.py", "producer.py", "app.py"} <= files.keys()
        for name, body in files.items():
            (tmp_path / name).write_text(body)
        services = Services(tmp_path, stack)
        ran: dict[str, str] = {}
        for command in commands:
            if command[:2] == ["wheelq", "server"]:
                continue
            if command[0] == "wheelq" and command[1] in SERVICES:
                services.start(command)
                continue
            done = subprocess.run(
                argv_of(command), cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr, (command, done.stderr)
            ran[" ".join(command[:2])] = done.stdout
        redis_sync = stack.enter_context(redis.Redis.from_url(url))
        eventually_sync(
            lambda: services.alive() and handled_by(redis_sync, "emails", {b"default", b"audit"}),
            timeout_s=60,
            what="both groups to handle every email",
        )
        printed = services.stop()
        fired = [
            fields[b"id"].decode()
            for k in all_shards("emails", 4)
            for _, fields in redis_sync.xrange(k.ready)
        ]
        assert count(redis_sync, "emails", "dead") == count(redis_sync, "welcome", "dead") == 0
        assert count(redis_sync, "reports", "delayed") == 0  # cancelled
    # Handler threads print at once: a message is one write, but newlines may interleave.
    sent = dict(re.findall(r"sending to (\S+): job (\w+),", printed["handlers:send_email"]))
    audited = re.findall(r"audit: emails job (\w+) ", printed["handlers:audit"])
    assert sorted(sent.values()) == sorted(audited) == sorted(fired)
    assert len(fired) >= 1004
    for name in ("ada", "bob", "eve", "joe", "user999"):
        assert f"{name}@example.com" in sent, name
    assert "TopicStats(" in ran["python producer.py"]
    assert "welcome, Ada!" in ran["python app.py"]


def test_readme_http_example_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the HTTP example uses curl, and curl is not on PATH")
    port = free_port()
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        commands = snippets("README.md", "HTTP service", f"{server.url}/0", port=port).commands
        services = Services(tmp_path, stack)
        answers = []
        for command in commands:
            if command[:4] == ["python", "-m", "pip", "install"] or command[:2] == [
                "wheelq",
                "server",
            ]:
                continue  # installed already; the test's server stands in for it
            if command[0] == "wheelq":
                argv = [word for word in command if word != "&"]
                if argv[1] == "serve":
                    argv += ["--port", str(port)]
                services.start(argv)
                continue
            assert command[0] == "curl", command
            if "/topics/emails/jobs" in " ".join(command) and "-d" in command:
                # The Quickstart's worker may still run on "emails": it reads payload["to"].
                body = json.loads(command[command.index("-d") + 1])
                assert "to" in body["payload"], f"a job the Quickstart's handler fails: {body}"
            if not answers:  # the service is up once it answers
                eventually_sync(
                    lambda: services.alive() and _answers(f"http://127.0.0.1:{port}/readyz"),
                    timeout_s=30,
                    what="wheelq serve",
                )
            done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
            assert done.returncode == 0, (command, done.stderr)
            answers.append(done.stdout)
        services.stop()
    made, scheduled, state, moved, cancelled, group, pulled = answers
    assert json.loads(made)["topic"] == "emails"
    assert json.loads(scheduled)["id"] == "invoice-42"
    assert json.loads(state)["state"] == "pending"
    assert json.loads(moved)["id"] == "invoice-42"
    assert cancelled == ""  # 204
    assert json.loads(group) == {"group": "mailer", "created": True, "shards": 4}
    assert json.loads(pulled) == {"jobs": []}  # its job is due in 30 s


def test_help_first_steps_run_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    shown = subprocess.run(
        wheelq_argv("--help"), env=clean_env(), capture_output=True, text=True, check=True
    ).stdout
    steps = shown.split("first steps", 1)[1]
    commands = [c for c in shell_commands(steps) if c[0] == "wheelq"]
    assert [c[1] for c in commands] == [
        "server",
        "scheduler",
        "worker",
        "enqueue",
        "schedule",
        "serve",
    ]
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        for command in commands[1:]:
            assert "--redis-url" in command, command
        for command in commands:
            if command[1] in ("enqueue", "schedule"):
                run_command([README_URL.sub(url, word) for word in command], tmp_path)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False
