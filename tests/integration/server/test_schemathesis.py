"""A short schemathesis run against a real orbit-server on SQLite (security finding 10):
every check, every phase, a bounded number of examples per operation, zero failures. The
long run is scripts/fuzz.py; what was run is recorded in docs/security.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fuzzing import run_schemathesis
from support.server import ServerProcess


@pytest.mark.timeout(150)
def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    # The failed-authentication limit off: schemathesis sends wrong tokens on purpose, and
    # a 429 for the admin's own next request would be the limit working, not a finding.
    srv = ServerProcess(tmp_path / "server", extra_args=("--auth-failures-per-s", "0"))
    srv.start()
    try:
        admin = srv.bootstrap_admin()
        code, output = run_schemathesis(srv.url, admin.bearer, tmp_path / "st",
                                        max_examples=15, seed=1, timeout_s=120)
        assert code == 0, output[-6000:]
        # Its closing line: "No issues found" or "N warning(s)" (e.g. missing test data),
        # never failures or errors (the exit code says so too).
        last = output.strip().splitlines()[-1]
        assert "failure" not in last and "error" not in last, output[-3000:]
        assert " passed" in output, output[-3000:]
        assert srv.proc is not None and srv.proc.poll() is None, "the server died"
        assert "Traceback" not in srv.log_tail(200_000)
    finally:
        srv.stop()
