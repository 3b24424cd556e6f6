"""OrbitClient and AsyncOrbitClient are one API (orbit_client/client.py): the same public
methods with the same parameters, every asyncio one a coroutine (an async iterator where the
blocking one is an iterator). A method added to, or changed in, one client only fails here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from orbit_client import AsyncOrbitClient, OrbitClient

# Named apart on purpose: an asyncio close is ``aclose`` (as httpx and asyncio name it).
RENAMED = {"close": "aclose"}


def public(cls: type) -> dict[str, Callable[..., Any]]:
    return {name: member for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")}


def parameters(method: Callable[..., Any]) -> list[tuple[str, object, object, object]]:
    return [(p.name, p.kind, p.default, p.annotation)
            for p in inspect.signature(method).parameters.values()]


def test_both_clients_have_the_same_public_methods() -> None:
    blocking = sorted(RENAMED.get(name, name) for name in public(OrbitClient))
    assert blocking == sorted(public(AsyncOrbitClient))


def test_each_method_takes_the_same_parameters() -> None:
    twins = public(AsyncOrbitClient)
    for name, method in public(OrbitClient).items():
        assert parameters(method) == parameters(twins[RENAMED.get(name, name)]), name
    assert parameters(OrbitClient.__init__) == parameters(AsyncOrbitClient.__init__)


def test_the_asyncio_methods_are_awaited_or_iterated_where_the_blocking_ones_return() -> None:
    twins = public(AsyncOrbitClient)
    for name, method in public(OrbitClient).items():
        twin = twins[RENAMED.get(name, name)]
        if inspect.isgeneratorfunction(method):
            assert inspect.isasyncgenfunction(twin), name
        else:
            assert inspect.iscoroutinefunction(twin), name
