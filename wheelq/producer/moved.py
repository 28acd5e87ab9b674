"""The management methods `Client` and `AsyncClient` kept for one release after they moved to
`Admin` and `AsyncAdmin` (docs/operations/upgrading.md lists them): each still works, and
says once per process where it went.

The admins sit above the clients (`wheelq.admin` drives the producer's operations), so a
client cannot name its admin: `wheelq.admin` tells this module how to make one
(`admin_maker`), and a moved method asks it here (`admin_of`). Both go with the moved
methods in `REMOVED_IN`."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Self, overload

REMOVED_IN = "0.4.0"
"""The release without the moved methods (the one after the release that moved them)."""

_warned: set[str] = set()
"""The moved methods used so far in this process, each as ``Class.method``."""

_makers: dict[type, Callable[[Any], Any]] = {}
"""Each client class -> how to make its admin on a client's connections (`Admin.of`)."""


def admin_maker(client_class: type, make: Callable[[Any], Any]) -> None:
    """Make the admin of a `client_class` (or a subclass) with `make` (``Admin.of``)."""
    _makers[client_class] = make


def admin_of(client: object) -> Any:
    """The admin of `client`'s connections, as its class's `admin_maker` makes it."""
    for cls in type(client).__mro__:
        make = _makers.get(cls)
        if make is not None:
            return make(client)
    raise TypeError(f"{type(client).__name__} has no admin: import wheelq.admin first")


def warn_once(used: str, instead: str) -> None:
    """One `DeprecationWarning` per process for `used` (``"Client.pause"``), naming
    `instead` (``"Admin.pause"``), at the line of the program that used it (two frames up:
    past this function and the alias that called it)."""
    if used in _warned:
        return
    _warned.add(used)
    admin = instead.partition(".")[0]
    warnings.warn(
        f"{used} moved to wheelq.{instead} in wheelq 0.3.0 and goes in {REMOVED_IN}: "
        f"make one with {admin}.from_url(url), or {admin}.of(client) on this client's pool",
        DeprecationWarning,
        stacklevel=3,
    )


class Moved:
    """A client's attribute that is now the same-named method of its admin class `admin`
    (``"Admin"``): reading it warns once and gives that method of the client's admin
    (`admin_of`), so it runs on the client's connections with the admin's signature."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.name = self._used = self._instead = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self._used = f"{owner.__name__}.{name}"
        self._instead = f"{self.admin}.{name}"
        self.__doc__ = f"Deprecated: moved to `{self._instead}`."

    @overload
    def __get__(self, client: None, owner: type) -> Self: ...
    @overload
    def __get__(self, client: object, owner: type | None = None) -> Any: ...
    def __get__(self, client: object, owner: type | None = None) -> Any:
        if client is None:
            return self
        warn_once(self._used, self._instead)
        return getattr(admin_of(client), self.name)
