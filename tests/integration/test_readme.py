"""The README's examples run as written: the Quickstart, the schedule commands, the HTTP
service's, ``wheelq --help``'s first steps, and "Testing your own code".

The fenced blocks of those sections are taken from README.md as they are; only the Redis
URL (and the HTTP service's port) is swapped for a server of the test's own. Python blocks
starting with a ``# NAME.py`` line are written to files; each command of a bash block (a
line, or lines joined by a backslash or an open quote) is run. In the Quickstart,
`wheelq server` is left out (the test's server stands in for it), `wheelq scheduler` and
`wheelq worker` start in the background (stopped with SIGTERM at the end), everything
else runs to completion and must exit 0. Then every job must have been handled by both
groups, and none may be a dead letter. The testing section's test file is run by the
pytest command it shows, and must pass.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import IO

import pytest
import redis

from tests.support.cli import ROOT, clean_env, wheelq_argv
from tests.support.servers import dedicated_server, free_port
from tests.support.waiting import eventually_sync
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary

README_URL = re.compile(r"redis://(?:localhost|127\.0\.0\.1):\d+/0")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
SERVICES = ("scheduler", "worker")


def snippets(
    title: str, url: str = "", *, port: int = 0, files_too: bool = True
) -> tuple[dict[str, str], list[list[str]]]:
    """The files (name -> text) and commands of the README section `title`, with `url` for
    the README's Redis URL and `port` for the HTTP service's (8080); `files_too` False
    leaves the section's Python blocks out."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    section = README_URL.sub(url, section).replace("localhost:8080", f"127.0.0.1:{port}")
    files: dict[str, str] = {}
    commands: list[list[str]] = []
    for language, body in FENCE.findall(section):
        assert "localhost:" not in body, body  # a URL the substitution missed
        if language == "python" and files_too:
            name = re.match(r"# (\w+\.py)\n", body)
            assert name, f"a python block of {title!r} must start with '# NAME.py':\n{body}"
            files[name[1]] = body
        elif language == "bash":
            commands += shell_commands(body)
    return files, commands


def shell_commands(body: str) -> list[list[str]]:
    """Each command of a shell block as its argv (comments dropped): a line ends a command
    unless it ends in a backslash or leaves a quote open."""
    out: list[list[str]] = []
    pending = ""
    for line in body.splitlines():
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            argv = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            pending += "\n"
            continue
        pending = ""
        if argv:
            out.append(argv)
    assert not pending, f"an unfinished command: {pending!r}"
    return out


def _argv(command: list[str]) -> list[str]:
    if command[0] == "wheelq":
        return wheelq_argv(*command[1:])
    assert command[0] == "python", command
    return [sys.executable, *command[1:]]


def _handled_by(redis_sync: redis.Redis, topic: str, groups: set[bytes]) -> bool:
    """Nothing pending on `topic`, and each of `groups` has read and acked every entry."""
    shards = redis_sync.hget("wheelq:topics", topic)
    if shards is None:
        return False
    for keys in all_shards(topic, int(shards)):
        if redis_sync.zcard(keys.delayed) or not redis_sync.exists(keys.ready):
            return False
        info = redis_sync.xinfo_groups(keys.ready)
        if {g["name"] for g in info} != groups or any(g["pending"] or g["lag"] for g in info):
            return False
    return True


def _count(redis_sync: redis.Redis, topic: str, key: str) -> int:
    """Entries in `topic`'s `key` stream (``ready``, ``dead``) or sorted set (``delayed``)."""
    shards = int(redis_sync.hget("wheelq:topics", topic) or 0)
    size = redis_sync.zcard if key == "delayed" else redis_sync.xlen
    return sum(size(getattr(k, key)) for k in all_shards(topic, shards))


class Services:
    """The background commands, each with its stdout and stderr in a file of its own."""

    def __init__(self, cwd: Path, stack: ExitStack) -> None:
        self.cwd, self.stack = cwd, stack
        self.running: list[tuple[list[str], subprocess.Popen[str], IO[str], IO[str]]] = []

    def start(self, command: list[str]) -> None:
        n = len(self.running)
        out, err = (self.stack.enter_context((self.cwd / f"{n}.{x}").open("w+")) for x in "oe")
        proc = subprocess.Popen(
            _argv(command), cwd=self.cwd, env=clean_env(), stdout=out, stderr=err, text=True
        )
        self.stack.callback(proc.kill)  # a no-op once it has exited
        self.running.append((command, proc, out, err))

    def alive(self) -> bool:
        """True; fails the test at once if one of them has exited."""
        for command, proc, _, err in self.running:
            if proc.poll() is not None:
                err.seek(0)
                raise AssertionError(f"{command} exited with {proc.returncode}: {err.read()}")
        return True

    def stop(self) -> dict[str, str]:
        """SIGTERM each; each must exit 0 without a traceback. Returns stdout by handler spec
        (or command name)."""
        for _, proc, _, _ in self.running:
            proc.terminate()
        printed = {}
        for command, proc, out, err in self.running:
            proc.wait(timeout=30)
            out.seek(0)
            err.seek(0)
            log = err.read()
            assert proc.returncode == 0, (command, log)
            assert "Traceback" not in log, log
            printed[command[2] if command[1] == "worker" else command[1]] = out.read()
        return printed


def test_readme_quickstart_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        url = f"{server.url}/0"
        files, commands = snippets("Quickstart", url)
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
                _argv(command), cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr, (command, done.stderr)
            ran[" ".join(command[:2])] = done.stdout
        redis_sync = stack.enter_context(redis.Redis.from_url(url))
        eventually_sync(
            lambda: services.alive() and _handled_by(redis_sync, "emails", {b"default", b"audit"}),
            timeout_s=60,
            what="both groups to handle every email",
        )
        printed = services.stop()
        fired = [
            fields[b"id"].decode()
            for k in all_shards("emails", 4)
            for _, fields in redis_sync.xrange(k.ready)
        ]
        assert _count(redis_sync, "emails", "dead") == _count(redis_sync, "welcome", "dead") == 0
        assert _count(redis_sync, "reports", "delayed") == 0  # cancelled
    # Handler threads print at once: a message is one write, but newlines may interleave.
    sent = dict(re.findall(r"sending to (\S+): job (\w+),", printed["handlers:send_email"]))
    audited = re.findall(r"audit: emails job (\w+) ", printed["handlers:audit"])
    assert sorted(sent.values()) == sorted(audited) == sorted(fired)
    assert len(fired) >= 1004
    for name in ("ada", "bob", "eve", "joe", "user999"):
        assert f"{name}@example.com" in sent, name
    assert "TopicStats(" in ran["python producer.py"]
    assert "welcome, Ada!" in ran["python app.py"]


def test_readme_testing_example_passes_as_written(tmp_path: Path) -> None:
    files, commands = snippets("Testing your own code with wheelq.testing")
    assert list(files) == ["test_reminders.py"]
    assert commands == [["python", "-m", "pytest", "-q", "test_reminders.py"]]
    (tmp_path / "test_reminders.py").write_text(files["test_reminders.py"])
    done = subprocess.run(
        _argv(commands[0]), cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "1 passed" in done.stdout, done.stdout


def test_readme_schedule_commands_run_as_written(
    server_binary: ServerBinary, tmp_path: Path
) -> None:
    with dedicated_server(server_binary) as server:
        url = f"{server.url}/0"
        _, commands = snippets("Recurring schedules", url, files_too=False)
        assert [c[:3] for c in commands] == [
            ["wheelq", "schedule", "add"],
            ["wheelq", "schedule", "list"],
            ["wheelq", "schedule", "pause"],
        ]
        printed = [_run(command, tmp_path) for command in commands]
        assert "nightly-report" in printed[1]
        with redis.Redis.from_url(url) as r:
            assert r.hlen("wheelq:topics") == 1  # the schedule's topic, "reports"
        listed = _run(["wheelq", "schedule", "list", "--redis-url", url], tmp_path)
        assert "paused" in listed


def test_readme_http_example_runs_as_written(server_binary: ServerBinary, tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the HTTP example uses curl, and curl is not on PATH")
    port = free_port()
    with ExitStack() as stack:
        server = stack.enter_context(dedicated_server(server_binary))
        _, commands = snippets("HTTP service", f"{server.url}/0", port=port, files_too=False)
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
                _run([README_URL.sub(url, word) for word in command], tmp_path)


def _run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(
        _argv(command), cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, (command, done.stderr)
    return done.stdout


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False
