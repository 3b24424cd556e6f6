"""The small JSON-schema shapes every part of the OpenAPI document uses (openapi.py,
openapi_flow.py, openapi_workflows.py)."""

from __future__ import annotations

from typing import Any

ID = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
MS = {"type": "integer", "minimum": 0}
NULLABLE_INT = {"type": ["integer", "null"]}
NULLABLE_STR = {"type": ["string", "null"]}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out
