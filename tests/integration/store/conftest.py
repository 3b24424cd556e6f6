"""Fixtures of the service tests (helpers live in store_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_support import World, make_world


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    """A migrated, seeded database of the test's store (runs on SQLite and MariaDB)."""
    yield from make_world(db_url)
