"""Jobs that follow jobs, the pure part (wheelq.core.follow): what ``after=`` takes, the
policies, the notices' parse, and the numbers the scripts share with it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgpack
import pytest

from wheelq.core import follow as f
from wheelq.core.history import JobState
from wheelq.core.keys import ShardKeys
from wheelq.errors import InvalidArgumentError


def test_the_scripts_use_the_same_constants() -> None:
    lua = Path(f.__file__).parents[1] / "store" / "lua" / "includes" / "follow.lua"
    text = lua.read_text("utf-8")
    found = dict(re.findall(r"^local (WQ_\w+) = (\d+|'.')", text, re.M))
    assert found == {
        "WQ_NUDGE": repr(f.NUDGE.decode()),
        "WQ_WAIT_DUE": str(f.WAIT_DUE_MS),
        "WQ_EARLY_MS": str(f.EARLY_MS),
        "WQ_CHILDREN_KEEP_MS": str(f.CHILDREN_KEEP_MS),
    }
    assert f.WRITE_WINDOW_MS * 2 <= f.EARLY_MS  # an early outcome outlives any write's window


def test_the_wait_due_is_past_every_due_time_a_caller_can_give() -> None:
    from datetime import UTC, datetime

    from wheelq.core.due import at_ms

    assert at_ms(datetime(9999, 12, 31, 23, 59, 59, 998000, tzinfo=UTC), "at") < f.WAIT_DUE_MS
    assert JobState.AWAITING.value == "awaiting"


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("j1", f.JobRef("t", "j1")),
        (("other", "j1"), f.JobRef("other", "j1", "default")),
        (("other", "j1", "billing"), f.JobRef("other", "j1", "billing")),
        (f.JobRef("x", "y", "g"), f.JobRef("x", "y", "g")),
    ],
)
def test_after_names_a_job_of_the_topic_or_of_another(after: Any, expected: f.JobRef) -> None:
    assert f.job_ref(after, "t") == expected


@pytest.mark.parametrize(
    "after",
    [None, 5, b"j", "", "a\x00b", ("t",), ("t", "j", "g", "x"), ("bad topic", "j"), ["t", "j"]],
)
def test_anything_else_is_refused_naming_after(after: Any) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        f.job_ref(after, "t")
    assert caught.value.parameter == "after"


def test_the_policies_and_a_bad_one() -> None:
    assert f.on_failure("cancel") is f.OnFailure.CANCEL
    assert f.on_failure("run") is f.OnFailure.RUN
    with pytest.raises(InvalidArgumentError, match="'cancel', 'run'") as caught:
        f.on_failure("ignore")
    assert caught.value.parameter == "on_parent_failure"


def test_a_notice_parses_and_an_unreadable_one_is_shard_minus_one() -> None:
    good = msgpack.packb(["w", 2, "wj", "tok", "pj", "default", "S", ""])
    reply = [(b"1-0", {b"n": good}), (b"2-0", {b"n": b"\xc1"}), (b"3-0", {})]
    notices = f.parse_notices(reply, ShardKeys("p", 4))
    assert notices[0] == f.Notice("1-0", "w", 2, "wj", "tok", "p\x1f4\x1fpj\x1fdefault", "S", "")
    assert [n.shard for n in notices[1:]] == [-1, -1]


def test_a_record_is_what_resolve_reads() -> None:
    ref = f.wire_ref(ShardKeys("t", 1), "a", "default")
    record = f.waiting_record("tok", 250, f.OnFailure.RUN, [ref])
    assert msgpack.unpackb(record) == ["tok", 250, "r", ["t\x1f1\x1fa\x1fdefault"]]
    assert f.parse_wire_ref(ref) == (ShardKeys("t", 1), "a")
    many = [f.wire_ref(ShardKeys("t", 0), str(i), "g") for i in range(f.INLINE_REFS + 1)]
    assert msgpack.unpackb(f.waiting_record("t", 0, f.OnChildFailure.FAIL, many))[2:] == [
        "f",
        f.INLINE_REFS + 1,
    ]
