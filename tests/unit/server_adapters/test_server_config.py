"""ServerConfig: defaults, the environment, and values out of range as typed errors."""

from __future__ import annotations

import pytest

from orbit_server.config import HOUR_MS, ServerConfig
from orbit_wire.errors import ErrorCode, OrbitError


def test_defaults_and_overrides_over_the_environment() -> None:
    cfg = ServerConfig.from_env({"ORBIT_PORT": "9000", "ORBIT_DB": "sqlite:////tmp/x.db"},
                                port=9100, receipt_retention_ms=None)
    assert (cfg.port, cfg.db_url) == (9100, "sqlite:////tmp/x.db")
    assert cfg.receipt_retention_ms == 24 * HOUR_MS
    assert cfg.heartbeat_ms == 5_000 and cfg.reservation_ttl_ms == 30_000


@pytest.mark.parametrize(("field", "value", "says"), [
    ("receipt_retention_ms", HOUR_MS - 1, "receipt_retention_ms must be >= 1 hour"),
    ("reap_batch", 0, "reap_batch must be positive"),
    ("port", 70_000, "port 70000 is out of range"),
])
def test_out_of_range_is_a_typed_error(field: str, value: int, says: str) -> None:
    with pytest.raises(OrbitError) as caught:
        ServerConfig(**{field: value})  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.BAD_REQUEST and caught.value.message == says
    assert ServerConfig(receipt_retention_ms=HOUR_MS).receipt_retention_ms == HOUR_MS
