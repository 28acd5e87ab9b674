"""`Admin` and `AsyncAdmin`, and the clients' moved methods (issue 45, item 3): every
managing call moved off `Client` and `AsyncClient` still works there for one release, warns
once per process at the caller's line naming its new home, and does what the admin's does,
on the client's own connections."""

from __future__ import annotations

import contextlib
import inspect
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wheelq import Admin, AsyncAdmin, AsyncClient, Client, PauseState, WheelqError
from wheelq.producer import moved

pytestmark = pytest.mark.cluster_too

EPOCH_MS = re.compile(r"\b1\d{12}\b")
Call = Callable[[Any, str], Any]
"""One managing call on a client or an admin, of a topic that has group ``g`` and
schedule ``s``: what it returns (`answer` makes it comparable)."""

CALLS: dict[str, Call] = {
    "create_topic": lambda o, t: o.create_topic(t, 4),
    "topics": lambda o, t: o.topics(),
    "shards": lambda o, t: o.shards(t),
    "groups": lambda o, t: o.groups(t),
    "create_group": lambda o, t: o.create_group(t, "h"),
    "delete_group": lambda o, t: o.delete_group(t, "g"),
    "pause": lambda o, t: o.pause(t, "g"),
    "resume": lambda o, t: o.resume(t, "g"),
    "paused": lambda o, t: o.paused(t),
    "set_events": lambda o, t: o.set_events(t, max_len=500),
    "events_config": lambda o, t: o.events_config(t),
    "stats": lambda o, t: o.stats(t),
    "dead_letters": lambda o, t: o.dead_letters(t),
    "replay": lambda o, t: o.replay(t),
    "purge_dead": lambda o, t: o.purge_dead(t),
    "set_limits": lambda o, t: o.set_limits(t, max_pending=1000),
    "limits": lambda o, t: o.limits(t),
    "schedule": lambda o, t: o.schedule("s", t, {"n": 1}, every_ms=3_600_000),
    "get_schedule": lambda o, t: o.get_schedule("s", t),
    "schedules": lambda o, t: o.schedules(t),
    "pause_schedule": lambda o, t: o.pause_schedule("s", t),
    "resume_schedule": lambda o, t: o.resume_schedule("s", t),
    "unschedule": lambda o, t: o.unschedule("s", t),
    "drop_topic": lambda o, t: o.drop_topic(t, force=True),
}


def answer(value: Any, topic: str) -> Any:
    """What a call on `topic` returned, without what differs from one call to the next:
    the topic's name, the times (a pause's start, a schedule's update: epoch ms), the topics
    other tests made."""
    if isinstance(value, PauseState):
        return (value.paused, sorted(value.groups))
    if isinstance(value, dict):  # topics(): this one's shard count
        return value.get(topic)
    return EPOCH_MS.sub("<ms>", repr(value).replace(topic, "<topic>"))


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first use of each moved method (the set is per process)."""
    monkeypatch.setattr(moved, "_warned", set())


async def settled(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def prepare(admin: Any, topic: str) -> None:
    await settled(admin.create_topic(topic, 4))
    await settled(admin.create_group(topic, "g"))
    await settled(admin.schedule("s", topic, {"n": 1}, every_ms=3_600_000))


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_moved_method_warns_once_at_the_callers_line_and_does_what_the_admins_does(
    redis_url: str, topic: str, kind: str, name: str
) -> None:
    make: Callable[[str], Any] = Client.from_url if kind == "sync" else AsyncClient.from_url
    admin_class = Admin if kind == "sync" else AsyncAdmin
    client, other = make(redis_url), make(redis_url)
    try:
        via_admin, via_alias = f"{topic}-a", f"{topic}-b"
        admin = admin_class.of(other)
        await prepare(admin, via_admin)
        await prepare(admin, via_alias)
        expected = answer(await settled(CALLS[name](admin, via_admin)), via_admin)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = answer(await settled(CALLS[name](client, via_alias)), via_alias)
            with contextlib.suppress(WheelqError):  # again (a delete is then refused)
                await settled(CALLS[name](client, via_alias))  # and no second warning
        assert got == expected
        said = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        assert len(said) == 1, [str(w.message) for w in caught]
        used = f"{type(client).__name__}.{name}"
        assert str(said[0].message).startswith(
            f"{used} moved to wheelq.{admin_class.__name__}.{name} in wheelq 0.3.0"
        )
        assert Path(said[0].filename) == Path(__file__), "the warning points at the caller"
    finally:
        for c in (client, other):
            await settled(c.close() if kind == "sync" else c.aclose())


async def test_an_admin_of_a_client_shares_its_pool_and_closing_it_leaves_the_client_open(
    redis_url: str, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        assert AsyncAdmin.of(client) is admin
        assert admin.redis is client.redis and admin.executor is client.executor
        await admin.create_topic(topic, 2)
        await admin.aclose()  # the client's: closing the admin closes nothing
        job = await client.enqueue(topic, "x", delay=60)
        assert (await admin.stats(topic)).pending == 1  # type: ignore[union-attr]
        assert await client.cancel(topic, job)
    with Client.from_url(redis_url) as sync:
        admin_sync = Admin.of(sync)
        assert admin_sync.redis is sync.redis
        admin_sync.close()
        assert sync.enqueue(topic, "y", delay=60)
        assert admin_sync.stats(topic).pending == 1  # type: ignore[union-attr]


async def test_an_admin_from_a_url_owns_its_connections(redis_url: str, topic: str) -> None:
    with Admin.from_url(redis_url) as admin:
        assert admin.create_topic(topic, 3) == 3
        assert admin.pause(topic).paused
    async with AsyncAdmin.from_url(redis_url) as aadmin:
        assert (await aadmin.paused(topic)).paused
        assert not (await aadmin.resume(topic)).paused
        assert await aadmin.drop_topic(topic)


def test_the_moved_methods_and_the_admins_keep_their_docstrings() -> None:
    """help(client.pause) says where it went; help(Admin.pause) has the whole text."""
    for name in CALLS:
        assert (getattr(Client, name).__doc__ or "").startswith("Deprecated: moved to"), name
        assert (getattr(AsyncClient, name).__doc__ or "").startswith("Deprecated: moved"), name
        assert len(getattr(Admin, name).__doc__ or "") > 40, name
        assert getattr(AsyncAdmin, name).__doc__ == getattr(Admin, name).__doc__, name
