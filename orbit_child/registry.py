"""Loading and validating a ``MODULE:ATTR`` handler spec.

``load_handlers`` runs in the template process only (the supervisor never imports handler
code). Every rejection is a ``HandlerSpecError`` with a one-line message for the CLI.
"""

from __future__ import annotations

import importlib
import re
import sysconfig
import traceback
from pathlib import Path
from typing import Any

from orbit_wire.errors import HandlerSpecError, OrbitError
from orbit_wire.fails_on import check_fails_on
from orbit_wire.limits import MAX_CAPABILITIES, MAX_NAME_LEN
from orbit_wire.names import is_name
from orbit_wire.policy import DeclaredPolicy

from .api import Handler

__all__ = ["load_handlers", "parse_spec", "validate_handlers"]

_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``MODULE:ATTR``; raise HandlerSpecError if it is not of that form."""
    module, sep, attr = spec.partition(":")
    if not sep or not _MODULE_RE.fullmatch(module) or not _MODULE_RE.fullmatch(attr):
        raise HandlerSpecError(
            f"handler spec {spec!r} must look like MODULE:ATTR (e.g. app.tasks:handlers)"
        )
    return module, attr


def load_handlers(spec: str) -> tuple[Handler, ...]:
    """Import the module once, resolve the attribute and validate the handler list."""
    module_name, attr = parse_spec(spec)
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        where = _where(exc)
        raise HandlerSpecError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {_one_line(exc)}"
            + (f" (at {where})" if where else "")
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HandlerSpecError(f"module {module_name!r} has no attribute {attr!r}") from None
        except Exception as exc:  # a property that raises
            raise HandlerSpecError(
                f"reading {spec!r} failed: {type(exc).__name__}: {_one_line(exc)}"
            ) from None
    return validate_handlers(obj, spec)


def validate_handlers(obj: Any, spec: str = "handlers") -> tuple[Handler, ...]:
    """Accept a list/tuple of Handler or an object with a ``handlers`` list/tuple."""
    items = obj
    if not isinstance(items, list | tuple):
        items = getattr(obj, "handlers", None)
        if callable(items) and not isinstance(items, list | tuple):
            items = None
    if not isinstance(items, list | tuple):
        raise HandlerSpecError(
            f"{spec} is a {type(obj).__name__}; expected a list of Handler or an object "
            "with a 'handlers' list"
        )
    if not items:
        raise HandlerSpecError(f"{spec} holds no handlers")
    if len(items) > MAX_CAPABILITIES:
        raise HandlerSpecError(
            f"{spec} holds {len(items)} handlers; at most {MAX_CAPABILITIES} capabilities"
        )
    seen: set[tuple[str, str, str]] = set()
    for index, item in enumerate(items):
        if not isinstance(item, Handler):
            raise HandlerSpecError(
                f"{spec}[{index}] is a {type(item).__name__}, not an orbit_child.Handler"
            )
        for field_name in ("handler", "handler_version", "payload_version"):
            value = getattr(item, field_name)
            if not is_name(value):
                raise HandlerSpecError(
                    f"{spec}[{index}].{field_name} must be 1-{MAX_NAME_LEN} characters of "
                    "[A-Za-z0-9._:/-]"
                )
        if not callable(item.fn):
            raise HandlerSpecError(f"{spec}[{index}] ({item.capability}) has a non-callable fn")
        if not isinstance(item.policy, DeclaredPolicy):
            raise HandlerSpecError(f"{spec}[{index}] ({item.capability}) has a policy that is "
                                   "not an orbit_wire.policy.DeclaredPolicy (declare it on "
                                   "the TaskType)")
        try:
            check_fails_on(item.fails_on)
        except OrbitError as exc:
            raise HandlerSpecError(f"{spec}[{index}] ({item.capability}): {exc.message}") from None
        triple = (item.handler, item.handler_version, item.payload_version)
        if triple in seen:
            raise HandlerSpecError(f"{spec} registers {item.capability} twice")
        seen.add(triple)
    return tuple(items)


def _where(exc: BaseException) -> str | None:
    """``FILE:LINE`` of an import failure in the handlers' own code, or None.

    The last frame of the traceback inside the module's top-level package (a lone module:
    its own file), as ``os.environ[...]`` fails in os.py while the line to fix called it;
    else the last frame outside Python's standard library; a syntax error's own place."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{exc.filename}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_library(f.filename)]
    if not frames:
        return None
    first = Path(frames[0].filename).resolve()  # the module or its top-level package
    package = first.name == "__init__.py"
    home = first.parent if package else first

    def inside(filename: str) -> bool:
        path = Path(filename).resolve()
        return path.is_relative_to(home) if package else path == home

    frame = ([f for f in frames if inside(f.filename)] or frames)[-1]
    return f"{frame.filename}:{frame.lineno}"


def _is_library(filename: str) -> bool:
    """Python's own code: frozen import machinery, this module, the standard library (site
    packages excepted: a handler package may be installed there)."""
    if filename.startswith("<") or filename == __file__:
        return True
    path = Path(filename).resolve()
    stdlib, sites = _python_paths()
    return (any(path.is_relative_to(p) for p in stdlib)
            and not any(path.is_relative_to(p) for p in sites))


def _python_paths() -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    paths = sysconfig.get_paths()

    def of(*keys: str) -> tuple[Path, ...]:
        return tuple(Path(paths[k]).resolve() for k in keys if k in paths)
    return of("stdlib", "platstdlib"), of("purelib", "platlib")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else "(no message)"
