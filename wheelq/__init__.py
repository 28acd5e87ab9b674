"""wheelq: delayed jobs on Redis that fire on time.

Producers enqueue with `Client` / `AsyncClient` (`Admin` / `AsyncAdmin` manage topics,
groups, pauses, dead letters and schedules); `Scheduler` nodes move due
jobs into per-shard Redis Streams at their due millisecond; `Worker`s run a
handler on each, with retries, dead letters and crash recovery.
"""

from wheelq.admin.admin import Admin
from wheelq.admin.async_admin import AsyncAdmin
from wheelq.admin.dead_letters import DeadLetterPage, Replayed
from wheelq.admin.groups import DeletedGroup, GroupShardStats, GroupStats
from wheelq.core.callback import Callback
from wheelq.core.context import current_job
from wheelq.core.events import Event, EventsConfig
from wheelq.core.flow import Flow, TopicLimits
from wheelq.core.follow import JobRef, Joined, OnChildFailure, OnFailure
from wheelq.core.forecast import Forecast
from wheelq.core.history import GroupInfo, JobInfo, JobState
from wheelq.core.job import DeadLetter, Job
from wheelq.core.line import LaneLine, LineView
from wheelq.core.options import FlowSpec, JobSpec
from wheelq.core.pause import PauseState
from wheelq.core.process import LeadInfo, ProcessInfo, RoleInfo
from wheelq.core.recurring import Schedule
from wheelq.core.retry import Defer, Fail, Retry, RetryPolicy
from wheelq.core.settings import ClientSettings, SchedulerSettings, WorkerSettings
from wheelq.errors import (
    AckUnsupportedError,
    DuplicateJobError,
    DurabilityError,
    EagerModeError,
    EmbeddedServerError,
    EventsOffError,
    GroupBusyError,
    GroupLimitError,
    GroupNotFoundError,
    HandlerExitError,
    HandlerTimeoutError,
    InvalidArgumentError,
    InvalidDelayError,
    InvalidHandlerError,
    InvalidJobIdError,
    InvalidTopicError,
    JobFailedError,
    LeaseLostError,
    MalformedJobError,
    NoCurrentJobError,
    NoFlowError,
    PayloadTooDeepError,
    PayloadTooLargeError,
    PayloadTypeError,
    RedisUnavailableError,
    ResultError,
    ResultTimeoutError,
    ResultTooLargeError,
    ResultTypeError,
    ScriptError,
    SelectionGoneError,
    SpoolError,
    SpoolLockedError,
    TopicConfigError,
    TopicFullError,
    TopicNotEmptyError,
    UnknownGroupError,
    UnknownJobError,
    UnknownTopicError,
    UnsupportedServerError,
    WheelqError,
    WrongTypeError,
)
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.client import Client
from wheelq.producer.items import EnqueueItem
from wheelq.producer.operations import ShardStats, SpoolStats, TopicStats
from wheelq.scheduler.led_shards import NodeEvent
from wheelq.scheduler.scheduler import Scheduler, StopReport
from wheelq.tasks import App, Task, TaskCall, TaskHandle
from wheelq.worker.worker import Route, Worker, WorkerStopReport

__version__ = "0.2.0"

__all__ = [
    # tasks
    "Admin",
    "App",
    "AsyncAdmin",
    "Task",
    "TaskCall",
    "TaskHandle",
    "current_job",
    # producing
    "AsyncClient",
    "Callback",
    "Client",
    "ClientSettings",
    "EnqueueItem",
    "TopicLimits",
    # recurring
    "Schedule",
    # jobs that follow jobs
    "JobRef",
    "FlowSpec",
    "JobSpec",
    "Joined",
    "OnChildFailure",
    "OnFailure",
    # inspecting
    "DeletedGroup",
    "Forecast",
    "LineView",
    "LaneLine",
    "GroupInfo",
    "GroupShardStats",
    "GroupStats",
    "JobInfo",
    "Event",
    "EventsConfig",
    "JobState",
    "PauseState",
    "LeadInfo",
    "ProcessInfo",
    "RoleInfo",
    "ShardStats",
    "SpoolStats",
    "TopicStats",
    # scheduling
    "NodeEvent",
    "Scheduler",
    "SchedulerSettings",
    "StopReport",
    # consuming
    "Defer",
    "Fail",
    "Flow",
    "Job",
    "Retry",
    "RetryPolicy",
    "Route",
    "Worker",
    "WorkerSettings",
    "WorkerStopReport",
    "DeadLetter",
    "DeadLetterPage",
    "Replayed",
    # errors
    "AckUnsupportedError",
    "DuplicateJobError",
    "DurabilityError",
    "EagerModeError",
    "EmbeddedServerError",
    "EventsOffError",
    "GroupBusyError",
    "GroupLimitError",
    "GroupNotFoundError",
    "HandlerExitError",
    "HandlerTimeoutError",
    "InvalidArgumentError",
    "InvalidDelayError",
    "InvalidHandlerError",
    "InvalidJobIdError",
    "InvalidTopicError",
    "JobFailedError",
    "NoCurrentJobError",
    "LeaseLostError",
    "MalformedJobError",
    "PayloadTooDeepError",
    "SelectionGoneError",
    "PayloadTooLargeError",
    "PayloadTypeError",
    "RedisUnavailableError",
    "ResultError",
    "ResultTimeoutError",
    "ResultTooLargeError",
    "ResultTypeError",
    "UnsupportedServerError",
    "ScriptError",
    "SpoolError",
    "SpoolLockedError",
    "TopicConfigError",
    "TopicFullError",
    "TopicNotEmptyError",
    "UnknownGroupError",
    "UnknownJobError",
    "NoFlowError",
    "UnknownTopicError",
    "WheelqError",
    "WrongTypeError",
]
