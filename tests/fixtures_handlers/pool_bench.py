"""Handlers for scripts/bench_pool.py. The imports stand in for a real application's
preloaded dependencies: the template pays for them once, forked children share them."""

from __future__ import annotations

import decimal  # noqa: F401
import email.parser  # noqa: F401
import http.client  # noqa: F401
import json  # noqa: F401
import sqlite3  # noqa: F401
import time
import xml.etree.ElementTree  # noqa: F401
from typing import Any

from common_handlers import noop

from orbit_child import Execution, Handler


def sleep(execution: Execution) -> Any:
    time.sleep(60)
    return 1


handlers = [Handler("noop", "1", "1", noop), Handler("sleep", "1", "1", sleep)]
