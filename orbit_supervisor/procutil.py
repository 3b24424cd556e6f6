"""Linux process helpers (prctl, killpg, /proc child lists) used by the pool.

The implementation lives in ``orbit_child.procutil`` because the template and the children use
it too, and they must import no supervisor code (see orbit_supervisor/framing.py).
"""

from orbit_child.procutil import (
    child_pids,
    close_fds_except,
    descendant_pids,
    kill_pid,
    killpg,
    set_child_subreaper,
    set_parent_death_signal,
)

__all__ = [
    "child_pids",
    "close_fds_except",
    "descendant_pids",
    "kill_pid",
    "killpg",
    "set_child_subreaper",
    "set_parent_death_signal",
]
