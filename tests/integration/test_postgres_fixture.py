"""The PostgreSQL fixtures: a database per test, real restarts, nothing left running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.child import ROOT
from tests.support.postgres import PostgresServer, _pid_alive, path_bin_dir
from tests.support.servers import PortGuard

_databases_seen: list[str] = []
"""The databases earlier tests of this module were given: each must be gone by now."""


def _public_tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return [row[0] for row in rows]


def _shared_memory_ids() -> set[str]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {line.split()[1] for line in lines}


@pytest.mark.parametrize("turn", ["first", "second"])
def test_each_test_gets_an_empty_database_of_its_own(
    turn: str, postgres: PostgresServer, postgres_dsn: str
) -> None:
    # Both turns write the same table: whichever runs second would see the other's
    assert _public_tables(postgres_dsn) == []
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TABLE marker (turn text)")
        conn.execute("INSERT INTO marker VALUES (%s)", (turn,))
    assert _public_tables(postgres_dsn) == ["marker"]
    with psycopg.connect(postgres.dsn) as conn:
        existing = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
    assert existing.isdisjoint(_databases_seen)  # dropped after their tests
    database = postgres_dsn.rpartition("/")[2]
    assert database in existing
    _databases_seen.append(database)


def test_server_listens_on_loopback_with_test_settings(postgres: PostgresServer) -> None:
    assert postgres.dsn == f"postgresql://wheelq@127.0.0.1:{postgres.port}/wheelq"
    with psycopg.connect(postgres.dsn) as conn:
        settings = dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall())
    assert settings["listen_addresses"] == "127.0.0.1"
    assert settings["unix_socket_directories"] == ""
    assert int(settings["port"]) == postgres.port != 5432
    assert int(settings["max_connections"]) >= 100
    assert (settings["fsync"], settings["synchronous_commit"]) == ("off", "on")


def test_restart_keeps_committed_data(dedicated_postgres: PostgresServer) -> None:
    server = dedicated_postgres
    before = server.pid
    port = server.port
    with psycopg.connect(server.dsn) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (1), (2)")
    old = psycopg.connect(server.dsn, autocommit=True)
    with old:
        server.restart()
        with pytest.raises(psycopg.OperationalError):
            old.execute("SELECT 1")  # the server it talked to is gone
    assert server.pid not in (None, before)
    assert server.port == port
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT n FROM kept ORDER BY n").fetchall() == [(1,), (2,)]


def test_kill_then_start_recovers_committed_data(dedicated_postgres: PostgresServer) -> None:
    server = dedicated_postgres
    with psycopg.connect(server.dsn) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (7)")
    pids = server.pids()
    assert len(pids) > 1  # the postmaster and its helpers
    server.kill()
    assert server.pid is None
    assert [pid for pid in pids if _pid_alive(pid)] == []
    server.start()
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT n FROM kept").fetchall() == [(7,)]


@pytest.mark.parametrize("crash", [False, True], ids=["running", "killed"])
def test_stop_leaves_no_process_and_no_data_dir(crash: bool) -> None:
    with PostgresServer() as server, psycopg.connect(server.dsn, autocommit=True) as conn:
        data_dir = server.data_dir
        conn.execute("SELECT 1")
        pids = server.pids()  # with this connection's backend
        assert len(pids) > 1
        # postmaster.pid's 7th line: the key and id of the System V segment it made
        shm_id = (data_dir / "postmaster.pid").read_text().splitlines()[6].split()[-1]
        assert shm_id in _shared_memory_ids()
        if crash:
            server.kill()
        server.stop()
    assert [pid for pid in pids if _pid_alive(pid)] == []
    assert not data_dir.exists()
    assert shm_id not in _shared_memory_ids()  # a killed server's too


_LEFT_RUNNING = """
import json
from tests.support.postgres import PostgresServer
server = PostgresServer()
server.start()
print(json.dumps({"pids": server.pids(), "dir": str(server.data_dir)}))
"""  # exits with the server running: its atexit hook must stop it


def test_interpreter_exit_stops_a_server_left_running() -> None:
    args = [sys.executable, "-c", _LEFT_RUNNING]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    left = json.loads(done.stdout)
    assert len(left["pids"]) > 1
    assert [pid for pid in left["pids"] if _pid_alive(pid)] == []
    assert not Path(left["dir"]).exists()


def test_libpq_defaults_never_reach_the_machines_server(port_guard: PortGuard) -> None:
    assert 5432 in port_guard.ports  # asyncpg and other pure-Python drivers
    with pytest.raises(psycopg.OperationalError, match="invalid port number"):
        psycopg.connect("dbname=postgres", connect_timeout=2)  # libpq's own sockets
    with pytest.raises(ValueError, match="port must not be"):
        PostgresServer(port=5432)


@pytest.mark.skipif(path_bin_dir() is None, reason="no initdb with postgres on PATH")
def test_binaries_on_path_serve_too() -> None:
    bin_dir = path_bin_dir()
    assert bin_dir is not None
    version = subprocess.run(
        [bin_dir / "postgres", "--version"], capture_output=True, text=True, check=True
    ).stdout  # "postgres (PostgreSQL) 15.20 (Debian ...)"
    major = int(version.split()[2].split(".")[0])
    with PostgresServer(bin_dir=bin_dir) as server, psycopg.connect(server.dsn) as conn:
        assert conn.info.server_version // 10000 == major  # those binaries, not the wheel's
