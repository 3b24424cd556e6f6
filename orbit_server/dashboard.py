"""The web dashboard at ``/ui`` (docs/observability.md, "Dashboard"): static files from the
package (orbit_server/ui/), read once at start, served with a strict Content-Security-Policy.

The pages are plain HTML, CSS and vanilla JavaScript modules that call the JSON API like any
client (a bearer credential kept in the tab's sessionStorage). Nothing here reads the store:
only the names listed in the package folder are served, so no path reaches the disk.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from orbit_wire.errors import ErrorCode, OrbitError

from .http_plumbing import error_response

PREFIX = "/ui"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Scripts, styles and images from /ui only, requests to this origin only; no inline script,
# no framing, no form posting elsewhere. Charts are SVG built through the DOM.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def load_assets() -> dict[str, tuple[bytes, str]]:
    """Every file of orbit_server/ui/ by name, with its media type."""
    folder = resources.files("orbit_server").joinpath("ui")
    out: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            out[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return out


def dashboard_routes() -> list[BaseRoute]:
    """``/`` and ``/ui`` (redirects to ``/ui/``), ``/ui/`` (the page) and ``/ui/<asset>``."""
    assets = load_assets()

    async def asset(request: Request) -> Response:
        name = request.path_params.get("name") or "index.html"
        found = assets.get(name)
        if found is None:
            return error_response(OrbitError(ErrorCode.NOT_FOUND, f"no asset {name}"))
        body, media_type = found
        return Response(body, media_type=media_type, headers=HEADERS)

    async def bare(request: Request) -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=308)

    async def root(request: Request) -> Response:
        # Relative, so a proxy that serves the server under a path prefix keeps it; a
        # found (302), not a permanent, redirect: the root may serve a page of its own.
        return RedirectResponse(f"{PREFIX.lstrip('/')}/", status_code=302)

    return [
        Route("/", root, methods=["GET"]),
        Route(PREFIX, bare, methods=["GET"]),
        Mount(PREFIX, routes=[Route("/", asset, methods=["GET"]),
                              Route("/{name:str}", asset, methods=["GET"])]),
    ]
