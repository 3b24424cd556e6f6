"""The supervisor's option defaults, read by every layer that offers the options (pure).

``SupervisorOptions`` (options.py), ``SessionConfig`` (session.py), ``Supervisor.__init__``
(app.py) and the ``orbit-supervise`` flags (cli.py) all take their defaults from here, so
the documented defaults (docs/supervisor.md, "Options") have one source. The allowed
ranges live beside the validation, in options.py.
"""

from __future__ import annotations

WORKERS = 4  # child processes = handlers running at once = the session's capacity
# Nice steps the children run below the supervisor: with the CPUs saturated the parent's
# lease timers then run on time (docs/supervisor.md "Kill"; docs/benchmarks.md).
CHILD_NICE = 10
SHUTDOWN_TIMEOUT = 30.0  # seconds for the whole wind-down, counted from the stop signal
RECONNECT_MIN_DELAY = 0.2  # seconds: the reconnect backoff's first delay
RECONNECT_MAX_DELAY = 5.0  # seconds: the reconnect backoff's cap
