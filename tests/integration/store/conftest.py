"""The shared fixture of the service tests: ``world``, a store_support.World (a migrated,
seeded database of the test's store with a hand-moved clock) whose methods are the helpers
the tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_support import World, make_world


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    """A migrated, seeded database of the test's store (runs on SQLite and MariaDB)."""
    yield from make_world(db_url)
