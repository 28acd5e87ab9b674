"""Fast checks of the scripts' logic on fakeredis (no server process).

fakeredis runs Lua through `lupa` (the ``fakeredis[lua]`` extra); without it this module is
skipped. Its Lua has no ``cmsgpack``, so nothing here fires or cancels a job (the XADD path
unpacks the envelope, and so does cancel, to find the group whose retry it removes): those,
and everything else, are covered on real servers in tests/integration/test_scripts.py.
These only cover scheduling, paging, fencing and leases, on paths that never reach
``cmsgpack``: a test here must fail for the bug it names, not for the missing library.
"""

from __future__ import annotations

from typing import TypeVar

import pytest

pytest.importorskip("lupa", reason="fakeredis needs lupa (pip install 'fakeredis[lua]') for Lua")

import fakeredis

from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys
from wheelq.errors import LeaseLostError, ScriptError
from wheelq.store import enqueue, fire, leases
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite
from wheelq.store.executor import SyncExecutor
from wheelq.store.fire import EmitResult
from wheelq.store.scripts import Placed

T = TypeVar("T")

TOKEN = "node-a:1"
OTHER = "node-b:1"
TTL_MS = 30_000
MINUTE_MS = 60_000
KEYS = ShardKeys("fake", 1)
ENVELOPE = Envelope(b"\xff\x00payload", 2, 3, 0).pack()


class Fake:
    """A fresh fakeredis server with an executor over it."""

    def __init__(self) -> None:
        self.r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        self.executor = SyncExecutor(self.r)

    def __call__(self, call: Call[T]) -> T:
        result: T = self.executor.run([call])[0]
        return result

    def now_ms(self) -> int:
        sec, usec = self.r.time()
        return int(sec) * 1000 + int(usec) // 1000


@pytest.fixture
def fake() -> Fake:
    return Fake()


def later(job_id: str, due_ms: int, replace: bool = False) -> JobWrite:
    return JobWrite(job_id, DueSpec("at", due_ms), replace, ENVELOPE)


def test_enqueue_schedules_then_refuses_a_duplicate_then_replaces(fake: Fake) -> None:
    due = fake.now_ms() + MINUTE_MS

    assert fake(enqueue.enqueue(KEYS, [later("j", due)])) == [Placed.SCHEDULED]
    assert fake(enqueue.enqueue(KEYS, [later("j", due + 1)])) == [Placed.DUPLICATE]
    assert fake.r.zscore(KEYS.delayed, "j") == due
    assert fake(enqueue.enqueue(KEYS, [later("j", due + 2, replace=True)])) == [Placed.SCHEDULED]
    assert fake.r.zscore(KEYS.delayed, "j") == due + 2
    assert fake.r.hget(KEYS.jobs, "j") == ENVELOPE
    assert fake.r.exists(KEYS.ready) == 0


def test_enqueue_notes_only_jobs_at_or_below_the_horizon(fake: Fake) -> None:
    horizon = fake.now_ms() + MINUTE_MS
    fake.r.set(KEYS.horizon, horizon)

    placed = fake(
        enqueue.enqueue(
            KEYS, [later("below", horizon - 1), later("at", horizon), later("above", horizon + 1)]
        )
    )

    assert placed == [Placed.SCHEDULED] * 3
    assert fake.r.lrange(KEYS.inbox, 0, -1) == [
        f"{horizon - 1}:below".encode(),
        f"{horizon}:at".encode(),
    ]


def test_reschedule_moves_a_pending_job_and_ignores_an_unknown_one(fake: Fake) -> None:
    now = fake.now_ms()
    fake(enqueue.enqueue(KEYS, [later("j", now + MINUTE_MS)]))

    assert (
        fake(enqueue.reschedule(KEYS, "j", DueSpec("at", now + 2 * MINUTE_MS))) == Placed.SCHEDULED
    )
    assert fake.r.zscore(KEYS.delayed, "j") == now + 2 * MINUTE_MS
    assert fake(enqueue.reschedule(KEYS, "nope", DueSpec("at", now + MINUTE_MS))) is None
    assert fake.r.zcard(KEYS.delayed) == 1


def test_cancel_of_an_id_not_pending_is_false_and_leaves_other_jobs(fake: Fake) -> None:
    fake(enqueue.enqueue(KEYS, [later("j", fake.now_ms() + MINUTE_MS)]))

    assert fake(enqueue.cancel(KEYS, "nope")) is False
    assert fake.r.zcard(KEYS.delayed) == 1 and fake.r.hexists(KEYS.jobs, "j")


def test_wrong_type_is_a_script_error_and_writes_nothing(fake: Fake) -> None:
    fake.r.set(KEYS.ready, "not a stream")

    with pytest.raises(ScriptError, match="wrong type"):
        fake(enqueue.enqueue(KEYS, [later("j", fake.now_ms() + MINUTE_MS)]))

    assert fake.r.exists(KEYS.delayed, KEYS.jobs) == 0


@pytest.mark.parametrize("lease", ["held by another", "absent"])
@pytest.mark.parametrize("mode", ["wheel", "sweep"])
def test_emit_due_is_fenced_by_the_lease(fake: Fake, lease: str, mode: str) -> None:
    """A due job without its envelope: the one emit path this Lua runs without ``cmsgpack``
    (an unfenced call removes it as an orphan), so only the fence keeps it, and the test fails
    for a missing fence itself rather than for the missing library."""
    due = fake.now_ms() - 1000
    fake.r.zadd(KEYS.delayed, {"j": due})
    if lease == "held by another":
        fake.r.set(KEYS.lease, OTHER)
    ids, limit = (["j"], 0) if mode == "wheel" else ([], 10)

    with pytest.raises(LeaseLostError):
        fake(fire.emit_due(KEYS, TOKEN, fake.now_ms(), ids, limit))

    assert fake.r.zrange(KEYS.delayed, 0, -1, withscores=True) == [(b"j", due)]
    assert fake.r.exists(KEYS.ready, KEYS.dead) == 0


def test_emit_due_returns_not_yet_due_by_server_time_and_drops_orphans(fake: Fake) -> None:
    fake(leases.lease_acquire(KEYS, TOKEN, TTL_MS))
    now = fake.now_ms()
    fake.r.zadd(KEYS.delayed, {"orphan": now - 1000, "future": now + MINUTE_MS})
    fake.r.hset(KEYS.jobs, "future", ENVELOPE)

    result = fake(fire.emit_due(KEYS, TOKEN, now + 2 * MINUTE_MS, ["orphan", "future"]))

    assert result == EmitResult(0, False, 1, [("future", now + MINUTE_MS)])
    assert fake.r.zrange(KEYS.delayed, 0, -1) == [b"future"]


def test_preload_full_page_keeps_its_last_millisecond_whole(fake: Fake) -> None:
    fake(leases.lease_acquire(KEYS, TOKEN, TTL_MS))
    crowded = fake.now_ms() + 20_000
    fake.r.zadd(KEYS.delayed, {f"s{i:02}": crowded for i in range(50)})
    fake.r.zadd(KEYS.delayed, {"next": crowded + 1})

    page = fake(fire.preload(KEYS, TOKEN, 0, MINUTE_MS, 10, TTL_MS))
    rest = fake(fire.preload(KEYS, TOKEN, page.cursor_ms, MINUTE_MS, 10, TTL_MS))

    assert (page.full, page.cursor_ms, len(page.jobs)) == (True, crowded, 50)
    assert {due for _, due in page.jobs} == {crowded}
    assert (rest.full, rest.jobs) == (False, [("next", crowded + 1)])
    assert int(fake.r.get(KEYS.horizon)) == rest.cursor_ms


def test_preload_sets_the_horizon_to_its_own_reach(fake: Fake) -> None:
    fake(leases.lease_acquire(KEYS, TOKEN, TTL_MS))
    fake.r.set(KEYS.horizon, fake.now_ms() + 10 * MINUTE_MS)  # an earlier, longer plan

    page = fake(fire.preload(KEYS, TOKEN, 0, MINUTE_MS, 10, TTL_MS, least_ms=500, most_ms=500))

    assert int(fake.r.get(KEYS.horizon)) == page.cursor_ms, "reach: the window (read soon)"
    assert MINUTE_MS - 1000 < fake.r.pttl(KEYS.horizon) <= MINUTE_MS + TTL_MS


def test_lease_acquire_renew_release(fake: Fake) -> None:
    fake.r.rpush(KEYS.inbox, "1:stale")

    first = fake(leases.lease_acquire(KEYS, TOKEN, TTL_MS))
    assert (first.held, first.new) == (True, True)
    assert fake.r.exists(KEYS.inbox) == 0
    assert int(fake.r.get(KEYS.horizon)) == first.server_now_ms

    other = fake(leases.lease_acquire(KEYS, OTHER, TTL_MS))
    assert (other.held, other.holder) == (False, TOKEN)
    assert fake(leases.lease_renew(KEYS, OTHER, TTL_MS)) is False
    assert fake(leases.lease_release(KEYS, OTHER)) is False
    assert fake.r.get(KEYS.lease) == TOKEN.encode()

    assert fake(leases.lease_acquire(KEYS, TOKEN, TTL_MS)).new is False
    assert fake(leases.lease_renew(KEYS, TOKEN, 10 * TTL_MS)) is True
    assert fake.r.pttl(KEYS.lease) > TTL_MS
    assert fake(leases.lease_release(KEYS, TOKEN)) is True
    assert fake.r.exists(KEYS.lease, KEYS.horizon) == 0
