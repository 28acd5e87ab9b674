"""core.retry: the backoff table (doubling, cap, jitter bounds), `after_failure` (retry before
the last attempt, dead-letter on or after it, `Retry(delay=...)`), `Retry` delay validation and
`describe` (summary first, length cap, innermost frames kept)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.retry import (
    MAX_ERROR_CHARS,
    Defer,
    Fail,
    Outcome,
    Retry,
    RetryPolicy,
    after_failure,
    describe,
    error_detail,
    error_line,
)
from wheelq.errors import InvalidDelayError

ALMOST_1 = math.nextafter(1.0, 0.0)
POLICY = RetryPolicy(base_ms=1000, max_ms=60_000, jitter_pct=20)
NO_JITTER = RetryPolicy(base_ms=1000, max_ms=60_000, jitter_pct=0)


def raised(exc: BaseException) -> BaseException:
    """`exc` after being raised and caught, so it carries a traceback."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def fail_in_innermost_frame() -> None:
    raise RuntimeError("innermost failure")


# --- backoff_ms -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (1, 1000),
        (2, 2000),
        (3, 4000),
        (6, 32_000),
        (7, 60_000),  # 64 s capped at max_ms
        (8, 60_000),
        (10_000, 60_000),  # a huge exponent must not overflow or error
        (0, 1000),  # attempts below 1 count as the first
        (-3, 1000),
    ],
)
def test_backoff_doubles_per_attempt_up_to_the_cap(attempt: int, expected: int) -> None:
    assert NO_JITTER.backoff_ms(attempt, 0.5) == expected


def test_backoff_cap_also_caps_the_base() -> None:
    assert RetryPolicy(base_ms=5000, max_ms=3000, jitter_pct=0).backoff_ms(1, 0.0) == 3000


@pytest.mark.parametrize(
    ("rand", "expected"),
    [(0.0, 4000), (0.5, 3600), (ALMOST_1, 3200)],
    ids=["rand 0", "rand 0.5", "rand to 1"],
)
def test_backoff_jitter_shortens_by_up_to_jitter_pct(rand: float, expected: int) -> None:
    assert POLICY.backoff_ms(3, rand) == expected


def test_backoff_full_jitter_near_1_is_near_zero_but_never_negative() -> None:
    assert 0 <= RetryPolicy(base=1, max=60, jitter_pct=100).backoff_ms(1, ALMOST_1) <= 1


@settings(max_examples=300)
@given(
    attempt=st.integers(min_value=1, max_value=200),
    rand=st.floats(min_value=0.0, max_value=ALMOST_1),
    base_ms=st.integers(min_value=0, max_value=86_400_000),
    max_ms=st.integers(min_value=0, max_value=30 * 86_400_000),
    jitter_pct=st.integers(min_value=0, max_value=100),
)
def test_backoff_stays_between_the_jittered_floor_and_the_full_delay(
    attempt: int, rand: float, base_ms: int, max_ms: int, jitter_pct: int
) -> None:
    full = min(max_ms, base_ms * 2 ** (attempt - 1))
    delay = RetryPolicy(base_ms=base_ms, max_ms=max_ms, jitter_pct=jitter_pct).backoff_ms(
        attempt, rand
    )
    assert full * (100 - jitter_pct) // 100 <= delay <= full


# --- after_failure --------------------------------------------------------------------------


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 3), (2, 3), (1, 2)])
def test_failure_before_the_last_attempt_is_retried_after_the_backoff(
    attempt: int, max_attempts: int
) -> None:
    exc = raised(ValueError("boom"))

    outcome = after_failure(attempt, max_attempts, exc, POLICY, 0.25)

    assert not outcome.dead
    assert outcome.delay_ms == POLICY.backoff_ms(attempt, 0.25)
    assert outcome.error.splitlines()[0] == "ValueError: boom"


@pytest.mark.parametrize(("attempt", "max_attempts"), [(3, 3), (1, 1), (5, 3)])
def test_failure_on_or_after_the_last_attempt_is_dead_with_the_attempt_in_the_error(
    attempt: int, max_attempts: int
) -> None:
    exc = raised(ValueError("boom"))

    outcome = after_failure(attempt, max_attempts, exc, POLICY, 0.25)

    assert outcome.dead and outcome.delay_ms is None
    first, _, rest = outcome.error.partition("\n")
    assert first == f"attempt {attempt} of {max_attempts}: ValueError: boom"
    assert "Traceback" in rest


@pytest.mark.parametrize(
    ("delay", "expected_ms"),
    [(0, 0), (2.5, 2500), (0.3, 300), (timedelta(minutes=2), 120_000)],
)
def test_retry_with_a_delay_is_honoured_instead_of_the_backoff(
    delay: float | timedelta, expected_ms: int
) -> None:
    outcome = after_failure(1, 3, raised(Retry(delay)), POLICY, 0.0)

    assert outcome == Outcome(outcome.error, expected_ms)
    assert outcome.error == "retry requested"  # said on purpose: the message, no class path


def test_retry_without_a_delay_uses_the_backoff() -> None:
    assert after_failure(2, 3, raised(Retry()), POLICY, 0.5).delay_ms == POLICY.backoff_ms(2, 0.5)


def test_retry_on_the_last_attempt_is_dead_all_the_same() -> None:
    outcome = after_failure(3, 3, raised(Retry(5, reason="not yet")), POLICY, 0.0)

    assert outcome.dead
    assert outcome.error == "attempt 3 of 3: not yet"


def test_fail_dead_letters_at_once_whatever_attempts_are_left() -> None:
    outcome = after_failure(1, 5, raised(Fail("410 Gone")), POLICY, 0.0)

    assert outcome.dead
    assert outcome.error == "attempt 1 of 5, not retried: 410 Gone"


@pytest.mark.parametrize("attempt", [1, 3, 7])
def test_defer_puts_the_job_back_without_counting_even_past_the_last_attempt(
    attempt: int,
) -> None:
    outcome = after_failure(attempt, 3, raised(Defer(0.25, "busy")), POLICY, 0.0)

    assert outcome == Outcome(outcome.error, 250, counts=False)
    assert not outcome.dead


@pytest.mark.parametrize(
    "delay",
    [
        -1,
        -0.001,
        math.nan,
        math.inf,
        10 * 365 * 86_400 + 1,
        10**400,
        "5",
        True,
        [],
        timedelta(seconds=-1),
    ],
    ids=[
        "negative",
        "negative ms",
        "nan",
        "inf",
        "over ten years",
        "huge int",
        "str",
        "bool",
        "list",
        "negative timedelta",
    ],
)
def test_retry_with_a_bad_delay_raises_invalid_delay_naming_the_parameter(delay: object) -> None:
    with pytest.raises(InvalidDelayError) as caught:
        Retry(delay)  # type: ignore[arg-type]
    assert caught.value.parameter == "delay"


# --- describe -------------------------------------------------------------------------------


def test_describe_puts_the_summary_first_then_the_traceback() -> None:
    exc = raised(KeyError("missing"))

    text = describe(exc)

    first, _, rest = text.partition("\n")
    assert first == "KeyError: 'missing'"
    assert rest.startswith("Traceback (most recent call last):")
    assert "raise exc" in rest
    assert len(text) <= MAX_ERROR_CHARS


@pytest.mark.parametrize("message_chars", [7_000, 8_000, 50_000])
def test_describe_caps_the_length_and_keeps_the_summary_first(message_chars: int) -> None:
    exc = raised(ValueError("x" * message_chars))

    text = describe(exc)

    assert len(text) <= MAX_ERROR_CHARS
    first = text.splitlines()[0]
    assert first.startswith("ValueError: xxx")
    assert len(first) <= 1000


def test_describe_keeps_the_innermost_frames_of_a_long_traceback() -> None:
    try:
        try:
            raise ValueError("y" * 20_000)
        except ValueError as cause:
            raise RuntimeError("outer") from cause
    except RuntimeError:
        try:
            fail_in_innermost_frame()
        except RuntimeError as exc:
            text = describe(exc)

    assert len(text) <= MAX_ERROR_CHARS
    assert text.splitlines()[0] == "RuntimeError: innermost failure"
    assert "\n...\n" in text  # the outer part of the trace was dropped
    assert "in fail_in_innermost_frame" in text
    assert text.endswith("RuntimeError: innermost failure")


# --- the recorded error: one line, then the detail --------------------------------------------


class _HostDown(Retry):
    """A Retry subclass defined away from wheelq.core.retry, as the callback deliverer's is."""


class PaymentDeclinedError(Exception):
    pass


def test_a_retry_or_fail_raised_on_purpose_records_its_message_not_a_class_path() -> None:
    retried = after_failure(
        1, 3, raised(_HostDown(None, "https://x/hook answered HTTP 503")), POLICY, 0
    )
    assert retried.error == "https://x/hook answered HTTP 503"
    failed = after_failure(1, 3, raised(Fail("https://x/hook answered HTTP 410: gone")), POLICY, 0)
    assert failed.error == "attempt 1 of 3, not retried: https://x/hook answered HTTP 410: gone"
    assert "wheelq." not in retried.error + failed.error
    assert (
        after_failure(1, 3, raised(Fail()), POLICY, 0).error == "attempt 1 of 3, not retried: Fail"
    )


def test_the_first_line_is_type_and_message_and_the_rest_the_traceback() -> None:
    error = describe(raised(PaymentDeclinedError("card declined\nby the issuer")))
    assert error_line(error) == "PaymentDeclinedError: card declined by the issuer"
    detail = error_detail(error)
    assert detail is not None and detail.startswith(error_line(error) + "\nTraceback")
    assert "test_retry.PaymentDeclinedError: card declined" in detail  # the long form, whole
    assert error_line("attempt 2 of 2: deliveries") == "attempt 2 of 2: deliveries"
    assert error_detail("attempt 2 of 2: deliveries") is None
    assert (error_line(None), error_detail(None)) == ("", None)
