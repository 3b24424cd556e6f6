"""Finding 6 of the security review: file modes.

``orbit`` and ``orbit-supervise`` refuse a credentials file that group or others may read,
saying why and how to fix it; the SQLite database, its -wal/-shm files and its directory
are created private (0600 files in a 0700 directory) by a real ``orbit-server``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.server import ServerProcess
from support.waiting import UNIT

from orbit_host.credentials import CredentialsFileError, load_credentials

BIN = Path(sys.executable).parent


def _loose_copy(admin_file: Path, tmp_path: Path, mode: int) -> Path:
    loose = tmp_path / f"loose-{mode:o}.json"
    shutil.copyfile(admin_file, loose)
    os.chmod(loose, mode)
    return loose


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_clients_refuse_credentials_files_others_can_read(tmp_path: Path, mode: int) -> None:
    srv = ServerProcess(tmp_path / "srv")
    with srv:
        admin = srv.bootstrap_admin()
        good = tmp_path / "good.json"
        good.write_bytes(b"")
        os.chmod(good, 0o600)
        good.write_bytes(admin.to_json())
        loose = _loose_copy(good, tmp_path, mode)
        with pytest.raises(CredentialsFileError) as refused:
            load_credentials(loose)
        assert f"chmod 600 {loose}" in refused.value.message
        assert load_credentials(good).credential_id == admin.credential_id

        cli = subprocess.run([str(BIN / "orbit"), "--credentials-file", str(loose), "queues",
                              "create"], capture_output=True, text=True, timeout=60 * UNIT,
                             env=_clean_env())
        assert cli.returncode != 0 and "chmod 600" in cli.stderr, cli.stderr
        assert "Traceback" not in cli.stderr
        sup = subprocess.run([str(BIN / "orbit-supervise"), "--credentials-file", str(loose),
                              "--queue", "0" * 32, "nowhere:HANDLERS"],
                             capture_output=True, text=True, timeout=60 * UNIT, env=_clean_env())
        assert sup.returncode == 3 and "chmod 600" in sup.stderr, sup.stderr
        assert "Traceback" not in sup.stderr


def test_sqlite_database_is_created_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "data"
    db = data_dir / "orbit.db"
    srv = ServerProcess(tmp_path / "srv", db_url=f"sqlite:///{db}")
    with srv:
        srv.bootstrap_admin()  # a write, so the WAL and shared-memory files exist
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        made = sorted(p.name for p in data_dir.iterdir())
        assert "orbit.db" in made and "orbit.db-wal" in made, made
        for path in data_dir.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, (path, oct(path.stat().st_mode))
