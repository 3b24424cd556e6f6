"""The distribution every Orbit command and package ships in (``pip install orbit-tasks``);
``--version`` of orbit, orbit-server and orbit-supervise reads its installed version."""

from __future__ import annotations

DISTRIBUTION = "orbit-tasks"
