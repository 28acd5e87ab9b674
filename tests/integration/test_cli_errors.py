"""Ordinary mistakes at the `wheelq` command line: one line on stderr naming the problem, no
traceback, exit 2 for a command line or config that cannot run, 1 for a failure at run time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import (
    assert_one_line_error,
    clean_env,
    free_port,
    run_wheelq,
    wheelq_argv,
)
from tests.support.servers import dedicated_server
from wheelq import Admin, Client
from wheelq.core.keys import ShardKeys
from wheelq.testing import ServerBinary

HANDLERS = "def handle(job):\n    pass\n\nNOT_CALLABLE = 3\n"


@pytest.fixture
def down_url() -> str:
    """A URL of a loopback port nothing listens on."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def handlers_dir(tmp_path: Path) -> Path:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    return tmp_path


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("nomodule:handle", "no module named 'nomodule'"),
        ("handlers:nope", "module 'handlers' has no attribute 'nope'"),
        ("handlers:NOT_CALLABLE", "handler 'handlers:NOT_CALLABLE' is not callable"),
        ("handlers", "handler must be module:function"),
    ],
)
def test_a_bad_handler_is_named_in_one_line(
    handlers_dir: Path, down_url: str, spec: str, fragment: str
) -> None:
    done = run_wheelq("worker", spec, "--topic", "t", "--redis-url", down_url, cwd=handlers_dir)
    assert_one_line_error(done, 2, "wheelq worker: ", fragment)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("handlers", "app must be module:app, got 'handlers'"),
        ("nomodule:app", "app 'nomodule:app': no module named 'nomodule'"),
        ("handlers:app", "app 'handlers:app': module 'handlers' has no attribute 'app'"),
        ("handlers:handle", "app 'handlers:handle' is a function, not a wheelq.App"),
        ("handlers.py:app", "'handlers.py' is a file name: drop '.py' and pass handlers:app"),
    ],
)
def test_a_bad_app_is_named_in_one_line(
    handlers_dir: Path, down_url: str, spec: str, fragment: str
) -> None:
    done = run_wheelq("run", spec, "--redis-url", down_url, cwd=handlers_dir)
    assert_one_line_error(done, 2, "wheelq run: ", fragment)


@pytest.mark.parametrize(
    ("source", "fragments"),
    [
        ("x = 1\ndef handle(job)\n    pass\n", ["bad.py:2: ", "SyntaxError: expected ':'"]),
        (
            "import os\nimport no_such_dependency_xyz\n",
            ["bad.py:2: ", "ModuleNotFoundError: No module named 'no_such_dependency_xyz'"],
        ),
        (
            "from os import no_such_name_xyz\n",
            ["bad.py:1: ", "ImportError: cannot import name 'no_such_name_xyz'"],
        ),
        ("\n\nhandle = undefined_xyz\n", ["bad.py:3: ", "NameError: name 'undefined_xyz'"]),
        ("import json\njson.loads('{')\n", ["bad.py:2: ", "JSONDecodeError: Expecting"]),
    ],
)
def test_a_handler_module_that_raises_is_one_line_naming_file_line_and_error(
    tmp_path: Path, down_url: str, source: str, fragments: list[str]
) -> None:
    (tmp_path / "bad.py").write_text(source)
    done = run_wheelq("worker", "bad:handle", "--topic", "t", "--redis-url", down_url, cwd=tmp_path)
    line = assert_one_line_error(
        done, 1, "wheelq worker: importing handler module 'bad' failed: ", *fragments
    )
    assert "('" not in line, line  # not a SyntaxError's raw args tuple


def test_an_error_deep_in_a_handler_package_names_the_packages_own_line(
    tmp_path: Path, down_url: str
) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("from app import jobs\n")
    (tmp_path / "app" / "jobs.py").write_text("import json\n\nCONF = json.loads('{')\n")
    done = run_wheelq("worker", "app:handle", "--topic", "t", "--redis-url", down_url, cwd=tmp_path)
    assert_one_line_error(done, 1, f"{Path('app', 'jobs.py')}:3: ", "JSONDecodeError")


@pytest.mark.parametrize(
    ("spec", "suggested"),
    [
        ("handlers.py:handle", "pass handlers:handle"),
        ("./handlers.py:handle", "pass handlers:handle"),
        ("sub/jobs.py:handle", "pass sub.jobs:handle"),
    ],
)
def test_a_file_name_for_the_handler_module_suggests_its_module_name(
    handlers_dir: Path, down_url: str, spec: str, suggested: str
) -> None:
    (handlers_dir / "sub").mkdir()
    (handlers_dir / "sub" / "jobs.py").write_text(HANDLERS)
    done = run_wheelq("worker", spec, "--topic", "t", "--redis-url", down_url, cwd=handlers_dir)
    assert_one_line_error(done, 2, "wheelq worker: ", "is a file name: drop '.py'", suggested)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (None, "cannot read config file"),
        ("[worker\n", "is not valid TOML"),
        ("[shceduler]\nlease_ttl_ms = 1000\n", "unknown section [shceduler]; known: [redis]"),
        ("[scheduler]\nlease_ttl = 1000\n", "unknown key 'lease_ttl' in [scheduler]; known:"),
        ("url = 'redis://x'\n", "key 'url' is outside any section"),
    ],
)
def test_a_missing_or_invalid_config_file_is_named_in_one_line(
    tmp_path: Path, down_url: str, text: str | None, fragment: str
) -> None:
    config = tmp_path / "wheelq.toml"
    if text is not None:
        config.write_text(text)
    done = run_wheelq("stats", "--config", str(config), "--redis-url", down_url)
    assert_one_line_error(done, 2, str(config), fragment)


@pytest.mark.parametrize("where", ["before", "after", "env"])
def test_a_bogus_log_level_is_a_usage_error(down_url: str, where: str) -> None:
    args = ["stats", "--redis-url", down_url]
    env = {}
    if where == "before":
        args = ["--log-level", "bogus", *args]
    elif where == "after":
        args = [*args, "--log-level", "bogus"]
    else:
        env = {"WHEELQ_LOG_LEVEL": "bogus"}
    done = run_wheelq(*args, env=env)
    assert_one_line_error(done, 2, "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")


@pytest.mark.parametrize("command", [["stats"], ["dlq", "list", "t"], ["enqueue", "t", "1"]])
def test_redis_down_is_one_line_and_exit_1(down_url: str, command: list[str]) -> None:
    done = run_wheelq(*command, "--redis-url", down_url)
    assert_one_line_error(done, 1, f"Redis at {down_url}: ", "onnect")


def _fast_start_config(tmp_path: Path) -> list[str]:
    """``--config`` turning start-up retries off (fail at once when Redis is down)."""
    path = tmp_path / "fast.toml"
    path.write_text("[scheduler]\nstart_timeout_ms = 0\n[worker]\nstart_timeout_ms = 0\n")
    return ["--config", str(path)]


@pytest.mark.parametrize("command", ["scheduler", "worker"])
def test_a_service_with_redis_down_exits_1_with_one_error_line(
    handlers_dir: Path, down_url: str, command: str
) -> None:
    args = ["worker", "handlers:handle", "--topic", "t"] if command == "worker" else [command]
    done = run_wheelq(
        *args, "--redis-url", down_url, *_fast_start_config(handlers_dir), cwd=handlers_dir
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    # Log lines may come first; the error is the last line, said once.
    last = done.stderr.strip().splitlines()[-1]
    address = down_url.removeprefix("redis://").removesuffix("/0")
    assert last.startswith(f"wheelq {command}: redis at {address} not reachable"), done.stderr
    assert done.stderr.count(f"wheelq {command}: ") == 1


@pytest.mark.both_servers  # the server's AUTH reply
def test_a_wrong_password_is_one_line_and_is_not_echoed(server_binary: ServerBinary) -> None:
    with dedicated_server(server_binary, password="right-one") as server:
        url = f"redis://:wrong-one@127.0.0.1:{server.port}/0"
        done = run_wheelq("stats", "--redis-url", url)
    line = assert_one_line_error(
        done, 1, f"Redis at redis://:***@127.0.0.1:{server.port}/0 refused the credentials"
    )
    assert "wrong-one" not in line


@pytest.mark.parametrize(
    "password",
    [
        "p@55:w0rd/x",  # the port would be read as 'w0rd'
        "p@ss/word",  # the host would be read as 'ss' and the rest as the path
        "p@ss#word",  # the host would be read as 'ss' and the rest as a fragment
    ],
)
def test_an_unencoded_at_in_a_password_is_explained(password: str) -> None:
    port = free_port()
    done = run_wheelq("stats", "--redis-url", f"redis://:{password}@127.0.0.1:{port}/0")
    line = assert_one_line_error(done, 2, "must be percent-encoded (@ as %40")
    assert password not in line


def test_dlq_list_into_a_closed_pipe_exits_quietly(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, 1)
        client.redis.xadd(
            ShardKeys(topic, 0).dead, {"id": "j", "reason": "failed", "error": "x" * 200}
        )
        assert admin.dead_letters(topic)[0].reason == "failed"
        for _ in range(299):
            client.redis.xadd(ShardKeys(topic, 0).dead, {"id": "j", "error": "x" * 200})
    # `wheelq dlq list T | head -0`: the reader is gone before the first line is written.
    proc = subprocess.Popen(
        wheelq_argv("dlq", "list", topic, "--limit", "300", "--redis-url", redis_url),
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert err == "", err
    assert proc.returncode == 141
