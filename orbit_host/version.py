"""The distribution every Orbit command and package ships in (``pip install orbit-tasks``);
``--version`` of orbit, orbit-server and orbit-supervise reads its installed version."""

from __future__ import annotations

DISTRIBUTION = "orbit-tasks"


def installed_version(unknown: str = "dev") -> str:
    """The installed version of the distribution, or ``unknown`` in a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return unknown
