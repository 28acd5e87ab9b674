"""The blocking management client, `Admin`: topics, consumer groups, pauses, job events,
dead letters, limits, schedules and stats. `AsyncAdmin` has the same methods, awaitable;
enqueueing and per-job calls are `Client`'s. Both drive the operations of
`wheelq.producer.operations` and the modules beside it (a test checks the four classes)."""

from __future__ import annotations

import weakref
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any, Self, Unpack

from wheelq.admin import bulk_actions, job_lists, pauses, processes, schedules
from wheelq.admin import dead_letters as dl
from wheelq.admin import events as job_events
from wheelq.admin import forecast as fc
from wheelq.admin import groups as grp
from wheelq.admin import line as due_line
from wheelq.admin.bulk_actions import Progress
from wheelq.admin.schedules import SyncReport
from wheelq.core.bulk_actions import BulkOutcome
from wheelq.core.due import At, shift_of
from wheelq.core.events import EventsConfig
from wheelq.core.flow import UNCHANGED, TopicLimits, Unchanged, validate_limits
from wheelq.core.forecast import WITHIN_S, Forecast
from wheelq.core.job_list import JobFilter, JobPage
from wheelq.core.line import LineView
from wheelq.core.options import RunOptions, takes
from wheelq.core.pause import PauseState
from wheelq.core.process import ProcessInfo
from wheelq.core.recurring import Schedule, interval_ms
from wheelq.core.settings import ClientSettings
from wheelq.producer.client import Client
from wheelq.producer.connected import Connected
from wheelq.producer.moved import admin_maker
from wheelq.producer.operations import TopicStats
from wheelq.store import connect

_OF: weakref.WeakKeyDictionary[Client, Admin] = weakref.WeakKeyDictionary()
"""Each client's admin (`Admin.of`), which lives as long as the client."""
DEFAULT_CATCH_UP = 100
EVENTS_MAX_LEN = EventsConfig().max_len
EVENTS_MAX_AGE_MS = EventsConfig().max_age_ms


class Admin(Connected):
    """Blocking management client; thread-safe. Make one with `from_url`, over a redis-py
    connection, or with `of` over a `Client`'s connections."""

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
        **settings: Any,
    ) -> Self:
        """Connect to `url`, as `Client.from_url` does (settings: fields of `ClientSettings`).

        Raises:
            InvalidArgumentError: A setting unknown or out of range, or `cluster` not a
                bool or None.
        """
        checked = ClientSettings.from_kwargs(settings)
        executor = connect.sync_executor(url, redis_options or {}, cluster)
        return cls(executor.client, checked)._over(executor)

    @classmethod
    def of(cls, client: Client) -> Admin:
        """The admin of `client`'s connections (its pool, its cluster client), so no second
        pool: closing the client closes it, and its own `close` does nothing."""
        admin = _OF.get(client)
        if admin is None:  # two threads may each make one: either serves
            admin = Admin._sharing(client)
            _OF[client] = admin
        return admin

    def create_topic(self, topic: str, shards: int | None = None) -> int:
        """Create a topic (idempotent); returns its shard count, fixed for the topic's life:
        at least as many as scheduler nodes you want busy (docs/guides/cluster.md).

        Raises:
            TopicConfigError: It exists with another shard count.
        """
        return self._run(self._producer.create_topic(topic, shards))

    def topics(self) -> dict[str, int]:
        """Every topic with its shard count (`TopicConfigError` for a bad registry entry)."""
        return self._run(self._producer.topics())

    def shards(self, topic: str) -> int | None:
        """The topic's shard count; None when there is no such topic (it creates none).
        Known once, it is not looked up again."""
        return self._run(self._producer.shard_count(topic, create=False))

    def drop_topic(self, topic: str, *, force: bool = False) -> bool:
        """Delete every key of a topic; False when it does not exist. Stop its workers first.

        Raises:
            TopicNotEmptyError: A job is pending or a ready entry unacked, and `force` is False.
        """
        return self._run(self._producer.drop_topic(topic, force))

    def groups(self, topic: str) -> list[grp.GroupStats] | None:
        """The topic's consumer groups, by stream then name: per group its consumers, entries
        in flight (delivered, not acked) and ready (fired, not yet delivered to it), in all
        and by shard; None for an unknown topic. A group of one name on every shard is one
        group; the ``ready`` and ``callbacks`` streams' groups are listed apart (`stream`)."""
        return self._run(grp.groups(self._producer, topic))

    def create_group(
        self, topic: str, group: str, *, start: str = "earliest", max_groups: int = grp.MAX_GROUPS
    ) -> grp.CreatedGroup:
        """Create a pull consumer's group `group` (1-200 printable characters) of an existing
        `topic` on every shard that lacks it (a worker creates its own).

        Args:
            start: ``"earliest"`` (every job still in the stream) or ``"now"``.
            max_groups: Most groups the topic's ``ready`` stream may have (1-10000).

        Raises:
            GroupNotFoundError: No such topic.
            GroupLimitError: The topic has `max_groups` groups already (nothing created).
        """
        return self._run(grp.create_group(self._producer, topic, group, start, max_groups))

    def delete_group(
        self, topic: str, group: str, *, stream: str = "ready", force: bool = False
    ) -> grp.DeletedGroup:
        """Delete consumer group `group` of `topic` on every shard that has it (its waiting
        retries still fire, and no group runs them). Stop its workers first.

        Args:
            stream: ``"ready"`` (the topic's groups) or ``"callbacks"`` (the deliverer's).
            force: Delete it with entries in flight (they are dropped for it).

        Raises:
            GroupNotFoundError: No shard of the topic has the group on `stream`.
            GroupBusyError: Entries are in flight and `force` is False.
        """
        return self._run(grp.delete_group(self._producer, topic, group, stream, force))

    def pause(self, topic: str, group: str | None = None) -> PauseState:
        """Pause `group` of `topic` (None: the whole topic, every group, those created later
        too); returns what is paused of the topic now.

        Within a second its workers take no new jobs: running handlers finish and settle,
        and take-over stops. Firing goes on, so the jobs wait in the stream, undelivered,
        until `resume`. The pause is kept in Redis: it holds across worker restarts.

        Raises:
            UnknownTopicError: No such topic.
            UnknownGroupError: The topic has no consumer group `group`.
        """
        return self._run(pauses.pause(self._producer, topic, group))

    def resume(self, topic: str, group: str | None = None) -> PauseState:
        """Resume `group` of `topic` (None: the topic and every group paused on its own);
        returns what is still paused. Resuming what is not paused changes nothing.

        Raises:
            UnknownTopicError: No such topic.
            InvalidArgumentError: `group` given while the topic is paused as a whole.
            UnknownGroupError: The topic has no consumer group `group` (and no pause of it).
        """
        return self._run(pauses.resume(self._producer, topic, group))

    def paused(self, topic: str) -> PauseState:
        """What is paused of `topic` (nothing, for a topic that does not exist)."""
        return self._run(pauses.paused(self._producer, topic))

    def set_events(
        self,
        topic: str,
        enabled: bool = True,
        *,
        max_len: int = EVENTS_MAX_LEN,
        max_age_ms: int = EVENTS_MAX_AGE_MS,
    ) -> EventsConfig:
        """Turn the topic's job events on (or off): from then on every shard keeps a stream of
        what happens to its jobs (fired, started, succeeded, retrying, dead, cancelled, and
        its groups paused and resumed), about `max_len` events a shard for at most
        `max_age_ms`; `AsyncAdmin.events` follows them. Off, they cost nothing.

        Raises:
            InvalidArgumentError: `enabled` not a bool; `max_len` not an int in [100,
                10,000,000]; `max_age_ms` not one in [60,000, a year].
        """
        config = EventsConfig(enabled, max_len, max_age_ms)
        return self._run(job_events.configure(self._producer, topic, config))

    def events_config(self, topic: str) -> EventsConfig:
        """The topic's events setting (`UnknownTopicError` for a topic that does not exist)."""
        return self._run(job_events.config_of(self._producer, topic))

    def stats(self, topic: str) -> TopicStats | None:
        """The topic's counts per shard (pending, ready, in flight, in stream, dead) and what
        of it is paused; None for an unknown topic. No spool: a client's is its
        `spool_stats`."""
        return self._run(self._producer.stats(topic))

    def forecast(self, topic: str, within: int | Sequence[int] = WITHIN_S) -> Forecast:
        """How many of the topic's jobs come due within each window of `within` seconds from
        now (the Redis clock's), and its ready work (fired, not yet delivered, as `stats`
        counts it): what to autoscale workers on. Overdue jobs not fired yet count in every
        window, and so do pending retries (they wait for their time as jobs do). One round
        trip reads every shard: a few bounded calls each, whatever the backlog.

        Raises:
            InvalidArgumentError: `within` is not 1-10 windows of whole seconds in
                [1, 86,400] (named ``within``).
            UnknownTopicError: No such topic.
        """
        return self._run(fc.forecast(self._producer, topic, within))

    def line(self, topic: str) -> LineView:
        """The topic's due line (docs/architecture.md, "The due line"): how many due jobs
        wait there for room in the streams, the backlog by priority of those that go next
        (a bounded sample from the head of each lane), and the keys furthest behind. A few
        bounded calls a shard, in three round trips at most, whatever the backlog.

        Raises:
            UnknownTopicError: No such topic.
        """
        return self._run(due_line.line(self._producer, topic))

    def jobs(
        self,
        topic: str,
        state: str,
        limit: int = 50,
        *,
        cursor: str | None = None,
        due_after: At | None = None,
        due_before: At | None = None,
        group: str | None = None,
        reason: str | None = None,
        priority: int | None = None,
        key: str | None = None,
    ) -> JobPage:
        """A page of the topic's jobs in one state (`ListState`): ``pending`` and
        ``retrying`` (by due time), ``ready``, ``running``, ``succeeded``, ``failed`` (newest
        first) or ``dead``; with `cursor` (the `next` of the page before), the page after it.

        Args:
            limit: Rows a page holds at most (1-1000); a page may hold fewer and still have
                a `next` (it stopped where the rows it may read in one call ran out).
            due_after: Pending and retrying: only jobs due at or after this (epoch seconds
                or an aware datetime).
            due_before: Pending and retrying: only jobs due before this.
            group: Every state but pending: only rows of this consumer group.
            reason: Dead: only dead letters of this reason.
            priority: Every state: only jobs of this priority (0-9; 5: those given none);
                a row whose priority is not known (a pending job too large to read in a
                list) is left out. `bulk` takes no priority.
            key: Every state: only jobs of this key (`Job.key`). Pending and retrying jobs
                are found through the topic's key index, at a cost of the key's jobs
                whatever else is pending (docs/architecture.md, "Jobs by key").

        Raises:
            UnknownTopicError: No such topic.
            InvalidArgumentError: An unknown state, a cursor of another topic or state, or
                a filter the state does not take (each names its parameter).
        """
        match = JobFilter.of(due_after, due_before, group, reason, priority, key)
        op = job_lists.list_jobs(self._producer, topic, state, match, limit, cursor)
        return self._run(op)

    def bulk(
        self,
        topic: str,
        action: str,
        *,
        state: str | None = None,
        due_after: At | None = None,
        due_before: At | None = None,
        group: str | None = None,
        reason: str | None = None,
        key: str | None = None,
        ids: Sequence[str] | None = None,
        refs: Sequence[str] | None = None,
        selection: str | None = None,
        dry_run: bool = False,
        at: At | None = None,
        shift_ms: int | None = None,
        max_jobs: int | None = None,
        shift: float | timedelta | None = None,
        progress: Progress | None = None,
    ) -> BulkOutcome:
        """Act on many of the topic's jobs at once: select them (by a filter, by `ids` or
        `refs`, or a dry run's `selection`), then act on each that is still in the state it
        was selected in, a batch at a time (docs/architecture.md, "Bulk actions").

        Args:
            action: ``cancel``, ``run_now`` or ``reschedule`` (pending and retrying jobs);
                ``replay`` or ``purge`` (dead letters).
            state: The filter's state (``pending``, ``retrying``, ``dead``); with
                `due_after`, `due_before`, `group`, `reason` and `key` as `jobs` takes them
                (a key's pending and retrying jobs are selected through the key index).
            ids: Pending or retrying jobs named by id (with `state`), at most 10,000.
            refs: Dead letters named by ref, at most 10,000.
            selection: A dry run's `selection`: act on exactly the jobs it counted.
            dry_run: Select and count only; the answer's `selection` acts on them later
                (kept 15 minutes after its last use).
            at: reschedule: the new due time (epoch seconds or an aware datetime).
            shift: reschedule: move each job this long from its due time, seconds or a
                timedelta (negative: earlier), up to ten years either way.
            shift_ms: `shift` in whole ms (an alias; give one of the two).
            max_jobs: Stop after reaching this many jobs; the answer's `remaining` and
                `selection` go on from there.
            progress: Called with (jobs reached, jobs selected) after each batch.

        Raises:
            InvalidArgumentError: No filter, ids, refs or selection (``filter``); an action
                the state does not take (``action``); anything else out of range, named.
            UnknownTopicError: No such topic.
        """
        match = JobFilter.of(due_after, due_before, group, reason, key=key)
        target = bulk_actions.Target(state, match, ids, refs, selection)
        moved_ms = shift_of(shift, shift_ms)
        op = bulk_actions.bulk(
            self._producer, topic, action, target, dry_run, at, moved_ms, max_jobs, progress
        )
        return self._run(op)

    def dead_letters(
        self,
        topic: str,
        limit: int = 100,
        *,
        after: str | None = None,
        reason: str | None = None,
        group: str | None = None,
        scan_limit: int | None = dl.SCAN_LIMIT,
    ) -> dl.DeadLetterPage:
        """The topic's oldest `limit` dead letters (1-100000), oldest first; with `after`
        (the `next` of the page before, or a dead letter's ref), the ones after it.

        Args:
            reason: Only those dead-lettered for this reason (``failed``, ``deliveries``,
                ``malformed``).
            group: Only those of this consumer group.
            scan_limit: With a filter, read through at most this many dead letters (default
                `SCAN_LIMIT`, 100,000; None: as many as it takes); the page then ends early,
                and its `next` goes on.

        Raises:
            UnknownTopicError: No such topic (as `replay` and `purge_dead`).
        """
        op = dl.dead_letters(self._producer, topic, limit, after, reason, group, scan_limit)
        return self._run(op)

    def replay(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> dl.Replayed:
        """Run dead letters again: each goes back to its stream as attempt 1, due now, for
        the group it failed in. `refs`: DeadLetters or their refs; None = all, or all of
        that `reason` and/or `group`. Returns how many were replayed, an int whose
        ``skipped`` counts those asked for that cannot be and stay dead letters: malformed
        ones (reason ``malformed``) and those whose payload nests past 100 levels.

        Raises:
            UnknownTopicError: No such topic.
            InvalidArgumentError: A ref is not ``"shard/ms-seq"`` of this topic, a filter is
                not valid, refs and a filter are both given, or a dead letter named in
                `refs` is malformed (nothing is replayed).
            PayloadTooDeepError: A dead letter named in `refs` has a payload nested past
                ``wheelq.core.payload.MAX_PAYLOAD_DEPTH`` levels (nothing is replayed).
        """
        return self._run(dl.replay(self._producer, topic, refs, reason, group))

    def purge_dead(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> int:
        """Delete dead letters (`refs` and the filter as in `replay`; None = all); returns
        how many went."""
        return self._run(dl.purge_dead(self._producer, topic, refs, reason, group))

    def set_limits(
        self,
        topic: str,
        *,
        max_pending: int | Unchanged | None = UNCHANGED,
        max_ready: int | Unchanged | None = UNCHANGED,
        priority_credit_ms: int | None = None,
        fair: bool | None = None,
        fair_weights: Mapping[str, int] | None = None,
    ) -> TopicLimits:
        """Set the topic's limits and due-line settings, each on every shard (setting any
        creates the topic); a setting left out stays as it is. Returns them all as they
        are now. docs/guides/flow-control.md; docs/architecture.md, "The due line".

        Args:
            max_pending: Most jobs waiting to fire; an enqueue past it raises `TopicFullError`
                (None: no limit; kept per shard as ``ceil(limit / shards)``).
            max_ready: Most fired jobs the slowest group has not acked; past it due jobs are
                held back and fire late, as workers catch up (None: no limit; per shard as
                `max_pending`).
            priority_credit_ms: What a priority step is worth among due jobs: a job of
                priority p is ordered as if due ``p * priority_credit_ms`` earlier, so one is
                never passed by work due more than the credit difference after it (an int in
                [0, 86,400,000]; 1,000 until set; None: unchanged).
            fair: True: due jobs with a key start in weighted round robin across keys (those
                without one share a turn of their own); False: in order (None: unchanged).
            fair_weights: Job key -> its share of the turns, an int in [1, 1,000] (a key not
                named: 1), at most 10,000 keys; replaces the topic's weights ({}: clears them;
                None: unchanged).

        Raises:
            InvalidArgumentError: A setting is out of its range (naming it and the range);
                nothing is written.
        """
        change = validate_limits(max_pending, max_ready, priority_credit_ms, fair, fair_weights)
        return self._run(self._producer.set_limits(topic, change))

    def set_far_horizon(self, topic: str, horizon_ms: int | None) -> int:
        """Keep the topic's jobs due more than `horizon_ms` ahead in its far tier, compactly,
        until the scheduler moves them into the sorted set as they come within it (0: no far
        tier, its jobs are moved back; None: the default, an hour; setting it creates the
        topic); returns the horizon now in force. Stats report it (`TopicStats.far_horizon_ms`)
        and the jobs kept far (`TopicStats.far`); docs/architecture.md, "The far tier".

        Raises:
            InvalidArgumentError: `horizon_ms` is not 0, None or an int in [600,000,
                31,622,400,000] (10 minutes to 366 days).
        """
        return self._run(self._producer.set_far_horizon(topic, horizon_ms))

    def limits(self, topic: str) -> TopicLimits:
        """The topic's limits and due-line settings (`UnknownTopicError` for an unknown
        topic)."""
        return self._run(self._producer.limits(topic))

    @takes(RunOptions)
    def schedule(
        self,
        name: str,
        topic: str,
        payload: Any,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        every_ms: int | None = None,
        tz: str = "UTC",
        start: At | None = None,
        end: At | None = None,
        misfire: str = "once",
        max_catch_up: int = DEFAULT_CATCH_UP,
        **options: Unpack[RunOptions],
    ) -> Schedule:
        """Create or update the recurring schedule `name` of `topic`; returns it.

        Each run is an ordinary job with the id ``<name>@<occurrence ms>``, written by a
        scheduler node shortly before it is due, so it fires on time and exists once,
        whatever nodes run or die. Calling it again with the same name updates the
        schedule from its first run not yet written (declare schedules at start-up).
        Every run carries the job options given (the last ones below), as `enqueue`'s.

        Args:
            name: 1-100 characters from [A-Za-z0-9_.:-], unique within the topic.
            topic: Where the runs are enqueued (created if new).
            payload: What every run carries (msgpack-serialisable).
            cron: Five cron fields, read in `tz` (``"30 2 * * *"``); or
            every: an interval in seconds (int, float) or a timedelta, 0.1 s to 366 days:
                runs at ``start + k * every`` (from the Unix epoch without `start`); or
            every_ms: the same interval in ms (an alias of `every`: give one of them).
            tz: IANA zone for `cron` ("Europe/Berlin"); spring forward runs a skipped
                time at the next valid one, fall back runs a repeated time once.
            start: No run before this (epoch seconds or an aware datetime), at most ten
                years from now, as a job's `at`.
            end: No run after this (epoch seconds or an aware datetime), at most ten years
                from now.
            misfire: Runs missed while no scheduler ran: "once" runs the latest of them
                now, "all" the latest `max_catch_up` in order, "skip" none.
            max_catch_up: 1-10,000 (for misfire="all").

        A payload on a task's topic is checked against the task's annotations when the
        task's module is imported in this process (`InvalidArgumentError` naming the
        argument, nothing stored); made over HTTP or the CLI it is not, and a run that does
        not fit the task is dead-lettered by its worker.

        Raises:
            InvalidArgumentError: A parameter out of range (named in the message), or a
                payload that does not fit the topic's task.
        """
        producer = self._producer
        made = schedules.record(
            producer.settings, producer.clock.now_ms(), name, topic, payload, cron=cron,
            every_ms=interval_ms(every, every_ms), tz=tz, start=start, end=end, misfire=misfire,
            max_catch_up=max_catch_up, options=options,
        )  # fmt: skip
        op = schedules.define(producer, made)
        return self._run(op)[0]

    def get_schedule(self, name: str, topic: str) -> Schedule | None:
        """The schedule `name` of `topic`, None if there is none."""
        return self._run(schedules.get(self._producer, name, topic))

    def schedules(self, topic: str | None = None) -> list[Schedule]:
        """Every schedule (of `topic` when given), by topic and name; a stored record that
        cannot be read is listed with the reason in its `error` (it never runs)."""
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

    def sync_schedules(self, topics: Collection[str], declared: Sequence[Schedule]) -> SyncReport:
        """Make the schedules of `topics` marked declared in code exactly `declared` (records
        made with `wheelq.admin.schedules.record`, each with its ``declared`` marker): what
        `App.sync_periodic` does. Safe when several processes call it at once: each change
        is written by one of them."""
        return self._run(schedules.sync(self._producer, topics, declared))

    def processes(self) -> list[ProcessInfo]:
        """Every live scheduler node, worker, HTTP service and outbox relay process, by role,
        host and pid: each with its roles and what they are doing (topics, groups, slots,
        jobs in flight, handled and failed, led shards and their lease ages) as of its last
        beat. A process killed leaves the list once its record expires, 3 beats after its
        last (``process_beat_ms``, ``process_expiry_beats``); one stopped, at once."""
        return self._run(processes.processes(self._producer))


admin_maker(Client, Admin.of)  # what the client's moved methods run on
