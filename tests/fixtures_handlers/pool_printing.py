"""Prints at import and in every task, to check the supervisor's stdout gets each line once."""

from __future__ import annotations

from typing import Any

from orbit_child import Execution, Handler

print("IMPORT-MARK")  # buffered: stdout is a pipe in the test


def shout(execution: Execution) -> Any:
    print(f"TASK-MARK {execution.payload['n']}")
    return execution.payload["n"]


handlers = [Handler("shout", "1", "1", shout)]
