"""orbit-server's retention option: durations, and the config's bound."""

from __future__ import annotations

import click
import pytest

from orbit_server.cli import _duration_ms
from orbit_server.config import DAY_MS, ServerConfig
from orbit_wire.errors import OrbitError


@pytest.mark.parametrize(("text", "ms"), [("0", 0), ("30d", 30 * DAY_MS), ("12h", 43_200_000),
                                          ("90m", 5_400_000), ("45s", 45_000), ("5ms", 5),
                                          (" 7D ", 7 * DAY_MS)])
def test_durations(text: str, ms: int) -> None:
    assert _duration_ms(text, "--task-retention") == ms


@pytest.mark.parametrize("text", ["", "d", "30", "-1d", "1.5h", "3w", "12hh"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(click.BadParameter):
        _duration_ms(text, "--task-retention")


def test_retention_default_and_bound() -> None:
    assert ServerConfig().task_retention_ms == 30 * DAY_MS
    assert ServerConfig(task_retention_ms=0).task_retention_ms == 0
    with pytest.raises(OrbitError):
        ServerConfig(task_retention_ms=-1)
