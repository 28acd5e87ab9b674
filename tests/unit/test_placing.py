"""producer.operations.send_calls turns each call's outcomes into ids or a typed error; a reply
that does not answer every job of its call is the script's error, not a silent short list.
The enqueue call reads each outcome code as `Placed(code)` would, by a table."""

from __future__ import annotations

from typing import Any

import pytest

from wheelq.core.due import DueSpec
from wheelq.core.keys import ShardKeys
from wheelq.errors import DuplicateJobError, ScriptError
from wheelq.producer.operations import enqueue_calls, send_calls
from wheelq.store import enqueue
from wheelq.store.scripts import Placed


def writes(n: int) -> list[enqueue.JobWrite]:
    return [enqueue.JobWrite(f"j{i}", DueSpec("delay", 1000), False, b"e") for i in range(n)]


def answer(op: Any, replies: list[Any]) -> Any:
    next(op)
    with pytest.raises(StopIteration) as done:
        op.send(replies)
    return done.value.value


def test_every_job_placed_gives_the_ids_in_order() -> None:
    ws = writes(3)
    calls = enqueue_calls("t", ws, 1, 500)
    assert answer(send_calls("t", [w.id for w in ws], calls, None), [[Placed.SCHEDULED] * 3]) == [
        "j0",
        "j1",
        "j2",
    ]


def test_duplicates_are_named_with_what_was_enqueued() -> None:
    ws = writes(3)
    calls = enqueue_calls("t", ws, 1, 500)
    op = send_calls("t", [w.id for w in ws], calls, None)
    next(op)
    with pytest.raises(DuplicateJobError) as info:
        op.send([[Placed.SCHEDULED, Placed.DUPLICATE, Placed.FIRED]])
    assert (info.value.job_ids, info.value.enqueued) == (["j1"], ["j0", "j2"])


def test_a_reply_short_of_its_calls_jobs_is_a_script_error() -> None:
    ws = writes(3)
    calls = enqueue_calls("t", ws, 1, 500)
    op = send_calls("t", [w.id for w in ws], calls, None)
    next(op)
    with pytest.raises(ScriptError, match="answered 2 of 3 jobs"):
        op.send([[Placed.SCHEDULED] * 2])


# --- enqueue.lua's outcome codes, read through a table (docs/architecture.md, "Fast paths")


@pytest.mark.parametrize(
    "codes", [[int(p) for p in Placed], [5, 0, 0, 4, 1, 2, 2], [], [True, 1.0, 0]]
)
def test_outcome_codes_read_as_the_placed_their_number_names(codes: list[Any]) -> None:
    parsed = enqueue.enqueue(ShardKeys("t", 0), writes(1)).parse([0, *codes])
    assert parsed == [Placed(code) for code in codes]
    assert all(type(p) is Placed for p in parsed)


@pytest.mark.parametrize("code", [3, 6, -1, b"0", "1", None, [0]])
def test_a_code_placed_does_not_name_is_the_scripts_error(code: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        Placed(code)
    with pytest.raises(ScriptError, match="unknown outcome"):
        enqueue.enqueue(ShardKeys("t", 0), writes(1)).parse([0, 1, code])
