"""core.settings: documented defaults, every range boundary (in and one past), type checks
and `from_kwargs`. The boundary table is written out here, not read from the module, so a
changed range fails a test."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Annotated

import pytest

from wheelq.core.keys import validate_shards
from wheelq.core.options import validate_max_attempts
from wheelq.core.settings import (
    ClientSettings,
    Range,
    SchedulerSettings,
    WorkerSettings,
    setting_ranges,
)
from wheelq.errors import InvalidArgumentError

Settings = type[ClientSettings] | type[SchedulerSettings] | type[WorkerSettings]

RANGES: list[tuple[Settings, str, int, int]] = [
    (ClientSettings, "default_shards", 1, 1024),
    (ClientSettings, "max_payload_bytes", 1, 512 * 1024 * 1024),
    (ClientSettings, "default_max_attempts", 1, 1000),
    (ClientSettings, "batch_size", 1, 10_000),
    (ClientSettings, "breaker_open_ms", 0, 600_000),
    (ClientSettings, "spool_record_ms", 60_000, 30 * 86_400_000),
    (ClientSettings, "spool_call_record_ms", 0, 86_400_000),
    (ClientSettings, "ack_replicas", 0, 100),
    (ClientSettings, "ack_timeout_ms", 1, 600_000),
    (SchedulerSettings, "lease_ttl_ms", 500, 600_000),
    (SchedulerSettings, "window_ms", 10, 3_600_000),
    (SchedulerSettings, "preload_interval_ms", 10, 600_000),
    (SchedulerSettings, "idle_preload_interval_ms", 10, 3_600_000),
    (SchedulerSettings, "schedule_interval_ms", 10, 600_000),
    (SchedulerSettings, "preload_batch", 1, 100_000),
    (SchedulerSettings, "emit_batch", 1, 10_000),
    (SchedulerSettings, "emit_batch_bytes", 1, 1024 * 1024 * 1024),
    (SchedulerSettings, "sweep_grace_ms", 0, 600_000),
    (SchedulerSettings, "sweep_batch", 1, 10_000),
    (SchedulerSettings, "tick_ms", 1, 1000),
    (SchedulerSettings, "wheel_size", 2, 65_536),
    (SchedulerSettings, "check_interval_ms", 10, 600_000),
    (SchedulerSettings, "fast_failover", 0, 1),
    (SchedulerSettings, "failover_grace_ms", 10, 60_000),
    (SchedulerSettings, "clock_sync_interval_ms", 100, 3_600_000),
    (SchedulerSettings, "retention_ms", 0, 365 * 86_400_000),
    (SchedulerSettings, "history_max_bytes", 0, 1 << 40),
    (SchedulerSettings, "trim_interval_ms", 100, 86_400_000),
    (SchedulerSettings, "trim_batch", 1, 100_000),
    (SchedulerSettings, "far_promote_interval_ms", 100, 3_600_000),
    (SchedulerSettings, "unled_check_ms", 100, 3_600_000),
    (SchedulerSettings, "start_timeout_ms", 0, 3_600_000),
    (SchedulerSettings, "stop_timeout_ms", 0, 600_000),
    (SchedulerSettings, "failure_pause_max_ms", 10, 600_000),
    (SchedulerSettings, "process_beat_ms", 1000, 60_000),
    (SchedulerSettings, "process_expiry_beats", 2, 60),
    (WorkerSettings, "concurrency", 1, 10_000),
    (WorkerSettings, "block_ms", 10, 60_000),
    (WorkerSettings, "read_ahead_ms", 0, 60_000),
    (WorkerSettings, "visibility_timeout_ms", 100, 86_400_000),
    (WorkerSettings, "claim_interval_ms", 10, 600_000),
    (WorkerSettings, "max_deliveries", 1, 1000),
    (WorkerSettings, "retry_base_ms", 0, 86_400_000),
    (WorkerSettings, "retry_max_ms", 0, 30 * 86_400_000),
    (WorkerSettings, "retry_jitter_pct", 0, 100),
    (WorkerSettings, "handler_timeout_ms", 0, 86_400_000),
    (WorkerSettings, "shutdown_grace_ms", 0, 3_600_000),
    (WorkerSettings, "default_shards", 1, 1024),
    (WorkerSettings, "result_max_bytes", 0, 16 * 1024 * 1024),
    (WorkerSettings, "pause_poll_ms", 100, 3_600_000),
    (WorkerSettings, "paused_poll_ms", 100, 3_600_000),
    (WorkerSettings, "start_timeout_ms", 0, 3_600_000),
    (WorkerSettings, "stop_timeout_ms", 0, 600_000),
    (WorkerSettings, "failure_pause_max_ms", 10, 600_000),
    (WorkerSettings, "process_beat_ms", 1000, 60_000),
    (WorkerSettings, "process_expiry_beats", 2, 60),
]
IDS = [name for _, name, _, _ in RANGES]


def test_example_config_documents_every_setting_with_its_real_default() -> None:
    """config/wheelq.toml is the settings reference: it must list each field at its default."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "config" / "wheelq.toml").read_text()
    config = tomllib.loads(text)
    sections = (
        ("client", ClientSettings),
        ("scheduler", SchedulerSettings),
        ("worker", WorkerSettings),
    )
    for section, cls in sections:
        assert config[section] == dataclasses.asdict(cls()), section


@pytest.mark.parametrize("cls", [ClientSettings, SchedulerSettings, WorkerSettings])
def test_every_field_has_a_boundary_row(cls: Settings) -> None:
    assert [f.name for f in dataclasses.fields(cls)] == [
        name for owner, name, _, _ in RANGES if owner is cls
    ]


@pytest.mark.parametrize(("cls", "name", "low", "high"), RANGES, ids=IDS)
def test_range_boundaries_are_accepted(cls: Settings, name: str, low: int, high: int) -> None:
    assert getattr(cls(**{name: low}), name) == low
    assert getattr(cls(**{name: high}), name) == high
    assert getattr(cls.from_kwargs({name: high}), name) == high


@pytest.mark.parametrize(("cls", "name", "low", "high"), RANGES, ids=IDS)
@pytest.mark.parametrize("past", ["below", "above"])
def test_one_past_a_boundary_is_rejected(
    cls: Settings, name: str, low: int, high: int, past: str
) -> None:
    value = low - 1 if past == "below" else high + 1
    with pytest.raises(InvalidArgumentError) as info:
        cls(**{name: value})
    assert info.value.parameter == name
    assert isinstance(info.value, ValueError)
    assert str(info.value) == f"{name} must be an int in [{low}, {high}], got {value}"


@pytest.mark.parametrize(("cls", "name", "low", "high"), RANGES, ids=IDS)
@pytest.mark.parametrize("kind", ["true", "false", "float", "str", "none"])
def test_non_int_values_are_rejected(
    cls: Settings, name: str, low: int, high: int, kind: str
) -> None:
    value = {"true": True, "false": False, "float": float(low), "str": str(low), "none": None}[kind]
    with pytest.raises(InvalidArgumentError) as info:
        cls.from_kwargs({name: value})
    assert info.value.parameter == name
    assert str(info.value) == f"{name} must be an int in [{low}, {high}], got {value!r}"


def test_from_kwargs_builds_the_same_settings_as_the_constructor() -> None:
    assert ClientSettings.from_kwargs({}) == ClientSettings()
    assert SchedulerSettings.from_kwargs({"lease_ttl_ms": 10_000, "tick_ms": 5}) == (
        SchedulerSettings(lease_ttl_ms=10_000, tick_ms=5)
    )


@pytest.mark.parametrize(
    ("cls", "settings", "unknown"),
    [
        (ClientSettings, {"shards": 4}, "shards"),
        (ClientSettings, {"tick_ms": 1}, "tick_ms"),  # a scheduler setting
        (SchedulerSettings, {"default_shards": 4}, "default_shards"),  # a client setting
        (SchedulerSettings, {"window_ms": 100, "zeta": 1, "alpha": 2}, "alpha"),
        (SchedulerSettings, {"renew_interval_ms": 100}, "renew_interval_ms"),  # derived
    ],
)
def test_from_kwargs_rejects_unknown_names(
    cls: Settings, settings: dict[str, int], unknown: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        cls.from_kwargs(settings)
    assert info.value.parameter == unknown
    message = str(info.value)
    assert message.startswith(f"unknown setting {unknown!r} for {cls.__name__}; known: ")
    assert message.endswith(", ".join(sorted(f.name for f in dataclasses.fields(cls))))


@pytest.mark.parametrize("cls", [ClientSettings, SchedulerSettings, WorkerSettings])
def test_settings_are_frozen(cls: Settings) -> None:
    s = cls()
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(s, name, 7)


@pytest.mark.parametrize(
    ("lease_ttl_ms", "renew_ms"),
    [(500, 166), (5000, 1666), (10_000, 3333), (600_000, 200_000)],
)
def test_renew_interval_is_a_third_of_the_ttl(lease_ttl_ms: int, renew_ms: int) -> None:
    assert SchedulerSettings(lease_ttl_ms=lease_ttl_ms).renew_interval_ms == renew_ms


@pytest.mark.parametrize("value", [0, 1, 2, 1000, 1001, 1024, 1025])
def test_settings_ranges_agree_with_the_call_site_validators(value: int) -> None:
    def accepted(make: object) -> bool:
        try:
            make(value)  # type: ignore[operator]
        except InvalidArgumentError:
            return False
        return True

    assert accepted(lambda v: ClientSettings(default_shards=v)) == accepted(validate_shards)
    assert accepted(lambda v: ClientSettings(default_max_attempts=v)) == accepted(
        validate_max_attempts
    )


def test_a_setting_without_a_declared_range_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Unranged:
        bounded: Annotated[int, Range(1, 2)] = 1
        forgotten: int = 3

    with pytest.raises(TypeError, match=r"Unranged.forgotten must be Annotated\[int, Range"):
        setting_ranges(Unranged)


@pytest.mark.parametrize(("cls", "name", "low", "high"), RANGES, ids=IDS)
def test_each_range_is_the_one_declared_beside_its_field(
    cls: Settings, name: str, low: int, high: int
) -> None:
    assert setting_ranges(cls)[name] == Range(low, high)
