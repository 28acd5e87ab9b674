"""wheelq: delayed jobs on Redis that fire on time.

Producers enqueue with `Client` / `AsyncClient`; `Scheduler` nodes move due
jobs into per-shard Redis Streams at their due millisecond.
"""

from wheelq.core.job import JobInfo, JobState, StreamJob
from wheelq.core.settings import ClientSettings, SchedulerSettings
from wheelq.errors import (
    DuplicateJobError,
    EmbeddedServerError,
    InvalidArgumentError,
    InvalidDelayError,
    InvalidJobIdError,
    InvalidTopicError,
    LeaseLostError,
    PayloadTooLargeError,
    PayloadTypeError,
    ScriptError,
    TopicConfigError,
    WheelqError,
)
from wheelq.runtime.client import AsyncClient, Client
from wheelq.runtime.leads import NodeEvent
from wheelq.runtime.producer import EnqueueItem, ShardStats, TopicStats
from wheelq.runtime.scheduler import Scheduler, StopReport

__version__ = "0.1.0"

__all__ = [
    # producing
    "AsyncClient",
    "Client",
    "ClientSettings",
    "EnqueueItem",
    # inspecting
    "JobInfo",
    "JobState",
    "ShardStats",
    "StreamJob",
    "TopicStats",
    # scheduling
    "NodeEvent",
    "Scheduler",
    "SchedulerSettings",
    "StopReport",
    # errors
    "DuplicateJobError",
    "EmbeddedServerError",
    "InvalidArgumentError",
    "InvalidDelayError",
    "InvalidJobIdError",
    "InvalidTopicError",
    "LeaseLostError",
    "PayloadTooLargeError",
    "PayloadTypeError",
    "ScriptError",
    "TopicConfigError",
    "WheelqError",
]
