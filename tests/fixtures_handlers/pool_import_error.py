"""A handler module that fails while being imported."""

raise RuntimeError("configuration missing: ORBIT_EXAMPLE_SETTING")
