"""The pure cores stay pure: no I/O library and no clock in their imports (STYLE.md)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    *sorted((ROOT / "orbit_wire").glob("*.py")),
    ROOT / "orbit_server" / "domain.py",
    ROOT / "orbit_supervisor" / "session.py",
    ROOT / "orbit_supervisor" / "lease.py",
    ROOT / "orbit_supervisor" / "batching.py",
]
FORBIDDEN = {"asyncio", "websockets", "psutil", "sqlalchemy", "time", "socket", "subprocess",
             "threading", "datetime", "starlette", "uvicorn", "httpx"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io(path: Path) -> None:
    assert path.exists(), f"{path} is listed as pure but missing"
    assert _imports(path) & FORBIDDEN == set()
