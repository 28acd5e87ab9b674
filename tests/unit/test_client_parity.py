"""The four classes a program calls: `Client` and `AsyncClient` produce and answer per job,
`Admin` and `AsyncAdmin` manage. Each pair offers the same public methods, with the same
names, parameters and defaults (issue 32: the classes are written apart, so this keeps them
together); a producing call and a managing call are each spelt on one side only (issue 45);
and for one release each client keeps every method that moved, as an alias of its admin's.
Only what differs by nature is allowed: the async methods are coroutines, close is
``aclose`` and the context manager ``async with``, and following events is async only."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from wheelq import Admin, AsyncAdmin, AsyncClient, Client
from wheelq.producer.moved import Moved

SYNC_ONLY = {"close"}
ASYNC_ONLY = {"aclose", "executor", "events", "producer", "durability"}
# events: an async iterator; producer, durability: what a relay beside the client replays with
LIFECYCLE = {"from_url", "redis", "close", "aclose", "executor"}
"""What every class has of its own: making it, its connection, closing it."""
PAIRS = [(Client, AsyncClient), (Admin, AsyncAdmin)]


def public(cls: type) -> dict[str, Any]:
    """The public members of `cls`, its own and those of its bases (`Connected`)."""
    members: dict[str, Any] = {}
    for owner in reversed(cls.__mro__[:-1]):  # the nearest owner's member wins
        members.update(vars(owner))
    return {name: member for name, member in members.items() if not name.startswith("_")}


def is_moved(member: Any) -> bool:
    """A kept alias: a `Moved`, or a method written out (``stats``, which adds the client's
    spool) whose docstring says where it moved."""
    return isinstance(member, Moved) or (member.__doc__ or "").startswith("Deprecated: moved")


def current(cls: type) -> dict[str, Any]:
    """The public members that are not kept aliases of a moved method."""
    return {name: m for name, m in public(cls).items() if not is_moved(m)}


def moved(cls: type) -> set[str]:
    """The names `cls` keeps as aliases of its admin's methods."""
    return {name for name, m in public(cls).items() if is_moved(m)}


def parameters(member: Any) -> list[tuple[str, Any, Any]]:
    """Each parameter's name, kind and default (annotations are strings here, and the
    return type differs by nature)."""
    if isinstance(member, property):
        return [("<property>", None, None)]
    if isinstance(member, Moved):
        return [("<moved>", member._used.split(".")[1], None)]
    if isinstance(member, classmethod | staticmethod):
        member = member.__func__
    return [(p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()]


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=["clients", "admins"])
def test_each_pair_has_the_same_public_methods(sync: type, aio: type) -> None:
    assert set(public(sync)) - SYNC_ONLY == set(public(aio)) - ASYNC_ONLY


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=["clients", "admins"])
def test_each_method_takes_the_same_parameters_with_the_same_defaults(
    sync: type, aio: type
) -> None:
    one, other = public(sync), public(aio)
    differ = {
        name: (parameters(one[name]), parameters(other[name]))
        for name in set(one) & set(other)
        if parameters(one[name]) != parameters(other[name])
    }
    assert differ == {}


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=["clients", "admins"])
def test_the_async_methods_that_read_redis_are_coroutines(sync: type, aio: type) -> None:
    one, other = current(sync), current(aio)
    plain = {"spool_stats", "from_url", "of"}  # reads no Redis / makes the object
    for name in set(one) & set(other) - plain:
        if callable(other[name]):
            assert inspect.iscoroutinefunction(other[name]), name
            assert not inspect.iscoroutinefunction(one[name]), name
    assert inspect.isasyncgenfunction(AsyncAdmin.events)


@pytest.mark.parametrize(("client", "admin"), [(Client, Admin), (AsyncClient, AsyncAdmin)])
def test_producing_and_managing_are_each_spelt_on_one_side(client: type, admin: type) -> None:
    assert set(current(client)) & set(current(admin)) - LIFECYCLE == set()


SINCE_THE_SPLIT = {
    "jobs",
    "bulk",
    "processes",
    "forecast",
    "set_far_horizon",
    "sync_schedules",
    "line",
}
"""Managing methods added after the split: only the admins have them (no alias to keep)."""


@pytest.mark.parametrize(("client", "admin"), [(Client, Admin), (AsyncClient, AsyncAdmin)])
def test_the_client_keeps_every_managing_method_as_its_admins_for_one_release(
    client: type, admin: type
) -> None:
    managing = set(current(admin)) - LIFECYCLE - {"of"} - SINCE_THE_SPLIT
    assert moved(client) == managing
    for name in moved(client) - {"stats"}:
        alias: Moved = vars(client)[name]
        assert (alias.admin, alias.name) == (admin.__name__, name)
        assert alias._used == f"{client.__name__}.{name}"
