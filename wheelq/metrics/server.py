"""Serving ``/metrics``, ``/healthz`` and ``/readyz`` over HTTP (on a thread of its own)
while a role runs: what Prometheus scrapes and what a container's probes ask
(docs/operations/monitoring.md, "Health checks")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import json
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from wheelq.errors import InvalidArgumentError, int_in
from wheelq.metrics.collectors import MergedCollector, Observed, ShardGauges, collectors_for
from wheelq.outbox.relay import Relay
from wheelq.producer.client import Client
from wheelq.runtime.role import Role
from wheelq.runtime.service import Lifecycle
from wheelq.store import server as redis_server
from wheelq.store.executor import AsyncExecutor

EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 (an exporter's usual bind; see MetricsServer)
READY_PING_S = 1.0
"""How long ``/readyz`` waits for Redis to answer PING: within a probe's usual 1-3 s."""
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class MetricsServer(Lifecycle):
    """``/metrics`` of `roles` on `port` (0: a free one) and `host` (default every IPv4
    interface, as exporters do); ``async with`` it in the role's event loop.

    Beside the metrics it answers ``GET /healthz`` with 200 while the process serves (it
    asks nothing of Redis), and ``GET /readyz`` with 200 when every role has started and
    not begun to stop (a relay: its loop runs) and Redis answers PING within
    `READY_PING_S`, else 503: a container's liveness and readiness probes.
    """

    def __init__(self, *roles: Observed, port: int, host: str = EVERY_INTERFACE) -> None:
        int_in("port", port, 0, 65535)
        if not isinstance(host, str) or not host.strip("[] "):
            raise InvalidArgumentError(
                "host", f"host must be an address or host name to listen on, got {host!r}"
            )
        self.registry = CollectorRegistry(auto_describe=False)
        pairs = collectors_for(roles)
        # one collector: roles in one process (a node and a worker) name some families alike
        self.registry.register(MergedCollector([collector for collector, _ in pairs]))
        self._gauges: list[ShardGauges] = [gauges for _, gauges in pairs if gauges is not None]
        self._host = host.strip().removeprefix("[").removesuffix("]")  # [::1] as in a URL
        self._want_port = port
        self._roles = roles
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # A Client's blocking PING runs on a thread of this pool, so a probe waits
        # READY_PING_S at most; while one still waits, probes wait for it, not for another
        # (a flood of probes while Redis hangs starts one PING a connection).
        self._blocking: concurrent.futures.ThreadPoolExecutor | None = None
        self._pinging: dict[int, concurrent.futures.Future[object]] = {}
        self._pinging_lock = threading.Lock()

    @property
    def port(self) -> int:
        """The port it listens on (the free one picked for 0); 0 before `start()`."""
        return 0 if self._server is None else int(self._server.server_port)

    @property
    def url(self) -> str:
        """``http://ADDRESS:PORT/metrics`` as bound; "" before `start()`."""
        if self._server is None:
            return ""
        address = str(self._server.server_address[0])
        shown = f"[{address}]" if ":" in address else address
        return f"http://{shown}:{self.port}/metrics"

    @property
    def every_interface(self) -> bool:
        """Whether it listens on every interface (``0.0.0.0`` or ``::``), once started."""
        if self._server is None:
            return False
        return ipaddress.ip_address(str(self._server.server_address[0])).is_unspecified

    async def start(self) -> None:
        """Start the shard gauges' part and the HTTP server."""
        self._loop = asyncio.get_running_loop()
        self._blocking = concurrent.futures.ThreadPoolExecutor(4, "wheelq-readyz")
        for gauges in self._gauges:
            await gauges.start()
        try:
            self._server, self._thread = _serve(self._host, self._want_port, self._app())
        except OSError as exc:
            await self._stop_gauges()
            why = exc.strerror or str(exc)
            raise OSError(
                exc.errno, f"metrics: cannot listen on {self._host} port {self._want_port}: {why}"
            ) from exc
        except BaseException:
            await self._stop_gauges()
            raise

    async def stop(self) -> None:
        """Stop serving (socket closed, thread joined) and stop the gauges' part."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()
        if self._blocking is not None:  # a PING still hung ends with its socket's timeout
            self._blocking.shutdown(wait=False, cancel_futures=True)
            self._blocking = None
        await self._stop_gauges()

    async def _stop_gauges(self) -> None:
        for gauges in self._gauges:
            await gauges.stop()

    def readiness(self) -> tuple[bool, str]:
        """Whether the roles are ready, and why not; asks Redis for PING (call it from
        another thread than the roles' loop, as the HTTP server's threads do)."""
        for role in self._roles:
            if isinstance(role, Role) and not role.ready:
                name = type(role).__name__.lower()
                if (why := role.waiting_for_redis) is not None:
                    return False, f"{name} starting: waiting for redis ({why})"
                return False, f"{name} not started, or stopping"
            if isinstance(role, Relay) and not (role.running and not role.stopping):
                return False, "relay not running"
        pings: dict[int, Callable[[], object]] = {}  # one per connection the roles share
        for role in self._roles:
            connection, ping = self._ping_of(role)
            pings.setdefault(id(connection), ping)
        try:
            for ping in pings.values():
                ping()
        except Exception as exc:  # any failure is an answer: not ready, and why
            return False, f"redis did not answer PING: {type(exc).__name__}: {exc}"
        return True, "ready"

    def _ping_of(self, role: Observed) -> tuple[object, Callable[[], object]]:
        """`role`'s connection, and a PING through it waited for at most `READY_PING_S`."""
        if isinstance(role, Client):
            connection = role.redis
            return connection, lambda: self._off_thread(id(connection), connection.ping)
        executor = role.client.executor if isinstance(role, Relay) else role.executor
        return executor, lambda: self._on_loop(executor)

    def _off_thread(self, connection: int, ping: Callable[[], object]) -> object:
        """A blocking `ping` of `connection` on a thread of the pool, or the one of it that
        still waits, waited for at most `READY_PING_S`."""
        with self._pinging_lock:
            pool, waiting = self._blocking, self._pinging.get(connection)
            if pool is None:
                raise ConnectionError("the metrics server is not running")
            if waiting is None or waiting.done():
                waiting = self._pinging[connection] = pool.submit(ping)
        try:
            return waiting.result(timeout=READY_PING_S)
        except concurrent.futures.TimeoutError:
            if not waiting.done():
                raise TimeoutError(f"no answer within {READY_PING_S:g} s") from None
            raise  # the PING's own timeout, as it came

    def _on_loop(self, executor: AsyncExecutor) -> object:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ConnectionError("the roles' event loop is not running")
        future = asyncio.run_coroutine_threadsafe(executor.run([redis_server.ping()]), loop)
        try:
            return future.result(timeout=READY_PING_S)
        finally:
            future.cancel()  # a ping still waiting after READY_PING_S is not left behind

    def _app(self) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
        """The WSGI app: the two probes, and prometheus_client's for every other path."""
        metrics = make_wsgi_app(self.registry)

        def app(request: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = request.get("PATH_INFO", "")  # `request`: WSGI's environ dict
            if path not in ("/healthz", "/readyz"):
                return metrics(request, start_response)  # type: ignore[no-any-return]
            if request.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _answer(start_response, 405, {"status": "method not allowed"})
            if path == "/healthz":
                return _answer(start_response, 200, {"status": "ok"})
            ready, why = self.readiness()
            body = {"status": "ready"} if ready else {"status": "unavailable", "detail": why}
            return _answer(start_response, 200 if ready else 503, body)

        return app


_REASONS = {200: "OK", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _answer(start_response: StartResponse, status: int, body: dict[str, str]) -> list[bytes]:
    data = json.dumps(body).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    if status == 503:
        headers.append(("Retry-After", "1"))
    start_response(f"{status} {_REASONS[status]}", headers)
    return [data]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per request (a probe asks every few seconds)."""


def _serve(
    host: str, port: int, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
) -> tuple[WSGIServer, threading.Thread]:
    """`app` on (`host`, `port`) on a daemon thread, a thread per request, IPv4 or IPv6 as
    `host` resolves (prometheus_client's `start_http_server`, with our app)."""
    (family, *_), *_ = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True  # a probe's thread never holds the process at exit
        address_family = family

    server = make_server(host, port, app, Server, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
