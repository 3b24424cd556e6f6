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

    module                    must not                                     why
    orbit_server outside      import SQLAlchemy's statement constructors   every statement lives in
    store/ (the Alembic       (STATEMENT_BUILDERS: select, insert, text,   store/, in a function
    migrations are in it)     func, ...; sqlalchemy.sql, .schema,          named for what it reads
                              .dialects), a Table of store/tables.py, or   or writes; services
                              build SQL text (SQL_TEXT, exec_driver_sql)   call those functions
    every module but          start a task (create_task, ensure_future)    every background task
    orbit_host/task_owner.py  except on a TaskGroup it opened              has an owner that keeps,
                              (``async with asyncio.TaskGroup() as tg``)   cancels and awaits it

No module is over 600 lines (MAX_MODULE_LINES): the packages' nor the scripts', tests' and
examples'. Every module of every package is parsed (relative imports resolved against the
module's own package), and a failure names the file, the line and the import (or the SQL
built).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy.schema
import sqlalchemy.sql.expression

from orbit_server.store import tables

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
    "orbit_server/ratelimit.py",
    "orbit_server/worker_protocol.py",
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
    "orbit_supervisor/progress.py",
    "orbit_supervisor/outbox.py",
    "orbit_supervisor/slots.py",
    "orbit_supervisor/outcomes.py",
    "orbit_supervisor/cgroup_plan.py",
    "orbit_client/calls.py",
    "orbit_client/capabilities.py",
    "orbit_client/channel_core.py",
    "orbit_client/tasks.py",
    "orbit_client/canvas.py",
    "orbit_client/workflows.py",
    "orbit_client/workflow_calls.py",
    "orbit_client/cli/render.py",
    "orbit_client/cli/render_schedules.py",
    "orbit_client/cli/render_workflows.py",
    "orbit_client/cli/timefmt.py",
)
FORBIDDEN_IN_PURE = frozenset({
    "asyncio", "websockets", "psutil", "sqlalchemy", "alembic", "starlette", "uvicorn",
    "httpx", "click", "time", "datetime", "socket", "select", "selectors", "subprocess",
    "threading", "multiprocessing", "signal", "logging", "random",
})


# Where statements are built: store/ alone (its migrations included).
STATEMENT_HOME = "orbit_server/store"
# What builds a statement or a piece of one: every public constructor of SQLAlchemy's SQL
# expression language and schema (select, insert, update, delete, text, func, and_,
# bindparam, Table, DDL, ...), asked of SQLAlchemy itself so a new one is covered too.
STATEMENT_BUILDERS = frozenset(
    name for module in (sqlalchemy.sql.expression, sqlalchemy.schema)
    for name, value in vars(module).items()
    if not name.startswith("_") and getattr(value, "__module__", "").startswith("sqlalchemy")
)
# SQLAlchemy modules that hold nothing but statement and schema constructors.
STATEMENT_MODULES = ("sqlalchemy.sql", "sqlalchemy.schema", "sqlalchemy.dialects")
# The Tables of store/tables.py: ``tasks.update()`` builds a statement as ``update`` does.
TABLES = frozenset(name for name, value in vars(tables).items()
                   if isinstance(value, sqlalchemy.Table))
TABLES_MODULE = "orbit_server.store.tables"
# SQL as text: a statement's shape anywhere in a string, or a string opening with a bare
# keyword in capitals (``"BEGIN"``, ``"SELECT 1"``). Docstrings are prose and not read.
SQL_TEXT = re.compile(r"""
    \bSELECT\b.+\bFROM\b | \bINSERT\s+INTO\b | \bUPDATE\s+\S+\s+SET\b | \bDELETE\s+FROM\b
  | \bPRAGMA\s+\w | \bBEGIN\s+(IMMEDIATE|EXCLUSIVE|DEFERRED)\b
  | \b(CREATE|ALTER|DROP|TRUNCATE)\s+(TABLE|INDEX|VIEW|DATABASE)\b
  | (?-i:^\s*(SELECT|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE\s+SAVEPOINT)\b)
""", re.IGNORECASE | re.DOTALL | re.VERBOSE)


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


def statement_modules() -> list[Path]:
    """Every module of orbit_server outside store/."""
    return [p for p in sorted((ROOT / "orbit_server").rglob("*.py"))
            if not p.relative_to(ROOT).as_posix().startswith(STATEMENT_HOME + "/")]


def _resolved(package: list[str], node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _is_statement_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in STATEMENT_MODULES)


def sql_built(source: str, module: str) -> Iterator[tuple[int, str]]:
    """(line, what) for every way ``source`` (the module named ``module``, for relative
    imports) builds a statement: see the docstring's last table."""
    tree = ast.parse(source)
    package = module.split(".")[:-1]
    aliases: set[str] = set()  # names bound to the sqlalchemy package itself
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_statement_module(alias.name) or alias.name == TABLES_MODULE:
                    yield node.lineno, f"imports {alias.name}"
                elif alias.name == "sqlalchemy" or alias.name.startswith("sqlalchemy."):
                    aliases.add(alias.asname or "sqlalchemy")
        elif isinstance(node, ast.ImportFrom):
            source_module = _resolved(package, node)
            for alias in node.names:
                full = f"{source_module}.{alias.name}"
                builder = source_module == "sqlalchemy" and alias.name in STATEMENT_BUILDERS
                if builder or _is_statement_module(full):
                    yield node.lineno, f"imports {full}"
                elif full == TABLES_MODULE or (source_module == TABLES_MODULE
                                               and alias.name in TABLES):
                    yield node.lineno, f"imports the table {full}"
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in aliases and node.attr in STATEMENT_BUILDERS):
            yield node.lineno, f"uses {node.value.id}.{node.attr}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "exec_driver_sql"):
            yield node.lineno, "runs SQL text (exec_driver_sql)"
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "x"
                           for v in node.values)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings):
            text = node.value
        else:
            continue
        if SQL_TEXT.search(text):
            yield node.lineno, f"holds SQL text {text[:60]!r}"


def violations(path: Path, forbidden: frozenset[str]) -> list[str]:
    where = path.relative_to(ROOT)
    return [f"{where}:{line} imports {name}" for line, name in imports(path)
            if name.split(".")[0] in forbidden]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_package_imports_only_what_its_layer_allows(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    assert violations(path, FORBIDDEN[package]) == []


# Small modules with one purpose: past this a module holds several jobs (split it along them).
MAX_MODULE_LINES = 600


# The rule holds beyond the packages: benchmarks, tests and examples are read and changed too.
ALSO_LIMITED = ("scripts", "tests", "examples")


def test_no_module_is_over_the_line_limit() -> None:
    others = [p for folder in ALSO_LIMITED for p in (ROOT / folder).rglob("*.py")]
    assert others, "the scripts, tests and examples were not found"
    long = [f"{path.relative_to(ROOT)}: {n} lines"
            for path in [*modules(), *others]
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io_and_no_clock(path: Path) -> None:
    assert violations(path, FORBIDDEN_IN_PURE) == []


@pytest.mark.parametrize("path", statement_modules(),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_statements_are_built_only_in_the_store(path: Path) -> None:
    where = path.relative_to(ROOT)
    module = ".".join(where.with_suffix("").parts)
    assert [f"{where}:{line} {what}" for line, what in sql_built(path.read_text(), module)] == []


def test_the_statement_rule_sees_every_way_to_build_sql() -> None:
    # One line per way; each must be reported, or a statement could pass unseen. The code
    # is only parsed.
    source = """
import sqlalchemy as sa
import sqlalchemy.sql.expression
from sqlalchemy import Connection, select
from sqlalchemy.dialects.mysql import insert
from ..store.tables import tasks, rank_of
from ..store import tables
rows = sa.text
conn.exec_driver_sql(query)
stmt = "SELECT id FROM tasks WHERE state = ?"
more = f"UPDATE {table} SET state = ?"
begin = "BEGIN"
def read() -> None:
    \"\"\"A docstring may say: SELECT id FROM tasks, BEGIN.\"\"\"
    note = "select the queue first"
"""
    found = sorted(sql_built(source, "orbit_server.services.example"))
    assert [line for line, _ in found] == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], found
    assert "Connection" not in str(found) and "rank_of" not in str(found)
    assert {"select", "insert", "update", "delete", "text", "func", "and_", "bindparam",
            "Table"} <= STATEMENT_BUILDERS
    assert "tasks" in TABLES and "Connection" not in STATEMENT_BUILDERS


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


# ------------------------------------------------------------------ owned tasks

TASK_OWNER = ROOT / "orbit_host" / "task_owner.py"
TASK_STARTERS = frozenset({"create_task", "ensure_future"})


def _task_groups(tree: ast.Module) -> set[str]:
    """The source texts that name a TaskGroup in a module: ``NAME`` for each ``async with
    asyncio.TaskGroup() as NAME``, and ``self.X`` for each ``self.X = NAME``."""
    groups: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncWith):
            for item in node.items:
                if (ast.unparse(item.context_expr) == "asyncio.TaskGroup()"
                        and isinstance(item.optional_vars, ast.Name)):
                    groups.add(item.optional_vars.id)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and node.value.id in groups):
            groups.update(ast.unparse(target) for target in node.targets)
    return groups


def unowned_tasks(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line call`` for every task started outside an owner in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    groups = _task_groups(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in TASK_STARTERS:
            continue
        if isinstance(func, ast.Attribute) and ast.unparse(func.value) in groups:
            continue
        found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(func)}")
    return found


def test_no_task_is_started_outside_an_owner() -> None:
    found = [line for path in modules() if path != TASK_OWNER for line in unowned_tasks(path)]
    assert found == []
    assert unowned_tasks(TASK_OWNER)  # the check sees a start where there is one


def test_the_task_check_finds_a_bare_task(tmp_path: Path) -> None:
    bare = tmp_path / "orbit_x" / "bare.py"
    bare.parent.mkdir()
    bare.write_text("import asyncio\n\nasync def f(loop):\n"
                    "    asyncio.create_task(g())\n    loop.create_task(g())\n"
                    "    asyncio.ensure_future(g())\n"
                    "    async with asyncio.TaskGroup() as tg:\n        tg.create_task(g())\n")
    assert unowned_tasks(bare, tmp_path) == [
        "orbit_x/bare.py:4 asyncio.create_task", "orbit_x/bare.py:5 loop.create_task",
        "orbit_x/bare.py:6 asyncio.ensure_future"]
