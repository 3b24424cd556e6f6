"""Every route of the app appears in the OpenAPI document, with its methods."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.routing import Route, WebSocketRoute

from orbit_server.app import OrbitServer
from orbit_server.config import ServerConfig
from orbit_server.dashboard import PREFIX
from orbit_server.openapi import openapi_document


def test_every_route_is_documented(tmp_path: Path) -> None:
    server = OrbitServer(ServerConfig(db_url=f"sqlite:///{tmp_path / 'orbit.db'}"))
    try:
        doc = openapi_document()
        assert doc["openapi"] == "3.1.0"
        paths = doc["paths"]
        seen = 0
        # The dashboard's pages, and the root's redirect to them, are not part of the JSON
        # API (docs/observability.md).
        api_routes = [r for r in server.app.routes
                      if not getattr(r, "path", "").startswith(PREFIX)
                      and getattr(r, "path", "") != "/"]
        for route in api_routes:
            if isinstance(route, WebSocketRoute):
                assert route.path in paths, route.path
                seen += 1
                continue
            assert isinstance(route, Route)
            assert route.path in paths, f"{route.path} is not in the OpenAPI document"
            for method in route.methods or ():
                if method == "HEAD":
                    continue
                assert method.lower() in paths[route.path], (route.path, method)
            seen += 1
        assert seen == len(api_routes) >= 14
        # Every documented path exists, and every $ref resolves.
        app_paths = {r.path for r in api_routes}  # type: ignore[attr-defined]
        assert set(paths) == app_paths
        text = str(doc)
        for ref in re.findall(r"#/components/schemas/(\w+)", text):
            assert ref in doc["components"]["schemas"], ref
    finally:
        server.engine.dispose()


def test_documented_path_parameters_match_templates() -> None:
    for path, ops in openapi_document()["paths"].items():
        names = set(re.findall(r"{(\w+)}", path))
        for op in ops.values():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, (path, declared, names)
