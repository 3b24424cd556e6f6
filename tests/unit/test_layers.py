"""The architecture in code: which package may import which, and which modules stay pure.

    package            must not import                              why
    orbit_wire         any other orbit_* package                    the shared language: frames,
                                                                    values, errors, names
    orbit_host         orbit_server, orbit_supervisor,              host pieces every process
                       orbit_child, orbit_client                    loads: pipes, processes,
                                                                    the credentials file
    orbit_child        orbit_supervisor, orbit_server, orbit_client what a handler process
                                                                    loads, and nothing more
    orbit_supervisor   orbit_child, orbit_client, orbit_server      never imports handler code;
                                                                    no HTTP client to read a file
    orbit_server       orbit_supervisor, orbit_client, orbit_child  the control plane alone
    orbit_client       orbit_server, orbit_supervisor, orbit_child  a producer needs the API only

    pure modules (PURE below) import no I/O library and read no clock (FORBIDDEN_IN_PURE):
    time comes in as ``now`` and randomness as a draw, so tests drive them with fake clocks.

Every module of every package is parsed (relative imports resolved against the module's own
package), and a failure names the file, the line and the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("orbit_wire", "orbit_host", "orbit_child", "orbit_supervisor", "orbit_server",
        "orbit_client")

FORBIDDEN: dict[str, frozenset[str]] = {
    "orbit_wire": frozenset(OURS) - {"orbit_wire"},
    "orbit_host": frozenset({"orbit_server", "orbit_supervisor", "orbit_child", "orbit_client"}),
    "orbit_child": frozenset({"orbit_supervisor", "orbit_server", "orbit_client"}),
    "orbit_supervisor": frozenset({"orbit_child", "orbit_client", "orbit_server"}),
    "orbit_server": frozenset({"orbit_supervisor", "orbit_client", "orbit_child"}),
    "orbit_client": frozenset({"orbit_server", "orbit_supervisor", "orbit_child"}),
}

# The sans-I/O cores. A module split out of one of these joins the list.
PURE = (
    "orbit_wire/*.py",
    "orbit_host/messages.py",
    "orbit_host/tally.py",
    "orbit_host/output.py",
    "orbit_host/backoff.py",
    "orbit_server/domain/*.py",
    "orbit_server/auth.py",
    "orbit_supervisor/session.py",
    "orbit_supervisor/lease.py",
    "orbit_supervisor/margin.py",
    "orbit_supervisor/batching.py",
    "orbit_supervisor/actions.py",
    "orbit_supervisor/errors.py",
    "orbit_supervisor/defaults.py",
    "orbit_supervisor/attempts.py",
    "orbit_supervisor/machine.py",
    "orbit_supervisor/link.py",
    "orbit_supervisor/core.py",
    "orbit_supervisor/session_types.py",
    "orbit_supervisor/answers.py",
    "orbit_supervisor/credit.py",
    "orbit_supervisor/kill_reports.py",
    "orbit_supervisor/outbox.py",
    "orbit_supervisor/slots.py",
    "orbit_supervisor/outcomes.py",
    "orbit_client/calls.py",
    "orbit_client/rawjson.py",
    "orbit_client/tasks.py",
    "orbit_client/cli/render.py",
    "orbit_client/cli/timefmt.py",
)
FORBIDDEN_IN_PURE = frozenset({
    "asyncio", "websockets", "psutil", "sqlalchemy", "alembic", "starlette", "uvicorn",
    "httpx", "click", "time", "datetime", "socket", "select", "selectors", "subprocess",
    "threading", "multiprocessing", "signal", "logging", "random",
})


def modules() -> list[Path]:
    return sorted(p for package in OURS for p in (ROOT / package).rglob("*.py")
                  if "migrations" not in p.parts)


def pure_modules() -> list[Path]:
    return sorted({p for pattern in PURE for p in ROOT.glob(pattern)})


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, relative ones resolved."""
    package = list(path.relative_to(ROOT).with_suffix("").parts)
    if package[-1] == "__init__":
        package.pop()
    else:
        package.pop()  # a module's own package is what ``from . import`` means
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def violations(path: Path, forbidden: frozenset[str]) -> list[str]:
    where = path.relative_to(ROOT)
    return [f"{where}:{line} imports {name}" for line, name in imports(path)
            if name.split(".")[0] in forbidden]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_package_imports_only_what_its_layer_allows(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    assert violations(path, FORBIDDEN[package]) == []


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io_and_no_clock(path: Path) -> None:
    assert violations(path, FORBIDDEN_IN_PURE) == []


def test_every_listed_pure_module_exists() -> None:
    for pattern in PURE:
        if "*" not in pattern or pattern.startswith("orbit_wire"):
            assert list(ROOT.glob(pattern)), f"{pattern} is listed as pure but missing"


def test_relative_imports_are_resolved() -> None:
    # The check above must see `from .pool import x` in orbit_supervisor as
    # orbit_supervisor.pool, and `from ..domain import y` in orbit_server/store as
    # orbit_server.domain, or a forbidden relative import would pass unseen.
    found = dict((name, line) for line, name in imports(ROOT / "orbit_server/store/rows.py"))
    assert "orbit_server.domain" in found
    found = dict((name, line) for line, name in imports(ROOT / "orbit_supervisor/session.py"))
    assert "orbit_supervisor.actions" in found


def test_importing_the_supervisor_loads_no_http_client() -> None:
    import subprocess
    import sys

    code = ("import sys, orbit_supervisor, orbit_supervisor.cli; print(sorted(m for m in "
            "('httpx', 'orbit_client', 'orbit_child') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "[]"


def test_bootstrap_admin_loads_no_http_stack() -> None:
    # `orbit-server bootstrap-admin` runs before many a server start: the store and the
    # admin use cases only (orbit_server/bootstrap.py), no web server, no dispatcher.
    import subprocess
    import sys

    code = ("import sys, orbit_server.cli, orbit_server.bootstrap; print(sorted(m for m in "
            "('uvicorn', 'starlette', 'alembic', 'orbit_server.app', 'orbit_server.dispatcher') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "[]"
