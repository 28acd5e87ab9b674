"""The dashboard's charts from Prometheus (``[serve] prometheus_url``): its range-query API
over the metrics the roles export, with the expressions config/grafana-dashboard.json
uses (a test holds the two to the same expressions), for one topic or every topic.

A query that fails or times out leaves its chart empty and says why; a page never waits
more than `TIMEOUT_S` for Prometheus.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import aiohttp

from wheelq.web.charts import Chart, Series

TIMEOUT_S = 3.0
POINTS = 120
"""Points a chart's series asks for (the range query's step is the range over this)."""

TOPIC = "$topic"
"""Where an expression names the topic (Grafana's variable): `expression` fills it in."""


@dataclass(frozen=True, slots=True)
class Query:
    label: str
    expr: str
    scale: float = 1.0
    """Seconds to the chart's unit (1000: ms)."""


CHARTS: dict[str, tuple[str, str, tuple[Query, ...]]] = {
    "throughput": (
        "Fired, handled, retried, dead-lettered",
        "jobs/s",
        (
            Query("fired/s", 'sum(rate(wheelq_scheduler_fired_total{topic=~"$topic"}[1m]))'),
            Query("handled/s", 'sum(rate(wheelq_worker_handled_total{topic=~"$topic"}[1m]))'),
            Query("retried/s", 'sum(rate(wheelq_worker_retried_total{topic=~"$topic"}[1m]))'),
            Query(
                "dead-lettered/s",
                'sum(rate(wheelq_worker_dead_lettered_total{topic=~"$topic"}[1m]))',
            ),
        ),
    ),
    "lateness": (
        "Fire and handler-start lateness (p50, p99)",
        "ms",
        tuple(
            Query(
                f"{what} p{percent}",
                f'histogram_quantile({q}, sum by (le) (rate({metric}{{topic=~"$topic"}}[5m])))',
                1000.0,
            )
            for what, metric in (
                ("fire", "wheelq_scheduler_fire_lateness_seconds_bucket"),
                ("start", "wheelq_worker_handler_start_lateness_seconds_bucket"),
            )
            for percent, q in (("50", "0.5"), ("99", "0.99"))
        ),
    ),
    "backlog": (
        "Backlog",
        "jobs",
        (
            Query("pending", 'sum(wheelq_pending_jobs{topic=~"$topic"})'),
            Query(
                "ready",
                'max(sum by (topic, group) (wheelq_ready_entries{topic=~"$topic"}))',
            ),
            Query(
                "in flight",
                'sum(sum by (topic, group) (wheelq_in_flight_entries{topic=~"$topic"}))',
            ),
        ),
    ),
}
"""The charts, by key: title, unit, and one query per series."""


def expression(expr: str, topic: str | None) -> str:
    """`expr` for one topic (a name of [A-Za-z0-9_.-]: its dots escaped for the regex
    match), or for every topic."""
    return expr.replace(TOPIC, ".+" if topic is None else topic.replace(".", "\\\\."))


class PrometheusCharts:
    """Charts read from a Prometheus at `url` (its HTTP API, ``/api/v1/query_range``)."""

    since_ms: int | None = None

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def charts(self, topic: str | None, start_ms: int, end_ms: int) -> list[Chart]:
        """Every chart of `CHARTS` for `topic` (None: all topics) over the range."""
        step_s = max(1.0, (end_ms - start_ms) / 1000 / POINTS)
        asked = [(key, q) for key, (_, _, queries) in CHARTS.items() for q in queries]
        got = await asyncio.gather(  # all at once: a page waits `TIMEOUT_S` at most
            *(self._series(q, topic, start_ms, end_ms, step_s) for _, q in asked)
        )
        out = []
        for key, (title, unit, _) in CHARTS.items():
            mine = [answer for (k, _), answer in zip(asked, got, strict=True) if k == key]
            problem = "; ".join(sorted({why for _, why in mine if why}))
            out.append(Chart(key, title, unit, start_ms, end_ms, [s for s, _ in mine], problem))
        return out

    async def _series(
        self, query: Query, topic: str | None, start_ms: int, end_ms: int, step_s: float
    ) -> tuple[Series, str]:
        params = {
            "query": expression(query.expr, topic),
            "start": f"{start_ms / 1000:.3f}",
            "end": f"{end_ms / 1000:.3f}",
            "step": f"{step_s:.3f}",
        }
        try:
            body = await self._get("/api/v1/query_range", params)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return Series(query.label, []), f"Prometheus did not answer ({exc!s:.80})"
        if body.get("status") != "success":
            return Series(query.label, []), f"Prometheus refused a query: {body.get('error', '?')}"
        result = body.get("data", {}).get("result", [])
        points: list[tuple[int, float | None]] = []
        for ts, value in result[0].get("values", []) if result else []:
            number = float(value)
            scaled = number * query.scale if math.isfinite(number) else None
            points.append((int(float(ts) * 1000), scaled))
        return Series(query.label, points), ""

    async def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
            self._session = aiohttp.ClientSession(timeout=timeout)
        async with self._session.get(self.url + path, params=params) as response:
            try:
                body: dict[str, Any] = await response.json(content_type=None)
            except ValueError:  # not JSON: e.g. 503 "Service Unavailable" while it starts
                raise ValueError(f"HTTP {response.status}") from None
            return body

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
