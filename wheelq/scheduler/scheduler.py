"""A scheduler node (docs/architecture.md, "Leases and failover")."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from redis.exceptions import RedisError

from wheelq.core.keys import topic_set
from wheelq.core.process import LeadInfo, RoleInfo, role_info
from wheelq.core.settings import SchedulerSettings
from wheelq.runtime.clock import ClockKeeper, RedisClock
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.role import Connection, Role, executor_of
from wheelq.runtime.service import Service
from wheelq.runtime.unled_watch import UnledWatch
from wheelq.scheduler.lease_keeper import LeaseKeeper
from wheelq.scheduler.led_shards import EventHook, Lead, Leads, NodeContext
from wheelq.scheduler.materializer import Materializer
from wheelq.scheduler.preloader import Preloader, WakeListener
from wheelq.scheduler.promoter import Promoter
from wheelq.scheduler.resolver import Resolver
from wheelq.scheduler.trimmer import Trimmer
from wheelq.scheduler.wheel_driver import WheelDriver
from wheelq.store import connect, leases, server

log = logging.getLogger(__name__)

CLOCK_SAMPLES_AT_START = 5


@dataclass(frozen=True, slots=True)
class StopReport:
    """What a stop did and left undone."""

    released_leases: int
    unfired_preloaded: int
    unreleased_leases: int = 0
    """Leases not released (Redis unreachable, or stop_timeout_ms ran out)."""


class Scheduler(Role[StopReport]):
    """A scheduler node: `serve()` runs it until `stop()`, `run()` blocks (CLI); one made by
    `from_url` owns its connection and closes it on `stop()`."""

    def __init__(
        self,
        connection: Connection,
        topics: str | Iterable[str] | None = None,
        settings: SchedulerSettings | None = None,
        *,
        node_id: str | None = None,
        on_event: EventHook | None = None,
        clock: RedisClock | None = None,
    ) -> None:
        self.settings = settings or SchedulerSettings()
        s = self.settings
        executor = executor_of(connection)
        super().__init__(executor, s.start_timeout_ms, s.stop_timeout_ms, log)
        self.topics = None if topics is None else topic_set(topics)
        self.node_id = node_id or new_node_id()
        self.clock = clock or RedisClock()
        self.leads = Leads(token=self.node_id)
        ctx = NodeContext(executor, self.clock, self.leads, self.settings, self._lost, on_event)
        self.node_metrics = ctx.metrics
        """What the node counts (fired, lease changes, fire lateness): `wheelq.metrics`."""
        pause_ms = self.settings.failure_pause_max_ms
        self._clock_keeper = ClockKeeper(
            executor, self.clock, self.settings.clock_sync_interval_ms, max_pause_ms=pause_ms
        )
        self.leases = LeaseKeeper(ctx, self.node_id, self.topics, self._leads_changed)
        self.driver = WheelDriver(ctx)
        self.resolver = Resolver(ctx)
        self._preloader = Preloader(ctx, self.driver, self.resolver.wake)
        self.driver.on_line = self._preloader.wake
        self._wake = WakeListener(
            executor,
            self.leads,
            self.driver,
            self.clock,
            max_pause_ms=pause_ms,
            on_follow=self._preloader.wake,
            on_notices=self.resolver.wake,
            mark=bool(self.settings.fast_failover),
        )
        self.trimmer = Trimmer(ctx)
        self.materializer = Materializer(ctx)
        self.promoter = Promoter(ctx)
        self.unled = UnledWatch(
            executor,
            self.clock,
            s.unled_check_ms,
            skip=lambda: self.leases.served,
            max_pause_ms=pause_ms,
        )
        """Which registered topics have unled shards (`wheelq.store.unled`), warned of."""

    @classmethod
    def from_url(
        cls,
        url: str,
        topics: str | Iterable[str] | None = None,
        *,
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
        node_id: str | None = None,
        on_event: EventHook | None = None,
        **settings: Any,
    ) -> Self:
        """A node for the Redis at `url`, leading `topics` (a name, names, or None: all). Its
        connections are named after it (`leases.node_client_name`), so other nodes can tell
        its process is alive while its liveness connection is gone (fast failover).

        Raises:
            InvalidTopicError: A topic name is not valid.
            InvalidArgumentError: Bad `topics` or `cluster`, or a setting unknown or out of range.
        """
        node_id = node_id or new_node_id()
        name = leases.node_client_name(node_id)
        node = cls(
            connect.async_executor(url, redis_options or {}, cluster, client_name=name),
            topics,
            SchedulerSettings.from_kwargs(settings),
            node_id=node_id,
            on_event=on_event,
        )
        node.owns_connection = True  # closed by stop()
        return node

    def _lost(self, lead: Lead) -> None:
        self.leases.drop(lead, "lost")

    def _leads_changed(self) -> None:
        self._preloader.wake()
        self._wake.wake()
        self.promoter.wake()
        self.resolver.wake()

    async def start(self) -> None:
        """Wait for Redis (`RedisUnavailableError` after ``start_timeout_ms``), start every part."""
        await self._start_through_gate(self._start)

    async def _start(self) -> None:
        for _ in range(CLOCK_SAMPLES_AT_START):
            await self._clock_keeper.sample()
        await warn_if_unsafe(self._executor)
        s = self.settings
        if s.wheel_size * s.tick_ms < s.window_ms:
            log.warning(
                "wheel_size x tick_ms (%d ms) < window_ms (%d ms): preloaded jobs will cascade "
                "from an overflow level, which adds lateness spikes under load",
                s.wheel_size * s.tick_ms,
                s.window_ms,
            )
        for part in self._parts():
            await part.start()
        await self._join_processes(self.process_role, s)
        log.info(
            "scheduler node %s started (clock offset error <= %.2f ms)",
            self.node_id,
            self.clock.error_bound_ms,
        )

    async def stop(self) -> StopReport:
        """Release every lease, stop every part, and report what was left undone; bounded by
        ``stop_timeout_ms`` even when Redis does not answer, and safe to call twice."""
        if not await self._gate.abort():
            return StopReport(0, 0)
        self._gate.started = False  # a second stop() returns at once
        budget = self._stop_budget()
        try:
            report = await self._stop(budget)
        finally:
            await self._stopped()
        budget.log_end(
            log,
            f"scheduler node {self.node_id} stopped: {report}",
            f"leases not released expire after lease_ttl_ms ({self.settings.lease_ttl_ms} ms), "
            "then other nodes take their shards",
        )
        return report

    async def _stop(self, budget: StopBudget) -> StopReport:
        await self.unled.stop(budget)  # before the release, which it would warn of
        await self.leases.stop(budget)
        held = len(self.leads)
        released = await budget.attempt(f"release {held} leases", self.leases.release_all, 0)
        for part in (
            self.resolver,
            self.promoter,
            self.materializer,
            self.trimmer,
            self._wake,
            self._preloader,
            self.driver,
            self._clock_keeper,
        ):
            await part.stop(budget)
        await self._leave_processes(budget)
        return StopReport(released, len(self.driver.wheel), held - released)

    def process_role(self) -> RoleInfo:
        """This node in its process's heartbeat record: its topics, the jobs it fired, and
        each led shard with how long it has led it and its lease's age."""
        now_ms = self.clock.now_ms()
        leads = sorted(self.leads.all(), key=lambda x: (x.keys.topic, x.keys.shard))
        fired = sum(n for (kind, _, _), n in self.node_metrics.counts.items() if kind == "emitted")
        return role_info(
            "scheduler",
            self.node_id,
            topics=self.leases.served,
            handled=fired,
            leads=[
                LeadInfo(
                    lead.keys.topic,
                    lead.keys.shard,
                    max(0, now_ms - lead.acquired_ms),
                    max(0, now_ms - lead.renewed_ms),
                )
                for lead in leads
            ],
        )

    def status(self) -> dict[str, Any]:
        """What this node leads and has done, for logs, health checks and dashboards."""
        return {
            "node_id": self.node_id,
            "leads": [
                {"topic": lead.keys.topic, "shard": lead.keys.shard, "emitted": lead.emitted}
                for lead in sorted(self.leads.all(), key=lambda x: (x.keys.topic, x.keys.shard))
            ],
            "preloaded": len(self.driver.wheel),
            "trimmed": self.trimmer.trimmed,
            "promoted": self.promoter.promoted,
            "notices_heard": self.resolver.heard,
            "released": self.resolver.released,
            "clock_error_bound_ms": round(self.clock.error_bound_ms, 3),
            "parts": {part.name: part.status() for part in self._parts()},
        }

    def _parts(self) -> tuple[Service, ...]:
        return (
            self._clock_keeper,
            self.driver,
            self._preloader,
            self._wake,
            self.leases,
            self.trimmer,
            self.materializer,
            self.promoter,
            self.resolver,
            self.unled,
        )


def new_node_id() -> str:
    """A node id unless one is given: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


async def warn_if_unsafe(connection: Connection) -> list[str]:
    """Log and return warnings about server settings that can lose jobs."""
    executor = executor_of(connection)
    try:
        aof, policy = await executor.run(
            [server.server_config("appendonly"), server.server_config("maxmemory-policy")]
        )
    except RedisError as exc:
        log.info("could not read the server's persistence settings (%s)", exc)
        return []
    warnings = []
    if aof.get("appendonly") != "yes":
        warnings.append(
            "appendonly is off: jobs written since the last snapshot are lost if Redis "
            "restarts; set appendonly yes (appendfsync everysec or always)"
        )
    policy_name = policy.get("maxmemory-policy", "noeviction")
    if policy_name != "noeviction":
        warnings.append(
            f"maxmemory-policy is {policy_name}: Redis may evict pending jobs under memory "
            "pressure; set maxmemory-policy noeviction"
        )
    for text in warnings:
        log.warning(text)
    return warnings
