"""A handler module whose import fails inside the standard library, called from line 6."""

import os

# The setting is missing: os.environ raises KeyError in os.py, on behalf of this line.
DATABASE_URL = os.environ["ORBIT_TEST_SETTING_NOBODY_SETS"]
