"""Finding 7 of the security review: a handler cannot reach the worker's secrets.

A real handler (tests/fixtures_handlers/isolation_handlers.py) tries every way in: the
supervisor's /proc/<pid>/environ and mem, the template's environment, the credentials file,
and its own inherited descriptors. These tests run as root, which may read any process's
memory, so the handler runs as another user (``--child-user``): the ownership and the
parent's non-dumpable flag keep it out. From outside, the supervisor's own environment
block no longer holds the secret-bearing variables, and the child limits are in force.
"""

from __future__ import annotations

import errno
import os
import pwd
from pathlib import Path

import pytest
from supervisor_support import SupEnv, submit, wait_task

from orbit_host.credentials import load_credentials

SECRET = "s3cret-value-of-an-orbit-token-variable"


def _other_user() -> str:
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user to run children as")
    return "nobody"


def _template_environ_seen() -> str:
    """What the handler gets from the template's /proc/<pid>/environ. The template switched
    to the child user, so the kernel made it dumpable only as /proc/sys/fs/suid_dumpable
    says (proc(5)): under 0 or 2 its /proc files belong to root and the open is refused;
    under 1 the child user reads it (without the secret: the supervisor removed it)."""
    mode = Path("/proc/sys/fs/suid_dumpable").read_text().strip()
    return "read" if mode == "1" else f"refused:{errno.EACCES}"


@pytest.mark.skipif(os.geteuid() != 0, reason="--child-user needs root")
def test_handler_cannot_reach_worker_secrets(sup_env: SupEnv, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    user = _other_user()
    creds = sup_env.credentials_file
    worker_secret = load_credentials(creds).secret
    # Secret-bearing variables the supervisor is started with (its credentials path among them).
    monkeypatch.setenv("ORBIT_TEST_API_TOKEN", SECRET)
    monkeypatch.setenv("ORBIT_CREDENTIALS_FILE", str(creds))
    sup = sup_env.start(handlers="isolation_handlers:HANDLERS", workers=1,
                        credentials_file=creds,
                        extra=("--child-user", user, "--child-rlimit-as", "4G",
                               "--child-rlimit-cpu", "600", "--child-nofile", "256"))
    outcomes = {}
    for secret in (SECRET, worker_secret):
        task_id = submit(sup_env.producer, sup_env.queue_id, "probe", {
            "supervisor_pid": sup.pid, "credentials_file": str(creds), "secret": secret})
        done = wait_task(sup_env.producer, task_id)
        assert done["state"] == "SUCCEEDED", done
        outcomes[secret] = done["result"]
    for seen in outcomes.values():
        assert seen["uid"] == pwd.getpwnam(user).pw_uid
        for way in ("supervisor_environ", "supervisor_mem", "credentials_file"):
            assert seen[way].startswith("refused"), (way, seen)
        assert seen["template_environ"] == _template_environ_seen(), seen
        assert not seen["own_environ_has_secret"]
        assert not any(str(creds) in target for target in seen["fds"].values()), seen["fds"]
        assert seen["limits"] == {"as": 4 << 30, "cpu": 600, "nofile": 256}, seen["limits"]
    # From outside (as root): the variables are gone from the parent's environment block.
    block = Path(f"/proc/{sup.pid}/environ").read_bytes()
    assert SECRET.encode() not in block
    assert b"ORBIT_TEST_API_TOKEN" not in block and str(creds).encode() not in block
    assert str(creds) not in "".join(os.readlink(f"/proc/{sup.pid}/fd/{fd}")
                                     for fd in os.listdir(f"/proc/{sup.pid}/fd"))


def test_child_user_must_exist(sup_env: SupEnv) -> None:
    sup = sup_env.start(extra=("--child-user", "no-such-user-xyz"))
    assert sup.wait() == 2
    assert "no such user" in sup.log()
