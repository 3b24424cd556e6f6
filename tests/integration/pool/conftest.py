"""Pool tests import handler modules from tests/fixtures_handlers, only in the template."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from pool_support import FIXTURES


@pytest.fixture(autouse=True)
def fixture_handlers_on_path() -> Iterator[None]:
    # The pool hands the parent's sys.path to the template; the parent never imports them.
    sys.path.insert(0, str(FIXTURES))
    try:
        yield
    finally:
        sys.path.remove(str(FIXTURES))
