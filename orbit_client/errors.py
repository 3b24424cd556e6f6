"""Errors the client raises: every failure of an API call is an OrbitApiError (where it
sits in the one error tree: orbit_wire/errors.py). A task that did not succeed is a
TaskError (tasks.py), not an API failure."""

from __future__ import annotations

from orbit_wire.errors import ErrorCode, OrbitError

# What an error answer without a readable body means, by HTTP status.
_CODE_BY_STATUS: dict[int, ErrorCode] = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.PERMISSION_DENIED,
    404: ErrorCode.NOT_FOUND,
    409: ErrorCode.CONFLICT,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    429: ErrorCode.RATE_LIMITED,
    502: ErrorCode.UNAVAILABLE,
    503: ErrorCode.UNAVAILABLE,
    504: ErrorCode.UNAVAILABLE,
}

# Messages are printed on one line by the CLI; a misbehaving peer must not flood it.
_MAX_MESSAGE = 500


class OrbitApiError(OrbitError):
    """An API call failed. ``code`` is stable (ErrorCode); ``status`` is the HTTP status, or
    None when the request never got an answer or was refused before it was sent."""

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool | None = None,
    ):
        super().__init__(code, message[:_MAX_MESSAGE], retryable=retryable)
        self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value}, status={self.status}: {self.message})"


class ServerUnreachable(OrbitApiError):
    """No answer at all (connect failure, reset, timeout): UNAVAILABLE, retryable. Never
    proof that a request was not applied."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.UNAVAILABLE, message, status=None, retryable=True)


class CertificateError(OrbitApiError):
    """The TLS handshake failed on the server's certificate (untrusted, expired, for another
    name): UNAVAILABLE, not retryable; no request was sent."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.UNAVAILABLE, message, status=None, retryable=False)


# The status an error of each code is answered with over HTTP: the inverse of the table above,
# with the server's choices where it lists several statuses or none.
_STATUS_BY_CODE: dict[ErrorCode, int] = {
    **{code: status for status, code in reversed(_CODE_BY_STATUS.items())},
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
}


def status_for_code(code: ErrorCode) -> int:
    """The HTTP status the server answers an error of ``code`` with (400 for the codes of
    refused input), so an error that came over the producer channel reads like one that
    came over HTTP."""
    return _STATUS_BY_CODE.get(code, 400)


def unreachable(url: str, kind: str) -> ServerUnreachable:
    """No answer from ``url``; ``kind`` says what went wrong (an exception class name)."""
    return ServerUnreachable(f"no answer from {url}: {kind}")


def certificate_refused(url: str, reason: str) -> CertificateError:
    return CertificateError(f"the TLS certificate of {url} was refused: {reason}")


def code_for_status(status: int) -> ErrorCode:
    """The error code an answer with ``status`` and no usable error body stands for."""
    if status in _CODE_BY_STATUS:
        return _CODE_BY_STATUS[status]
    if status >= 500:
        return ErrorCode.INTERNAL
    return ErrorCode.BAD_REQUEST
