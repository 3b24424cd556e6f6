"""Handler lists the template must reject at start (and one valid registry object)."""

from __future__ import annotations

from typing import Any

from orbit_child import Execution, Handler


def ok(execution: Execution) -> Any:
    return {"ok": True}


empty: list[Handler] = []
duplicates = [Handler("same", "1", "1", ok), Handler("same", "1", "1", ok)]
non_callable = [Handler("x", "1", "1", 42)]  # type: ignore[arg-type]
not_handlers = ["echo"]
too_many = [Handler(f"h{i}", "1", "1", ok) for i in range(33)]
bad_name = [Handler("has space", "1", "1", ok)]
number = 5


class Registry:
    def __init__(self) -> None:
        self.handlers = (Handler("registry_ok", "2", "1", ok),
                         Handler("registry_ok", "2", "2", ok))


registry = Registry()
