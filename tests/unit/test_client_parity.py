"""`Client` and `AsyncClient` offer the same public methods, with the same names, parameters
and defaults (issue 32: the two clients are written apart, so this keeps them together).
Only what differs by nature is allowed: the async client's methods are coroutines, its
close is ``aclose`` and its context manager ``async with``."""

from __future__ import annotations

import inspect
from typing import Any

from wheelq import AsyncClient, Client

SYNC_ONLY = {"close"}
ASYNC_ONLY = {"aclose", "executor", "events"}  # events: an async iterator


def public(cls: type) -> dict[str, Any]:
    return {name: member for name, member in vars(cls).items() if not name.startswith("_")}


def parameters(member: Any) -> list[tuple[str, Any, Any]]:
    """Each parameter's name, kind and default (annotations are strings here, and the
    return type differs by nature)."""
    if isinstance(member, property):
        return [("<property>", None, None)]
    if isinstance(member, classmethod | staticmethod):
        member = member.__func__
    return [(p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()]


def test_both_clients_have_the_same_public_methods() -> None:
    assert set(public(Client)) - SYNC_ONLY == set(public(AsyncClient)) - ASYNC_ONLY


def test_each_method_takes_the_same_parameters_with_the_same_defaults() -> None:
    sync, aio = public(Client), public(AsyncClient)
    differ = {
        name: (parameters(sync[name]), parameters(aio[name]))
        for name in set(sync) & set(aio)
        if parameters(sync[name]) != parameters(aio[name])
    }
    assert differ == {}


def test_the_async_clients_methods_that_read_redis_are_coroutines() -> None:
    sync, aio = public(Client), public(AsyncClient)
    plain = {"spool_stats", "from_url"}  # reads no Redis / makes the client
    for name in set(sync) & set(aio) - plain:
        if callable(aio[name]):
            assert inspect.iscoroutinefunction(aio[name]), name
            assert not inspect.iscoroutinefunction(sync[name]), name
