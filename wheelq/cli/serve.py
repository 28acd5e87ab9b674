"""`wheelq serve` (the HTTP API, pull consumers, metrics, dashboard and callbacks, on
uvicorn; loopback only without tokens) and `wheelq deliver` (callback delivery alone).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from wheelq.cli.context import Context, check_free, split_topics, usage_error
from wheelq.cli.signals import settle_heap

log = logging.getLogger(__name__)

HTTP_EXTRA = frozenset(
    {"aiohttp", "fastapi", "fastapi_offline", "httptools", "jinja2", "multipart",
     "python_multipart", "starlette", "uvicorn", "uvloop"}
)  # fmt: skip
"""The modules of the ``http`` extra (pyproject.toml) and of what it pulls in."""
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        parents=parents,
        help="run the HTTP API, pull consumers, callbacks and the dashboard",
    )
    p.add_argument("--host", help="address to bind (default 127.0.0.1; others need tokens)")
    p.add_argument("--port", type=int, help="TCP port (default 8080)")
    p.add_argument(
        "--deliver",
        help=(
            "topics whose callbacks to deliver, comma-separated, or 'none' (default: every "
            "topic that has had a job with a callback)"
        ),
    )
    p.add_argument(
        "--prometheus-url",
        help=(
            "a Prometheus that scrapes the roles (http://prometheus:9090): the dashboard's "
            "charts come from it (default: from the service's own samples, since it started)"
        ),
    )
    p.set_defaults(func=serve)

    p = sub.add_parser(
        "deliver", parents=parents, help="POST a topic's due jobs to their callback URLs"
    )
    p.add_argument(
        "--topic",
        required=True,
        help=(
            "the topic whose callbacks to deliver: each of its jobs enqueued with a "
            "callback URL is POSTed there when due (group 'callbacks', or [callbacks] group)"
        ),
    )
    p.set_defaults(func=deliver)


def _bool(value: object, source: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise usage_error(f"{source} must be true or false, got {value!r}")


def _http_url(value: object, source: str) -> str:
    """An http(s) URL with a host ('' for none given)."""
    from urllib.parse import urlsplit

    text = str(value or "").strip()
    if text:
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise usage_error(
                f"{source} must be an http(s) URL like http://host:9090, got {text!r}"
            )
    return text


def callback_options(ctx: Context) -> tuple[Any, str, bool, str]:
    """The ``[callbacks]`` section: (settings, signing secret, allow_private, group). Without
    a secret, each topic whose callbacks this process delivers is warned about once its
    delivery starts (`wheelq.callbacks.delivery.delivery_worker`), not at start."""
    from wheelq.core.settings import CallbackSettings

    values = ctx.section("callbacks")
    secret = str(values.pop("signing_secret", "") or "")
    allow = _bool(values.pop("allow_private", False), "[callbacks] allow_private")
    group = str(values.pop("group", "") or "callbacks")
    return CallbackSettings.from_kwargs(values), secret, allow, group


@contextmanager
def http_extra() -> Iterator[None]:
    """Imports that need the ``http`` extra: without it, a usage error naming the extra
    (exit 2) instead of a traceback."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in HTTP_EXTRA:
            raise
        raise usage_error(
            f"needs the http extra, which is not installed (no module {missing!r}): "
            "pip install 'wheelq[http]'"
        ) from None


def serve(ctx: Context) -> int:
    with http_extra():
        from wheelq.callbacks.deliverer import Deliverer
        from wheelq.callbacks.delivery import Deliveries
        from wheelq.cli import uvicorn_server
        from wheelq.web.app import create_app
        from wheelq.web.auth import host_names, parse_tokens
        from wheelq.web.service import WebService
    from wheelq.core.settings import ServeSettings, WorkerSettings
    from wheelq.producer.async_client import AsyncClient
    from wheelq.store import connect

    url, args = ctx.redis_url(), ctx.args
    values = ctx.section(
        "serve",
        host=args.host,
        port=args.port,
        deliver=args.deliver,
        prometheus_url=args.prometheus_url,
    )
    host = str(values.pop("host", None) or "127.0.0.1")
    tokens = parse_tokens(values.pop("tokens", []), "[serve] tokens")
    allowed_hosts = host_names(values.pop("allowed_hosts", []), "[serve] allowed_hosts")
    deliver = values.pop("deliver", None)
    receipt_secret = str(values.pop("receipt_secret", "") or "")
    prometheus_url = _http_url(values.pop("prometheus_url", None), "[serve] prometheus_url")
    settings = ServeSettings.from_kwargs(values)
    if not tokens and not _loopback(host):
        raise usage_error(
            f"--host {host} needs tokens: without [serve] tokens (WHEELQ_SERVE_TOKENS) "
            "the service binds to loopback only"
        )
    if settings.port:  # 0: any free one
        check_free(host, settings.port)
    topics = _deliver_topics(deliver)
    callbacks, secret, allow_private, group = callback_options(ctx)
    worker_settings = WorkerSettings.from_kwargs(_worker_values(ctx))
    client = AsyncClient.from_url(url, **ctx.section("client"))
    deliveries = None
    if topics != []:
        deliverer = Deliverer(callbacks, signing_secret=secret, allow_private=allow_private)
        deliveries = Deliveries(
            # a connection of their own: their blocking reads never take the API's
            connect.async_executor(url, {}, None),
            deliverer,
            worker_settings,
            topics,
            group=group,
            owns_connection=True,
        )
    service = WebService(
        client,
        settings=settings,
        worker_settings=worker_settings,
        tokens=tokens,
        deliveries=deliveries,
        allow_private=allow_private,
        receipt_secret=receipt_secret,
        allowed_hosts=allowed_hosts,
        prometheus_url=prometheus_url,
    )
    service.owns_client = True

    def listening(port: int) -> None:
        if not tokens:
            log.warning(
                "no tokens configured: anyone who can reach %s:%d may use the API "
                "(bound to loopback only; set [serve] tokens to bind elsewhere)",
                host,
                port,
            )
        log.info("serving on http://%s:%d (docs at /docs, dashboard at /ui)", host, port)

    level = logging.getLevelName(logging.getLogger().level).lower()
    config = uvicorn_server.config(create_app(service), host, settings, level)

    settle_heap()  # what is made now lives as long as the process (a third of a request's time)
    uvicorn_server.Server(config, service, listening).run()
    return 0


def deliver(ctx: Context) -> int:
    with http_extra():
        from wheelq.callbacks.deliverer import Deliverer
        from wheelq.callbacks.delivery import delivery_worker
    from wheelq.cli.services import run_worker
    from wheelq.core.settings import WorkerSettings
    from wheelq.store import connect

    url = ctx.redis_url()
    callbacks, secret, allow_private, group = callback_options(ctx)
    deliverer = Deliverer(callbacks, signing_secret=secret, allow_private=allow_private)
    settings = WorkerSettings.from_kwargs(_worker_values(ctx))
    executor = connect.async_executor(url, {}, None)
    worker = delivery_worker(executor, ctx.args.topic, deliverer, settings, group=group)
    worker.owns_connection = True
    report = run_worker(worker, lambda: deliverer)  # its connections close after the worker
    return 0 if report.abandoned == 0 else 1


def _worker_values(ctx: Context) -> dict[str, Any]:
    values = ctx.section("worker")
    for key in ("group", "start", "metrics_port", "metrics_host"):
        values.pop(key, None)
    return values


def _deliver_topics(value: object) -> list[str] | None:
    """None: every topic; []: none; else the topics named."""
    if value is None or value in ("*", "all"):
        return None
    if isinstance(value, str) and value.strip().lower() in ("none", "off", ""):
        return []
    return split_topics(value, "--deliver")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
