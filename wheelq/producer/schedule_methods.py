"""The clients' methods for recurring schedules (`Client` and `AsyncClient` mix these in)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from wheelq.core.callback import Callback
from wheelq.core.due import At
from wheelq.core.recurring import Schedule
from wheelq.producer import schedules

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from wheelq.producer.operations import Op, Producer

T = TypeVar("T")
CallbackArg = Callback | str | Mapping[str, Any] | None
DEFAULT_CATCH_UP = 100


class ScheduleMethods:
    """`schedule`, `get_schedule`, `schedules`, `pause_schedule`, `resume_schedule` and
    `unschedule` on the blocking client."""

    _producer: Producer

    def _run(self, op: Op[T]) -> T:
        raise NotImplementedError

    def schedule(
        self,
        name: str,
        topic: str,
        payload: Any,
        *,
        cron: str | None = None,
        every_ms: int | None = None,
        tz: str = "UTC",
        start: At | None = None,
        end: At | None = None,
        misfire: str = "once",
        max_catch_up: int = DEFAULT_CATCH_UP,
        max_attempts: int | None = None,
        callback: CallbackArg = None,
    ) -> Schedule:
        """Create or update the recurring schedule `name` of `topic`; returns it.

        Each run is an ordinary job with the id ``<name>@<occurrence ms>``, written by a
        scheduler node shortly before it is due, so it fires on time and exists once,
        whatever nodes run or die. Calling it again with the same name updates the
        schedule from its first run not yet written (declare schedules at start-up).

        Args:
            name: 1-100 characters from [A-Za-z0-9_.:-], unique within the topic.
            topic: Where the runs are enqueued (created if new).
            payload: What every run carries (msgpack-serialisable).
            cron: Five cron fields, read in `tz` (``"30 2 * * *"``); or
            every_ms: an interval, 100 ms to 366 days: runs at ``start + k * every_ms``
                (from the Unix epoch without `start`).
            tz: IANA zone for `cron` ("Europe/Berlin"); spring forward runs a skipped
                time at the next valid one, fall back runs a repeated time once.
            start, end: No run before / after (epoch seconds or aware datetimes).
            misfire: Runs missed while no scheduler ran: "once" runs the latest of them
                now, "all" the latest `max_catch_up` in order, "skip" none.
            max_catch_up: 1-10,000 (for misfire="all").
            max_attempts, callback: As for `enqueue`, for every run.

        Raises:
            InvalidArgumentError: A parameter out of range (named in the message).
        """
        op = schedules.define(
            self._producer, name, topic, payload, cron=cron, every_ms=every_ms, tz=tz,
            start=start, end=end, misfire=misfire, max_catch_up=max_catch_up,
            max_attempts=max_attempts, callback=callback,
        )  # fmt: skip
        return self._run(op)[0]

    def get_schedule(self, name: str, topic: str) -> Schedule | None:
        """The schedule `name` of `topic`, None if there is none."""
        return self._run(schedules.get(self._producer, name, topic))

    def schedules(self, topic: str | None = None) -> list[Schedule]:
        """Every schedule (of `topic` when given), by topic and name."""
        return self._run(schedules.every(self._producer, topic))

    def pause_schedule(self, name: str, topic: str) -> bool:
        """Stop writing runs and cancel the ones written ahead; False if no such schedule."""
        return self._run(schedules.change(self._producer, name, topic, "pause"))

    def resume_schedule(self, name: str, topic: str) -> bool:
        """Run again from now on (runs that fell while paused are skipped)."""
        return self._run(schedules.change(self._producer, name, topic, "resume"))

    def unschedule(self, name: str, topic: str) -> bool:
        """Remove the schedule and cancel its runs written ahead; False if there was none."""
        return self._run(schedules.change(self._producer, name, topic, "remove"))


class AsyncScheduleMethods:
    """The same methods on `AsyncClient`, awaited (see `ScheduleMethods` for each)."""

    _producer: Producer

    def _run(self, op: Op[T]) -> Awaitable[T]:
        raise NotImplementedError

    async def schedule(
        self,
        name: str,
        topic: str,
        payload: Any,
        *,
        cron: str | None = None,
        every_ms: int | None = None,
        tz: str = "UTC",
        start: At | None = None,
        end: At | None = None,
        misfire: str = "once",
        max_catch_up: int = DEFAULT_CATCH_UP,
        max_attempts: int | None = None,
        callback: CallbackArg = None,
    ) -> Schedule:
        op = schedules.define(
            self._producer, name, topic, payload, cron=cron, every_ms=every_ms, tz=tz,
            start=start, end=end, misfire=misfire, max_catch_up=max_catch_up,
            max_attempts=max_attempts, callback=callback,
        )  # fmt: skip
        return (await self._run(op))[0]

    schedule.__doc__ = ScheduleMethods.schedule.__doc__

    async def get_schedule(self, name: str, topic: str) -> Schedule | None:
        return await self._run(schedules.get(self._producer, name, topic))

    async def schedules(self, topic: str | None = None) -> list[Schedule]:
        return await self._run(schedules.every(self._producer, topic))

    async def pause_schedule(self, name: str, topic: str) -> bool:
        return await self._run(schedules.change(self._producer, name, topic, "pause"))

    async def resume_schedule(self, name: str, topic: str) -> bool:
        return await self._run(schedules.change(self._producer, name, topic, "resume"))

    async def unschedule(self, name: str, topic: str) -> bool:
        return await self._run(schedules.change(self._producer, name, topic, "remove"))
