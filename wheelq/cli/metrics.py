"""Prometheus metrics beside a long-running role: the flags, the config keys and the
`MetricsServer` run on the role's loop (docs/guides/observability.md).
"""

from __future__ import annotations

import argparse
import errno
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

from wheelq.cli.context import CLI_RANGES, CliError, usage_error

if TYPE_CHECKING:
    from wheelq.metrics import MetricsServer

log = logging.getLogger(__name__)


def metrics_flag(p: argparse.ArgumentParser) -> None:
    port = "serve Prometheus metrics on http://HOST:PORT/metrics (default 0: off)"
    p.add_argument("--metrics-port", type=int, help=port)
    p.add_argument(
        "--metrics-host",
        help="address or host name the metrics listen on (default 0.0.0.0, every IPv4 "
        "interface, for a Prometheus on another host; 127.0.0.1: this machine only)",
    )


def metrics_given(args: argparse.Namespace) -> dict[str, Any]:
    return {"metrics_port": args.metrics_port, "metrics_host": args.metrics_host}


def pop_metrics(settings: dict[str, Any]) -> tuple[object, object]:
    return settings.pop("metrics_port", None), settings.pop("metrics_host", None)


def metrics_beside(
    node: Any, section: str, port: object, host: object, also: tuple[Any, ...] = ()
) -> Any:
    """The `MetricsServer` to run beside `node` and the parts `also` runs with it (a relay)
    (exit 2 on a bad port or host), or None."""
    port = port or 0
    CLI_RANGES["metrics_port"].check(f"[{section}] metrics_port", port)
    if not port:
        return None
    if host is not None and not (isinstance(host, str) and host.strip("[] ")):
        raise usage_error(f"[{section}] metrics_host must be an address or host name, got {host!r}")
    from wheelq.metrics import MetricsServer
    from wheelq.metrics.server import EVERY_INTERFACE

    @asynccontextmanager
    async def serving() -> AsyncIterator[MetricsServer]:
        port_ = cast(int, port)
        server = MetricsServer(node, *also, port=port_, host=host or EVERY_INTERFACE)
        try:
            await server.start()
        except OSError as exc:  # one line, no "[Errno 98]"; a taken port: say the way out
            taken = " (pick another port with --metrics-port)" * (exc.errno == errno.EADDRINUSE)
            raise CliError(f"{exc.strerror or exc}{taken}") from exc
        try:
            where = " (every interface; --metrics-host narrows it)" * server.every_interface
            log.info("serving metrics on %s%s", server.url, where)
            yield server
        finally:
            await server.stop()

    return serving
