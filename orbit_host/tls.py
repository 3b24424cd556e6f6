"""TLS trust for Orbit's clients (the ``orbit`` CLI, the Python client, ``orbit-supervise``):
a CA file to verify the server's certificate (``--ca-file`` / ``ORBIT_CA_FILE``), and a
message that names a certificate failure as such instead of "no answer"."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from orbit_wire.errors import ErrorCode, OrbitError

CA_FILE_ENV = "ORBIT_CA_FILE"


class CaFileError(OrbitError):
    """The CA file cannot be read or holds no certificate."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.BAD_REQUEST, message)


def ca_file_from(ca_file: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The CA file given, else ORBIT_CA_FILE, else None (the system's trust store)."""
    env = os.environ if env is None else env
    return ca_file or env.get(CA_FILE_ENV) or None


def client_ssl_context(ca_file: str) -> ssl.SSLContext:
    """A verifying client context that trusts the certificates in ``ca_file`` (PEM)."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except FileNotFoundError:
        raise CaFileError(f"CA file {ca_file} does not exist") from None
    except (OSError, ssl.SSLError) as exc:
        raise CaFileError(f"CA file {ca_file} cannot be used: {exc}") from None


def refused_verification(exc: BaseException | None) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure ``exc`` is, or was caused by (a library may
    wrap it a few causes down); else None."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def certificate_failure(exc: BaseException | None) -> str | None:
    """If ``exc`` (or what caused it) is a certificate verification failure, a one-line
    explanation naming it; else None."""
    refused = refused_verification(exc)
    if refused is None:
        return None
    reason = refused.verify_message or refused.reason or str(refused)
    return (f"the server's TLS certificate was not accepted ({reason}); pass the CA "
            f"that signed it with --ca-file or {CA_FILE_ENV}")
