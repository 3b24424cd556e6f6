"""Fixtures for the server integration tests (helpers live in tests/support/lanes.py)."""

from __future__ import annotations

import pytest
from support.lanes import Lane
from support.orbit_http import OrbitEnv


@pytest.fixture
def lane(orbit: OrbitEnv) -> Lane:
    queue = orbit.queue()
    return Lane(orbit, queue, orbit.producer(queue), orbit.worker_credential(queue))
