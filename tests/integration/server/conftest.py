"""Fixtures for the server integration tests (helpers live in tests/support/lanes.py)."""

from __future__ import annotations

import pytest
from support.lanes import Lane
from support.orbit_http import OrbitEnv


@pytest.fixture
def lane(orbit: OrbitEnv) -> Lane:
    return Lane.open(orbit)
