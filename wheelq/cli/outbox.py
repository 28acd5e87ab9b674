"""`wheelq outbox init` (the tables, or their SQL) and `wheelq relay` (committed outbox rows
into Redis until SIGINT/SIGTERM); `relay_beside` runs a relay in a scheduler's process
(docs/guides/outbox.md).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import CliError, Context, usage_error
from wheelq.cli.metrics import metrics_beside, metrics_flag, metrics_given, pop_metrics
from wheelq.cli.signals import SignalStop

if TYPE_CHECKING:
    from wheelq.outbox.relay import Relay

log = logging.getLogger(__name__)

MISSING_DRIVER = (
    "the outbox needs psycopg: pip install 'wheelq[postgres]' (or psycopg[binary] >= 3.1)"
)


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    dsn = "the PostgreSQL, postgresql://user:password@host:5432/db (default: [relay] dsn)"
    p = sub.add_parser("outbox", parents=parents, help="the PostgreSQL outbox's tables")
    actions = p.add_subparsers(dest="action", required=True)
    init = actions.add_parser(
        "init",
        parents=parents,
        help="create the outbox's tables and trigger (again: changes nothing)",
    )
    init.add_argument("--dsn", help=dsn)
    init.add_argument(
        "--sql", action="store_true", help="print the SQL instead, for a migration tool"
    )
    init.set_defaults(func=init_tables)

    p = sub.add_parser(
        "relay",
        parents=parents,
        help="move committed outbox rows into Redis until SIGINT/SIGTERM",
    )
    add_relay_flags(p, dsn)
    p.set_defaults(func=relay)


def add_relay_flags(p: argparse.ArgumentParser, dsn_help: str) -> None:
    """The flags of running a relay: `wheelq relay`'s and ``manage.py wheelq relay``'s
    (`relay_given` reads them)."""
    p.add_argument("--dsn", help=dsn_help)
    p.add_argument(
        "--ack",
        choices=["primary", "replicated", "persisted"],
        help="what Redis confirms before rows are deleted (default primary)",
    )
    metrics_flag(p)


def relay_given(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[relay]`` settings `add_relay_flags`' flags give (None: not given)."""
    return {"dsn": args.dsn, "ack": args.ack, **metrics_given(args)}


def init_tables(ctx: Context) -> int:
    outbox = _outbox()
    if ctx.args.sql:
        sys.stdout.write(outbox.schema_sql())
        return 0
    dsn = _dsn(ctx.section("relay", dsn=ctx.args.dsn))
    outbox.install(dsn)
    print(f"outbox tables ready in {_shown(dsn)}: {', '.join(outbox.TABLES)}")
    return 0


def relay(ctx: Context) -> int:
    values = ctx.section("relay", **relay_given(ctx.args))
    return serve_relay(ctx.redis_url(), ctx.section("client"), values)


def serve_relay(url: str, client_options: dict[str, Any], values: dict[str, Any]) -> int:
    """Run a relay of the ``[relay]`` settings `values` into the Redis of `url` (a client
    of `client_options`) until SIGINT/SIGTERM: `wheelq relay` and ``manage.py wheelq
    relay``. Exits 1 when rows failed to relay."""
    metrics = pop_metrics(values)
    node = relay_for(url, client_options, values)
    dsn = node.dsn

    async def main() -> int:
        try:
            await node.check()  # a wrong DSN or missing tables: one line, exit 1
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            async def stop() -> None:
                await node.stop()
                if not done.done():
                    done.set_result(None)

            SignalStop(stop, lambda: None, log).install()
            beside = metrics_beside(node.client, "relay", *metrics, also=(node,))
            async with beside() if beside is not None else AsyncExitStack():
                await node.start()
                log.info("relaying the outbox of %s into %s", _shown(dsn), _shown_url(url))
                await done
            return 0 if node.failures == 0 else 1
        finally:
            await node.client.aclose()

    return asyncio.run(main())


def relay_for(url: str, client_options: dict[str, Any], values: dict[str, Any]) -> Relay:
    """A relay of the ``[relay]`` settings `values` (its ``dsn`` among them) placing jobs in
    the Redis of `url` through a client of its own (`client_options`); exit 2 for a bad
    setting or a missing driver."""
    outbox = _outbox()
    from wheelq.producer.async_client import AsyncClient

    dsn, ack, settings = _relay_settings(values)
    client = AsyncClient.from_url(url, **client_options)
    relay: Relay = outbox.Relay(client, dsn, settings, ack=ack)
    return relay


def relay_beside(ctx: Context, url: str) -> Relay | None:
    """The relay ``[relay] dsn`` asks a scheduler's process to run (None: not asked),
    placing jobs in the Redis of `url` with the ``[client]`` settings."""
    values = ctx.section("relay")
    for key in ("metrics_port", "metrics_host"):
        values.pop(key, None)  # the scheduler's own metrics serve the relay's too
    if not values.get("dsn"):
        return None
    return relay_for(url, ctx.section("client"), values)


def running_beside(
    relay: Relay | None,
    other: Callable[[], AbstractAsyncContextManager[object]] | None,
) -> Callable[[], AbstractAsyncContextManager[object]] | None:
    """`other` (the metrics) with `relay` started first and stopped last, checked before."""
    if relay is None:
        return other

    @asynccontextmanager
    async def both() -> AsyncIterator[object]:
        async with AsyncExitStack() as stack:
            await relay.check()
            await relay.start()
            stack.push_async_callback(relay.client.aclose)
            stack.push_async_callback(relay.stop)
            if other is not None:
                await stack.enter_async_context(other())
            yield relay

    return both


def _relay_settings(values: dict[str, Any]) -> tuple[str, str | None, Any]:
    from wheelq.core.settings import RelaySettings
    from wheelq.errors import InvalidArgumentError

    dsn = _dsn(values)
    ack = values.pop("ack", None)
    if ack is not None and ack not in ("primary", "replicated", "persisted"):
        raise usage_error(f"[relay] ack must be primary, replicated or persisted, got {ack!r}")
    rest = {k: v for k, v in values.items() if k not in ("dsn", "metrics_port", "metrics_host")}
    try:
        return dsn, ack, RelaySettings.from_kwargs(rest)
    except InvalidArgumentError as exc:
        raise usage_error(f"[relay] {exc}") from None


def _dsn(values: dict[str, Any]) -> str:
    dsn = values.get("dsn")
    if isinstance(dsn, str) and not dsn.strip():
        dsn = None  # libpq reads a blank DSN as "every default": never meant, never taken
    if not dsn:
        raise usage_error("--dsn (or WHEELQ_RELAY_DSN, or [relay] dsn) is required")
    if not isinstance(dsn, str):
        raise usage_error(f"[relay] dsn must be a string, got {type(dsn).__name__}")
    return dsn


def _outbox() -> Any:
    """`wheelq.outbox`, or exit 2 saying how to install its driver."""
    import importlib.util

    import wheelq.outbox

    if importlib.util.find_spec("psycopg") is None:
        raise CliError(MISSING_DRIVER, code=2)
    return wheelq.outbox


def _shown(dsn: str) -> str:
    from wheelq.outbox.relay import redacted

    return redacted(dsn)


def _shown_url(url: str) -> str:
    from wheelq.cli.context import redacted

    return redacted(url)
