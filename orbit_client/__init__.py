"""Orbit client: the HTTP API for producers and operators, and the ``orbit`` command.

    from orbit_client import OrbitClient
    with OrbitClient(credentials="producer.json") as orbit:
        task = orbit.submit(queue_id, {"handler": "text.normalize", "handler_version": "v1",
                                       "payload_version": "v1", "payload": {"text": "hi"}})
        task = orbit.wait(task["id"], timeout=30)
"""

from orbit_host.credentials import (
    Credentials,
    CredentialsFileError,
    load_credentials,
    write_credentials,
)

from .client import AsyncOrbitClient, OrbitClient, is_settled
from .errors import CertificateError, OrbitApiError, ServerUnreachable

__all__ = [
    "AsyncOrbitClient",
    "CertificateError",
    "Credentials",
    "CredentialsFileError",
    "OrbitApiError",
    "OrbitClient",
    "ServerUnreachable",
    "is_settled",
    "load_credentials",
    "write_credentials",
]
