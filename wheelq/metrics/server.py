"""Serving ``/metrics`` over HTTP (on a thread of its own) while a role runs."""

from __future__ import annotations

import ipaddress
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from wheelq.errors import InvalidArgumentError, int_in
from wheelq.metrics.collectors import MergedCollector, Observed, ShardGauges, collectors_for
from wheelq.runtime.service import Lifecycle

EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 (an exporter's usual bind; see MetricsServer)


class MetricsServer(Lifecycle):
    """``/metrics`` of `roles` on `port` (0: a free one) and `host` (default every IPv4
    interface, as exporters do); ``async with`` it in the role's event loop."""

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
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

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
        for gauges in self._gauges:
            await gauges.start()
        try:
            self._server, self._thread = start_http_server(
                self._want_port, self._host, registry=self.registry
            )
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
        await self._stop_gauges()

    async def _stop_gauges(self) -> None:
        for gauges in self._gauges:
            await gauges.stop()
