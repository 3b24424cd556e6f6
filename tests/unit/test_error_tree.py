"""The one error tree: every exception class of Orbit derives from ``OrbitError``, and the
tree drawn in orbit_wire/errors.py's docstring says each of them, with its module, its
parent and its built-in second base.

Every module of every ``orbit_*`` package is parsed, and every class statement in it (at
module level, in a class or in a function) is checked, so a new exception class cannot be
left out of the tree, nor out of its drawing.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import orbit_wire.errors
from orbit_wire.errors import OrbitError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orbit_wire", "orbit_host", "orbit_child", "orbit_supervisor", "orbit_server",
            "orbit_client")

# One drawn class: its tree prefix (four characters a level), name, second bases, module.
DRAWN = re.compile(r"^ {4}(?P<tree>(?:[│ ] {3})*(?:[├└]── )?)(?P<name>\w+)"
                   r"(?: \[(?P<second>[\w, ]+)\])? +(?P<module>orbit_\w+/[\w/]+\.py) ")


@dataclass(frozen=True)
class Local:
    """A class made inside a function: only its bases are known without running it."""

    bases: tuple[object, ...]


@dataclass(frozen=True)
class Found:
    """An exception class of Orbit: where it is and what it derives from directly."""

    name: str
    module: str  # the file, relative to the repository
    line: int
    bases: tuple[object, ...]


def _derives(cls: object, base: type) -> bool:
    if isinstance(cls, Local):
        return any(_derives(b, base) for b in cls.bases)
    return isinstance(cls, type) and issubclass(cls, base)


def _resolve(expr: ast.expr, namespace: dict[str, object], local: dict[str, Local]) -> object:
    """What a base expression names: a class of the module, of a function's body, a builtin,
    or one of a module imported where it is used."""
    if isinstance(expr, ast.Subscript):  # Generic[T]: the class is what is subscripted
        return _resolve(expr.value, namespace, local)
    if isinstance(expr, ast.Attribute):
        return getattr(_resolve(expr.value, namespace, local), expr.attr)
    assert isinstance(expr, ast.Name), f"a base that is not a name: {ast.unparse(expr)}"
    if expr.id in local:
        return local[expr.id]
    if expr.id in namespace:
        return namespace[expr.id]
    if hasattr(builtins, expr.id):
        return getattr(builtins, expr.id)
    return importlib.import_module(expr.id)


def _classes(path: Path) -> list[Found]:
    """Every exception class ``path`` defines, wherever its statement is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if not any(isinstance(node, ast.ClassDef) for node in ast.walk(tree)):
        return []
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    module = importlib.import_module(name.removesuffix(".__init__"))
    local: dict[str, Local] = {}
    found: list[Found] = []

    def visit(node: ast.AST, owner: object | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                if owner is not None:  # module level or in a class: the class itself
                    made = getattr(owner, child.name)
                    bases = made.__bases__
                else:
                    bases = tuple(_resolve(b, vars(module), local) for b in child.bases)
                    made = local[child.name] = Local(bases)
                if _derives(made, BaseException):
                    found.append(Found(child.name, path.relative_to(ROOT).as_posix(),
                                       child.lineno, bases))
                visit(child, made if owner is not None else None)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, None)
            else:
                visit(child, owner)

    visit(tree, module)
    return found


def exception_classes() -> list[Found]:
    paths = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    return [found for path in paths for found in _classes(path)]


def drawing() -> dict[str, tuple[str, str | None, frozenset[str]]]:
    """The tree of orbit_wire/errors.py's docstring: each class's module, parent and second
    bases, by name."""
    drawn: dict[str, tuple[str, str | None, frozenset[str]]] = {}
    parents: list[str] = []
    for line in (orbit_wire.errors.__doc__ or "").splitlines():
        match = DRAWN.match(line)
        if match is None:
            continue
        depth = len(match["tree"]) // 4
        del parents[depth:]
        assert match["name"] not in drawn, f"{match['name']} is drawn twice"
        second = frozenset(s.strip() for s in (match["second"] or "").split(",") if s.strip())
        drawn[match["name"]] = (match["module"], parents[-1] if parents else None, second)
        parents.append(match["name"])
    return drawn


def test_every_exception_class_derives_from_orbit_error() -> None:
    found = exception_classes()
    assert len(found) > 30, found  # the walk reached every package
    outside = [f"{f.module}:{f.line} {f.name}" for f in found
               if f.name != "OrbitError" and not any(_derives(b, OrbitError) for b in f.bases)]
    assert outside == [], ("exception classes outside the error tree (derive them from "
                           f"OrbitError or one of its branches): {outside}")


def test_the_drawn_tree_says_every_class_its_module_and_its_parent() -> None:
    drawn = drawing()
    found = {f.name: f for f in exception_classes()}
    assert sorted(found) == sorted(drawn), (
        f"not drawn: {sorted(set(found) - set(drawn))}; "
        f"drawn but not found: {sorted(set(drawn) - set(found))}")
    for name, f in found.items():
        module, parent, second = drawn[name]
        in_tree = [b for b in f.bases if _derives(b, OrbitError)]
        builtin = frozenset(getattr(b, "__name__", "?") for b in f.bases if b not in in_tree)
        assert module == f.module, f"{name} is drawn in {module}, defined in {f.module}"
        if name == "OrbitError":
            assert parent is None and second == frozenset(), drawn[name]
            continue
        assert [getattr(b, "__name__", "?") for b in in_tree] == [parent], (
            f"{name} is drawn under {parent}, derives from {in_tree}")
        assert builtin == second, f"{name}: second bases drawn {set(second)}, are {set(builtin)}"
