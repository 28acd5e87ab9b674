"""Serving ``/metrics`` over HTTP while a role runs, and stopping it with the role.

`MetricsServer` starts prometheus_client's HTTP server (a thread of its own: a scrape
never runs on the role's event loop) on a registry of its own, and for a scheduler
node the `ShardGauges` part on the node's loop. `stop()` shuts the server down,
closes its socket and joins its thread, so nothing is left running.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from wheelq.core.checks import int_in
from wheelq.metrics.registry import Observed, collectors_for
from wheelq.metrics.shard_gauges import ShardGauges
from wheelq.runtime.service import Lifecycle


class MetricsServer(Lifecycle):
    """``/metrics`` of `roles` on `port` (0: a free one, see `port` once started).

    Use ``async with MetricsServer(node, port=9100):`` in the role's event loop, or
    `start()` and `stop()`.

    Args:
        roles: The schedulers, workers and clients to export.
        port: TCP port, 0-65535 (0: any free port).
        host: Address to listen on (default every interface, as exporters do).

    Raises:
        InvalidArgumentError: `port` is not an int in [0, 65535].
    """

    def __init__(self, *roles: Observed, port: int, host: str = "0.0.0.0") -> None:  # noqa: S104
        int_in("port", port, 0, 65535)
        self.registry = CollectorRegistry(auto_describe=False)
        self._gauges: list[ShardGauges] = []
        for collector, gauges in collectors_for(roles):
            self.registry.register(collector)
            if gauges is not None:
                self._gauges.append(gauges)
        self._host = host
        self._want_port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on (the free one picked for 0); 0 before `start()`."""
        return 0 if self._server is None else int(self._server.server_port)

    async def start(self) -> None:
        """Start the shard gauges' part and the HTTP server.

        Raises:
            OSError: The port is taken (or not ours to bind).
        """
        for gauges in self._gauges:
            await gauges.start()
        try:
            self._server, self._thread = start_http_server(
                self._want_port, self._host, registry=self.registry
            )
        except BaseException:
            for gauges in self._gauges:
                await gauges.stop()
            raise

    async def stop(self) -> None:
        """Stop serving (socket closed, thread joined) and stop the gauges' part."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()
        for gauges in self._gauges:
            await gauges.stop()
