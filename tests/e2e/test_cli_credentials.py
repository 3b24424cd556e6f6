"""``orbit credentials list | rotate | revoke`` and ``create --expires-in`` against a real
server: the list shows no secret, a rotation's old secret works for its grace period and
is then refused, a revoked credential is refused."""

from __future__ import annotations

from pathlib import Path

import orjson
from support.cli import one_error_line, run_orbit, run_orbit_tty
from support.orbit_http import OrbitEnv
from support.waiting import wait_until

from orbit_host.credentials import load_credentials, write_credentials


def test_list_rotate_revoke_and_expiry(orbit: OrbitEnv, tmp_path: Path) -> None:
    admin_file = tmp_path / "admin.json"
    write_credentials(admin_file, orbit.admin)
    admin = ("--credentials-file", str(admin_file))
    queue = orbit.queue()
    made = run_orbit(*admin, "credentials", "create", "--role", "producer", "--queue", queue,
                     "--expires-in", "30d", "-o", str(tmp_path / "p.json"))
    assert made.returncode == 0, made.stderr
    old = load_credentials(tmp_path / "p.json")
    stats = ("queues", "stats", queue)
    assert run_orbit("--credentials-file", str(tmp_path / "p.json"), *stats).returncode == 0

    rotated = run_orbit(*admin, "credentials", "rotate", old.credential_id, "--grace", "2s",
                        "-o", str(tmp_path / "p2.json"))
    assert rotated.returncode == 0, rotated.stderr
    new = load_credentials(tmp_path / "p2.json")
    assert new.credential_id == old.credential_id and new.secret != old.secret
    assert new.secret not in rotated.stdout + rotated.stderr
    assert run_orbit("--credentials-file", str(tmp_path / "p.json"), *stats).returncode == 0
    wait_until(lambda: run_orbit("--credentials-file", str(tmp_path / "p.json"),
                                 *stats).returncode == 1,
               timeout=20, interval=0.2, what="the old secret refused after its grace")
    assert run_orbit("--credentials-file", str(tmp_path / "p2.json"), *stats).returncode == 0

    listed = run_orbit(*admin, "credentials", "list")
    assert listed.returncode == 0, listed.stderr
    entries = {c["credential_id"]: c for c in orjson.loads(listed.stdout)["credentials"]}
    mine = entries[old.credential_id]
    assert mine["expires_at_ms"] and mine["last_used_at_ms"] and mine["revoked_at_ms"] is None
    assert new.secret not in listed.stdout and old.secret not in listed.stdout
    assert run_orbit(*admin, "credentials", "list", "--json").stdout == listed.stdout
    # On a terminal, a table; a narrow one cuts no ID.
    shown = run_orbit_tty(*admin, "credentials", "list", columns=100)
    assert shown.returncode == 0
    assert old.credential_id in shown.text and queue in shown.text and "producer" in shown.text
    assert new.secret not in shown.text

    assert run_orbit(*admin, "credentials", "revoke", old.credential_id).returncode == 0
    refused = run_orbit("--credentials-file", str(tmp_path / "p2.json"), *stats)
    assert refused.returncode == 1
    one_error_line(refused, "UNAUTHENTICATED")
