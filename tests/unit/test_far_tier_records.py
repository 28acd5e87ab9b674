"""The far tier's records (wheelq.core.far_tier): ids, due times and envelopes come back as
they went in, a generated id in 17 bytes instead of 27."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from wheelq.core import far_tier as ft
from wheelq.core.ids import make_job_id


@pytest.mark.parametrize(
    "job_id",
    [
        make_job_id(1_795_000_000_000, bytes(range(10))),
        make_job_id(0, bytes(10)),
        make_job_id((1 << 48) - 1, b"\xff" * 10),
        "order-17",
        "8" + make_job_id(1_795_000_000_000, bytes(range(10)))[1:],  # not a generated id
        "x" * 255,
        "é-unicode",
    ],
)
@pytest.mark.parametrize("level", range(ft.TOP_LEVEL + 1))
def test_a_record_reads_back_as_written(job_id: str, level: int) -> None:
    start = ft.leaf_of(ft.leaf_id(1_800_000_000_000, level))[0]
    due = start + ft.span(level) - 1
    record = ft.pack_record(job_id, due, b"\x95\x01envelope", start, level)
    assert ft.unpack_record(record, start, level) == ft.FarRecord(job_id, due, b"\x95\x01envelope")


def test_a_generated_id_is_kept_in_17_bytes() -> None:
    assert len(ft.id_bytes(make_job_id(1_795_000_000_000, os.urandom(10)))) == 17
    assert len(ft.id_bytes("order-17")) == 9


def test_a_cut_record_is_refused() -> None:
    record = ft.pack_record("order-17", 1_800_000_000_001, b"", 1_800_000_000_000, 1)
    with pytest.raises(ValueError, match="cut short"):
        ft.unpack_record(record[:10], 1_800_000_000_000, 1)


def test_the_scripts_use_the_same_constants() -> None:
    """includes/far_tier.lua and wheelq.core.far_tier agree on every number they share."""
    lua = Path(ft.__file__).parents[1] / "store" / "lua" / "includes" / "far_tier.lua"
    text = lua.read_text("utf-8")
    lua: dict[str, int] = {}
    for names, values in re.findall(r"^local (WQ_FAR_[\w, ]+) = ([\d, ]+)$", text, re.M):
        lua |= dict(zip(names.split(", "), map(int, values.split(", ")), strict=True))
    assert lua == {
        "WQ_FAR_WIDTH": ft.WIDTH_MS,
        "WQ_FAR_FANOUT": ft.FANOUT,
        "WQ_FAR_TOP": ft.TOP_LEVEL,
        "WQ_FAR_DEFAULT": ft.DEFAULT_HORIZON_MS,
        "WQ_FAR_CAP": ft.LEAF_CAP,
        "WQ_FAR_POSITIONS": ft.POSITIONS,
        "WQ_FAR_LOAD": ft.INDEX_LOAD,
        "WQ_FAR_EPOCH": ft.EPOCH_MS,
    }
