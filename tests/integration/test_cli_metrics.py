"""`--metrics-host` of `wheelq worker` and `wheelq scheduler`, as a user runs them: the
metrics listen on the address given (flag, variable or file) and on no other, the log
names the address bound, and one that cannot be bound is one line."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, run_wheelq, start_wheelq, stop
from tests.support.servers import free_port
from tests.support.waiting import eventually_sync


def _scrapes(url_host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url_host}:{port}/metrics", timeout=2) as reply:
            return b"wheelq_part_up" in reply.read()
    except OSError:
        return False


def _accepts(host: str, port: int) -> bool:
    """Whether something accepts a TCP connection on (host, port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.settimeout(2)
        return probe.connect_ex((host, port)) == 0


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def _worker(
    tmp_path: Path,
    redis_url: str,
    topic: str,
    port: int,
    *more: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    (tmp_path / "handlers.py").write_text("def handle(job):\n    pass\n")
    return start_wheelq(
        "worker", "handlers:handle", "--topic", topic, "--redis-url", redis_url,
        "--metrics-port", str(port), *more, cwd=tmp_path, env=env,
    )  # fmt: skip


def _serving(
    proc: subprocess.Popen[str], url_host: str, port: int, not_on: str | None = None
) -> str:
    """Wait until the metrics answer on (url_host, port), check that nothing accepts a
    connection on (not_on, port), stop the process (SIGTERM); returns what it logged."""
    try:
        eventually_sync(lambda: _scrapes(url_host, port), timeout_s=30, what="the metrics")
        if not_on is not None:
            assert not _accepts(not_on, port)
    finally:
        _, err = stop(proc)
    assert proc.returncode == 0, err
    return err


def test_metrics_host_loopback_listens_there_and_nowhere_else(
    tmp_path: Path, redis_url: str, topic: str
) -> None:
    port = free_port()
    proc = _worker(tmp_path, redis_url, topic, port, "--metrics-host", "127.0.0.1")
    # 127.0.0.2 is this machine too (all of 127/8 is loopback): a socket bound to every
    # interface answers there, one bound to 127.0.0.1 does not.
    err = _serving(proc, "127.0.0.1", port, not_on="127.0.0.2")
    assert f"serving metrics on http://127.0.0.1:{port}/metrics\n" in err
    assert "every interface" not in err


def test_without_metrics_host_every_interface_listens_and_the_log_says_so(
    tmp_path: Path, redis_url: str, topic: str
) -> None:
    port = free_port()
    err = _serving(_worker(tmp_path, redis_url, topic, port), "127.0.0.2", port)
    assert f"serving metrics on http://0.0.0.0:{port}/metrics (every interface; " in err
    assert "--metrics-host narrows it" in err


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
@pytest.mark.parametrize("given", ["::1", "[::1]"])
def test_an_ipv6_metrics_host_is_accepted(
    tmp_path: Path, redis_url: str, topic: str, given: str
) -> None:
    port = free_port()
    proc = _worker(tmp_path, redis_url, topic, port, "--metrics-host", given)
    err = _serving(proc, "[::1]", port, not_on="127.0.0.1")
    assert f"serving metrics on http://[::1]:{port}/metrics\n" in err


def test_a_host_name_from_the_environment_is_resolved_and_logged(
    tmp_path: Path, redis_url: str, topic: str
) -> None:
    port = free_port()
    proc = _worker(
        tmp_path, redis_url, topic, port, env={"WHEELQ_WORKER_METRICS_HOST": "localhost"}
    )
    resolved = socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)[0][4][0]
    url_host = f"[{resolved}]" if ":" in resolved else resolved
    err = _serving(proc, url_host, port)
    assert f"serving metrics on http://{url_host}:{port}/metrics\n" in err


def test_the_schedulers_metrics_host_comes_from_the_config_file(
    tmp_path: Path, redis_url: str
) -> None:
    port = free_port()
    config = tmp_path / "wheelq.toml"
    config.write_text(f'[scheduler]\nmetrics_port = {port}\nmetrics_host = "127.0.0.1"\n')
    proc = start_wheelq("scheduler", "--redis-url", redis_url, "--config", str(config))
    err = _serving(proc, "127.0.0.1", port, not_on="127.0.0.2")
    assert f"serving metrics on http://127.0.0.1:{port}/metrics\n" in err


@pytest.mark.parametrize(
    ("host", "fragment"),
    [
        ("192.0.2.1", "metrics: cannot listen on 192.0.2.1 port "),  # TEST-NET-1: not ours
        ("no-such-host.invalid", "metrics: cannot listen on no-such-host.invalid port "),
    ],
)
def test_a_metrics_host_that_cannot_be_bound_is_one_line(
    tmp_path: Path, redis_url: str, topic: str, host: str, fragment: str
) -> None:
    (tmp_path / "handlers.py").write_text("def handle(job):\n    pass\n")
    done = run_wheelq(
        "worker", "handlers:handle", "--topic", topic, "--redis-url", redis_url,
        "--metrics-port", str(free_port()), "--metrics-host", host, cwd=tmp_path,
    )  # fmt: skip
    assert_one_line_error(done, 1, "wheelq worker: ", fragment)


def test_an_empty_metrics_host_is_a_usage_error(tmp_path: Path, redis_url: str, topic: str) -> None:
    (tmp_path / "handlers.py").write_text("def handle(job):\n    pass\n")
    done = run_wheelq(
        "worker", "handlers:handle", "--topic", topic, "--redis-url", redis_url,
        "--metrics-port", str(free_port()), "--metrics-host", "", cwd=tmp_path,
    )  # fmt: skip
    assert_one_line_error(done, 2, "metrics_host must be an address or host name, got ''")


@pytest.mark.parametrize("role", ["worker", "scheduler"])
def test_a_metrics_port_taken_is_one_line_naming_the_option(
    tmp_path: Path, redis_url: str, topic: str, role: str
) -> None:
    """Issue 43: it said "[Errno 98] ... Address already in use" and no way out."""
    (tmp_path / "handlers.py").write_text("def handle(job):\n    pass\n")
    given = ["handlers:handle", "--topic", topic] if role == "worker" else ["--topics", topic]
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_wheelq(
            role, *given, "--redis-url", redis_url, "--metrics-port", str(port), cwd=tmp_path
        )
    assert_one_line_error(done, 1, f"wheelq {role}: ", "(pick another port with --metrics-port)")
    assert "Errno" not in done.stderr, done.stderr
