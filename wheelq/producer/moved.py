"""The management methods `Client` and `AsyncClient` kept for one release after they moved to
`Admin` and `AsyncAdmin` (docs/operations/upgrading.md lists them): each still works, and
says once per process where it went."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")

REMOVED_IN = "0.4.0"
"""The release without the moved methods (the one after the release that moved them)."""

_warned: set[str] = set()
"""The moved methods used so far in this process, each as ``Class.method``."""


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


class Moved(Generic[A, P, R]):
    """A client's attribute that is now the admin's method `method`: reading it warns once
    and gives that method bound to the client's admin (``client._admin``), so it runs on
    the client's connections with the same signature, which type checkers see."""

    def __init__(self, method: Callable[Concatenate[A, P], R]) -> None:
        self._method = method
        self._used = self._instead = method.__qualname__
        self.__doc__ = f"Deprecated: moved to `{method.__qualname__}`."

    def __set_name__(self, owner: type, name: str) -> None:
        self._used = f"{owner.__name__}.{name}"

    @overload
    def __get__(self, client: None, owner: type) -> Self: ...
    @overload
    def __get__(self, client: object, owner: type | None = None) -> Callable[P, R]: ...
    def __get__(self, client: object, owner: type | None = None) -> Any:
        if client is None:
            return self
        warn_once(self._used, self._instead)
        return partial(self._method, client._admin)  # type: ignore[attr-defined]
