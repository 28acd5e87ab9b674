"""The README's examples run as written: its two set-up commands, the Quickstart, and
``wheelq --help``'s first steps (the site's examples: tests/integration/test_docs_*.py).

The fenced blocks of those sections are taken from README.md as they are; only the Redis
URL is swapped for a server of the test's own. Python blocks
starting with a ``# NAME.py`` line are written to files; each command of a bash block (a
line, or lines joined by a backslash or an open quote) is run. In the Quickstart,
`wheelq server` is left out (the test's server stands in for it), `wheelq scheduler` and
`wheelq worker` start in the background (stopped with SIGTERM at the end), everything
else runs to completion and must exit 0, with no DeprecationWarning. Then every job must
have been handled by both groups, none may be a dead letter, and the task's job that
manage.py enqueued while its topic was paused must have waited, untaken, until it resumed.
"""

from __future__ import annotations

import re
import subprocess
from contextlib import ExitStack
from pathlib import Path

import redis

import wheelq
from tests.support.cli import ROOT, clean_env, wheelq_argv
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
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually_sync
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary

SERVICES = ("scheduler", "worker", "run")


def test_readme_quickstart_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        found = snippets("README.md", "Quickstart", url)
        files, commands = found.files, found.commands
        expected = {"tasks.py", "later.py", "manage.py", "handlers.py", "producer.py", "app.py"}
        assert expected <= files.keys()
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
            assert "DeprecationWarning" not in done.stderr, (command, done.stderr)
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
        with wheelq.Admin.from_url(url) as admin:  # manage.py resumed what it paused
            assert admin.paused("tasks.send_welcome") == wheelq.PauseState("tasks.send_welcome")
    # Handler threads print at once: a message is one write, but newlines may interleave.
    sent = dict(re.findall(r"sending to (\S+): job (\w+),", printed["handlers:send_email"]))
    audited = re.findall(r"audit: emails job (\w+) ", printed["handlers:audit"])
    assert sorted(sent.values()) == sorted(audited) == sorted(fired)
    assert len(fired) >= 1004
    for name in ("ada", "bob", "eve", "joe", "user999"):
        assert f"{name}@example.com" in sent, name
    assert "TopicStats(" in ran["python producer.py"]
    assert "welcome, Ada!" in ran["python app.py"]
    # The task: enqueued by later.py, run by `wheelq run`, its result printed by later.py.
    assert ran["python later.py"].strip() == "welcomed ada@example.com"
    assert "sending a welcome to Ada <ada@example.com>" in printed["run"]
    # manage.py: the pause held (Bob's job fired and waited, untaken, until the resume).
    managed = ran["python manage.py"].splitlines()
    # Two lines, no "ready": the result came while the topic was paused.
    assert len(managed) == 3 and managed[1] == "ready", managed
    assert re.fullmatch(
        r"PauseState\(topic='tasks\.send_welcome', since_ms=\d+, groups=\{\}\)", managed[0]
    ), managed
    assert managed[2] == "welcomed bob@example.com", managed
    assert "sending a welcome to Bob <bob@example.com>" in printed["run"]


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


def test_readme_set_up_commands_are_the_ones_ci_and_the_demo_run(tmp_path: Path) -> None:
    """The README's two commands: the second is the one `.ci/run` runs as its test (so a
    green CI ran it as written, install included); the first installs the same way with
    the `embedded` extra and ends in `wheelq demo`, which then runs here as written."""
    found = snippets("README.md", "")
    lines = [" ".join(c) for c in found.commands]
    assert len(lines) == 2, lines
    demo, tests = (line.split(" && ") for line in lines)
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert "grep -m1 -E '^python3 -m venv .*python -m pytest$' README.md" in ci
    assert re.match(r"^python3 -m venv .*python -m pytest$", lines[1]), lines[1]
    assert demo[:2] == tests[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"]
    assert demo[2] == "python -m pip install .[embedded]"  # shlex took the quotes off
    assert tests[2] == "python -m pip install -e .[dev]"
    assert demo[3] == "wheelq demo"
    shown = run_command(["wheelq", "demo"], tmp_path, timeout=120)
    assert "duplicates 0  early 0  missing 0" in shown, shown
    assert "run twice 0  missing 0" in shown, shown
