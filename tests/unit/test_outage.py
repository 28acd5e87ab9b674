"""runtime.outage (with its StopBudget) without a server: which errors are
transient, the backoff's growth and cap, one log line per state change (with a fake clock),
and a stop budget that bounds waits, skips steps once Redis is gone, and can be cut short."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl

import pytest
from redis._parsers.base import BaseParser
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    DataError,
    MasterDownError,
    MaxConnectionsError,
    MovedError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wheelq.core.clock import ManualClock
from wheelq.runtime.outage import (
    CAP_S,
    REMIND_S,
    Backoff,
    Outage,
    StopBudget,
    is_transient,
    unavailable_reason,
    unavailable_text,
)
from wheelq.runtime.service import Service

REFUSED = RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")


def _wrapped(cause: BaseException) -> RedisConnectionError:
    """A ConnectionError raised while handling `cause`, as redis-py raises them."""
    try:
        raise cause
    except BaseException:
        try:
            raise RedisConnectionError(f"Error connecting: {cause}")
        except RedisConnectionError as exc:
            return exc


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (REFUSED, True),
        (RedisTimeoutError("Timeout reading"), True),
        (BusyLoadingError("Redis is loading the dataset in memory"), True),
        (TryAgainError("Multiple keys request during rehashing of slot"), True),
        (ClusterError("TTL exhausted."), True),
        (ClusterDownError("The cluster is down"), True),
        (MovedError("3999 127.0.0.1:6381"), True),
        (ResponseError("ERR unknown command 'FOO'"), False),
        (ConnectionResetError(104, "reset"), True),
        (TimeoutError("no answer"), True),
        (_wrapped(ConnectionRefusedError(111, "refused")), True),
        (_wrapped(ssl.SSLEOFError("EOF in violation of protocol")), True),
        (AuthenticationError("invalid username-password pair"), False),
        (_wrapped(socket.gaierror(-2, "Name or service not known")), False),
        (_wrapped(ssl.SSLCertVerificationError("certificate verify failed")), False),
        (_wrapped(ssl.SSLError("wrong version number")), False),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind"), False),
        (DataError("Invalid input"), False),
        (ValueError("a bug"), False),
        # A file gone from under a running process (an upgrade in place) is no outage.
        (FileNotFoundError(2, "No such file or directory", "retry.lua"), False),
        (PermissionError(13, "Permission denied", "retry.lua"), False),
        (IsADirectoryError(21, "Is a directory"), False),
        (OSError(28, "No space left on device"), False),
        (OSError(errno.EHOSTUNREACH, "No route to host"), True),
        (BrokenPipeError(32, "Broken pipe"), True),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, BaseException) else str(x),
)
def test_only_errors_waiting_can_fix_are_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_backoff_doubles_from_100_ms_to_its_cap_with_jitter_and_resets() -> None:
    backoff = Backoff()
    pauses = [backoff.next_s() for _ in range(12)]
    fulls = [min(CAP_S, 0.1 * 2**i) for i in range(12)]
    for pause, full in zip(pauses, fulls, strict=True):
        assert full / 2 <= pause <= full
    assert max(pauses) <= CAP_S
    backoff.reset()
    assert backoff.next_s() <= 0.1


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_an_outage_logs_one_warning_a_reminder_every_30_s_and_one_info_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    outage = Outage(logging.getLogger("wheelq.test"), "lease keeper", clock=clock)
    caplog.set_level(logging.DEBUG, "wheelq.test")
    for _ in range(200):  # 200 failed tries over 100 s
        pause = outage.failed(REFUSED)
        assert 0 < pause <= CAP_S
        clock.now += 0.5
    warnings = _lines(caplog, logging.WARNING)
    assert len(warnings) == 1 + int(100 // REMIND_S)
    assert warnings[0].startswith("lease keeper: redis unreachable (Error 111")
    assert "still unreachable after 30 s (62 failed tries" in warnings[1]
    assert _lines(caplog, logging.INFO) == []

    outage.ok()
    outage.ok()  # once back, successes say nothing more
    assert _lines(caplog, logging.INFO) == [
        "lease keeper: redis reachable again after 100.0 s (200 failed tries)"
    ]
    assert outage.failed(REFUSED) <= 0.1, "the backoff starts again from its first pause"


def test_one_failed_call_followed_by_success_is_a_blip_not_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(logging.getLogger("wheelq.test"), "preloader", clock=FakeClock())
    caplog.set_level(logging.DEBUG, "wheelq.test")
    for _ in range(3):
        outage.failed(REFUSED)  # a stale pooled connection after a restart
        outage.ok()
    assert [r.levelno for r in caplog.records] == [logging.DEBUG] * 3


def test_other_errors_are_logged_each_time_as_errors_and_backed_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(logging.getLogger("wheelq.test"), "trimmer", clock=FakeClock())
    caplog.set_level(logging.DEBUG, "wheelq.test")
    pauses = [outage.failed(ResponseError("NOPERM no permissions")) for _ in range(8)]
    assert _lines(caplog, logging.ERROR) == ["trimmer: ResponseError: NOPERM no permissions"] * 8
    assert pauses[-1] > pauses[0]
    assert outage.failed(REFUSED, at_least_s=60) == 60


class Stuck(Service):
    """A part whose step never returns (a call to a Redis that does not answer)."""

    name = "stuck"

    def __init__(self) -> None:
        super().__init__(ManualClock(), logging.getLogger("wheelq.test"))
        self.cancelled = False

    async def step(self) -> float:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return 0.0


async def test_a_stop_budget_cancels_a_part_stuck_past_it_and_skips_the_rest() -> None:
    budget = StopBudget(0.05)
    part = Stuck()
    await part.start()
    await asyncio.sleep(0)  # let it block
    stopped = await part.stop(budget)
    assert part.cancelled and not part.running
    assert not stopped.in_time
    assert budget.problem == "no answer from redis within stop_timeout_ms"

    called = []

    async def step() -> int:
        called.append(1)
        return 1

    assert await budget.attempt("release 3 leases", step, default=0) == 0
    assert called == [], "a step after Redis stopped answering is skipped, not waited for"
    assert budget.summary() == "release 3 leases (no answer from redis within stop_timeout_ms)"


async def test_a_step_failing_on_a_transient_error_marks_redis_unreachable() -> None:
    budget = StopBudget(5)

    async def refused() -> int:
        raise REFUSED

    async def fine() -> int:
        return 7

    assert await budget.attempt("hand on 2 entries", refused, default=-1) == -1
    assert budget.problem is not None and budget.problem.startswith("redis unreachable")
    assert await budget.attempt("leave the group", fine, default=0) == 0
    assert budget.undone == ["hand on 2 entries", "leave the group"]


async def test_steps_that_answer_use_the_budget_and_leave_nothing_undone() -> None:
    budget = StopBudget(5)

    async def fine() -> int:
        return 7

    assert [await budget.attempt(f"step {i}", fine, default=0) for i in range(3)] == [7, 7, 7]
    assert budget.undone == [] and budget.summary() == ""


async def test_cut_ends_a_long_wait_under_way_at_once() -> None:
    budget = StopBudget(600)
    never = asyncio.Event()

    async def hangs() -> int:
        await never.wait()
        return 1

    attempt = asyncio.create_task(budget.attempt("write 5 settlements", hangs, default=0))
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    began = loop.time()
    budget.cut(0.01)
    assert await asyncio.wait_for(attempt, 5) == 0
    assert loop.time() - began < 1
    assert budget.problem == "cut short by a second signal"


async def test_a_zero_budget_waits_for_nothing() -> None:
    budget = StopBudget(0)

    async def fine() -> int:
        return 7

    assert await budget.attempt("release 1 leases", fine, default=0) == 0
    assert budget.undone == ["release 1 leases"]


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (REFUSED, "unreachable"),
        (RedisTimeoutError("Timeout reading from socket"), "unreachable"),
        (BusyLoadingError("Redis is loading the dataset in memory"), "loading"),
        (ReadOnlyError("You can't write against a read only replica."), "readonly"),
        (OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), "oom"),
        (ClusterDownError("The cluster is down"), "clusterdown"),
        (
            MasterDownError("Link with MASTER is down and replica-serve-stale-data is no"),
            "masterdown",
        ),
        (TryAgainError("Multiple keys request during rehashing of slot"), "tryagain"),
        (MaxConnectionsError("Too many connections"), "connections"),
        (ResponseError("ERR unknown command"), None),
        (NoPermissionError("this user has no permissions"), None),
        (AuthenticationError("invalid username-password pair"), None),
        (_wrapped(ssl.SSLCertVerificationError("certificate verify failed")), None),
        (DataError("Invalid input"), None),
    ],
)
def test_unavailable_reason_names_what_keeps_redis_from_taking_calls_now(
    exc: Exception, reason: str | None
) -> None:
    assert unavailable_reason(exc) == reason


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("LOADING Redis is loading the dataset in memory", "loading"),
        ("LOADING Valkey is loading the dataset in memory", "loading"),
        (
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN "
            "NOSAVE.",
            "busy",
        ),
        (
            "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN "
            "NOSAVE.",
            "busy",
        ),
        (
            "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN "
            "NOSAVE.",
            "busy",
        ),
        ("OOM command not allowed when used memory > 'maxmemory'.", "oom"),
        (
            "OOM command not allowed when used memory > 'maxmemory'. script: "
            "95afa7c6afbe7a63ae02355da3d5d3cfda8cb342, on @user_script:27.",
            "oom",
        ),
        ("READONLY You can't write against a read only replica.", "readonly"),
        (
            "READONLY You can't write against a read only replica. script: 95af, on "
            "@user_script:9.",
            "readonly",
        ),
        (
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "masterdown",
        ),
        ("CLUSTERDOWN The cluster is down", "clusterdown"),
        ("TRYAGAIN Multiple keys request during rehashing of slot", "tryagain"),
        # answers, not refusals: waiting changes none of them
        ("BUSYGROUP Consumer Group name already exists", None),
        ("BUSYKEY Target key name already exists.", None),
        ("NOSCRIPT No matching script. Please use EVAL.", None),
        ("NOPERM this user has no permissions to run the 'eval' command", None),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", None),
        ("ERR Error running script (call to f_95af): @user_script:1: BUSY", None),
        ("EXECABORT Transaction discarded because of previous errors.", None),
    ],
)
def test_each_reply_that_says_wait_is_classified_once_for_every_part(
    reply: str, reason: str | None
) -> None:
    """The server's error lines, parsed as redis-py parses them: a role's start, every
    part's loop, a settlement and a producer's typed error all read this one table."""
    exc = BaseParser.parse_error(reply)

    assert unavailable_reason(exc) == reason
    assert is_transient(exc) is (reason is not None)
    if reason is not None:
        assert unavailable_text(exc) == f"unavailable ({reason}: {exc})"
