"""Exit codes, and the "what to do next" every error line ends with.

    0   done; with --wait: the task SUCCEEDED
    1   the server answered with an error (UNAUTHENTICATED, NOT_FOUND, CONFLICT, ...)
    2   usage: bad options, or input refused before sending
    3   credentials file missing, unreadable, malformed or unwritable (or none given)
    4   server unreachable (connection refused, reset or timed out)
    5   the server's TLS certificate was refused
    10  --wait: the task FAILED
    11  --wait: the task NEEDS_REVIEW
    12  --wait: the task was CANCELLED
    13  --wait: the wait ended before the task finished (still PENDING or RUNNING)
    130 interrupted (Ctrl-C); a task being waited for goes on
"""

from __future__ import annotations

from orbit_host.credentials import CredentialsFileError
from orbit_wire.errors import ErrorCode, OrbitError

from ..errors import CertificateError, OrbitApiError, ServerUnreachable

EXIT_OK = 0
EXIT_API = 1
EXIT_USAGE = 2
EXIT_CREDENTIALS = 3
EXIT_UNREACHABLE = 4
EXIT_CERTIFICATE = 5
EXIT_FAILED = 10
EXIT_NEEDS_REVIEW = 11
EXIT_CANCELLED = 12
EXIT_WAIT_ENDED = 13
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT

_BY_STATE = {
    "SUCCEEDED": EXIT_OK,
    "FAILED": EXIT_FAILED,
    "NEEDS_REVIEW": EXIT_NEEDS_REVIEW,
    "CANCELLED": EXIT_CANCELLED,
}

EPILOG = (
    "Exit codes: 0 ok (with --wait: SUCCEEDED), 1 the server answered with an error, "
    "2 usage or input refused before sending, 3 credentials file problem, 4 server "
    "unreachable, 5 TLS certificate refused; with --wait: 10 FAILED, 11 NEEDS_REVIEW, "
    "12 CANCELLED, 13 the wait ended first. See docs/cli.md."
)

HOW_TO_GET_CREDENTIALS = (
    "an admin makes one with `orbit credentials create --role producer --queue QUEUE "
    "-o FILE` (the first admin: `orbit-server bootstrap-admin -o FILE` on the server host)"
)


def exit_code_for(exc: OrbitError) -> int:
    """Which exit code an error ends the command with."""
    if isinstance(exc, CredentialsFileError):
        return EXIT_CREDENTIALS
    if isinstance(exc, CertificateError):
        return EXIT_CERTIFICATE
    if isinstance(exc, ServerUnreachable):
        return EXIT_UNREACHABLE
    if isinstance(exc, OrbitApiError) and exc.status is not None:
        return EXIT_API
    return EXIT_USAGE  # refused locally: bad ID, bad JSON, out-of-range option


def exit_code_for_state(state: str) -> int:
    """The exit code of a --wait that ended with the task in ``state``."""
    return _BY_STATE.get(state, EXIT_WAIT_ENDED)


def next_step(exc: OrbitError, url: str | None) -> str | None:
    """What the user can do about ``exc``, or None when the message says it already."""
    where = url or "the server URL"
    if isinstance(exc, CredentialsFileError):
        if "does not exist" in exc.message or exc.message.startswith("no credentials"):
            return HOW_TO_GET_CREDENTIALS
        return "fix the file, or get a new one: " + HOW_TO_GET_CREDENTIALS
    if isinstance(exc, CertificateError):
        return (f"check that {where} is the right server; if its certificate is signed by "
                "your own CA, pass that CA's certificate with --ca-file (or ORBIT_CA_FILE)")
    if isinstance(exc, ServerUnreachable):
        if "Timeout" in exc.message:
            return (f"the server at {where} did not answer in time: it may be overloaded or "
                    "stopped; try again or raise --timeout (a submit may still have been "
                    "applied: repeat it with the same --operation-key)")
        return (f"is orbit-server running at {where}? Start it with `orbit-server serve`, "
                "or point --url (or ORBIT_URL) at it")
    code = exc.code
    if code is ErrorCode.UNAUTHENTICATED:
        return ("the credential was refused (revoked, mistyped, or made by another server): "
                + HOW_TO_GET_CREDENTIALS)
    if code is ErrorCode.PERMISSION_DENIED:
        return ("use a credential that may do this: admin for queues and credentials, a "
                "producer of the task's queue for tasks")
    if code is ErrorCode.NOT_FOUND and getattr(exc, "status", None) is not None:
        return ("check the ID (`orbit tasks list` finds tasks), and that your credential "
                "may use its queue")
    return None
