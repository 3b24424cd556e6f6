"""MODULE:ATTR validation happens in the template; the parent gets one clear line."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import psutil
import pytest
from pool_support import FIXTURES, request, run, running_pool

from orbit_supervisor.pool import ChildOutcome, ChildPool
from orbit_wire.errors import HandlerSpecError
from orbit_wire.model import Capability, Outcome


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must look like MODULE:ATTR"),
        ("pool_bad_specs:", "must look like MODULE:ATTR"),
        ("missing_module_xyz:handlers", "cannot import module 'missing_module_xyz'"),
        ("pool_import_error:handlers", "RuntimeError: configuration missing"),
        ("pool_bad_specs:missing", "has no attribute 'missing'"),
        ("pool_bad_specs:empty", "holds no handlers"),
        ("pool_bad_specs:duplicates", "registers same@1/1 twice"),
        ("pool_bad_specs:non_callable", "non-callable fn"),
        ("pool_bad_specs:not_handlers", "is a str, not an orbit_child.Handler"),
        ("pool_bad_specs:too_many", "at most 32 capabilities"),
        ("pool_bad_specs:bad_name", "handler must be 1-128 characters"),
        ("pool_bad_specs:number", "expected a list of Handler"),
    ],
)
def test_bad_specs_are_rejected_with_one_clear_line(spec: str, message: str) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    async def scenario() -> None:
        await ChildPool(spec, 1).start()

    with pytest.raises(HandlerSpecError) as info:
        run(scenario())
    assert message in info.value.message
    assert "\n" not in info.value.message and "Traceback" not in info.value.message
    assert info.value.code.value == "BAD_REQUEST"
    leftover = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert leftover == []


@pytest.mark.parametrize(
    ("spec", "message", "where"),
    [
        # os.environ raises in os.py; the line to fix is the module's own.
        ("pool_import_deep:handlers", "KeyError: 'ORBIT_TEST_SETTING_NOBODY_SETS'",
         "pool_import_deep.py:6)"),
        ("pool_import_error:handlers", "RuntimeError: configuration missing",
         "pool_import_error.py:3)"),
    ],
)
def test_an_import_failure_names_the_file_and_line(spec: str, message: str, where: str) -> None:
    async def scenario() -> None:
        await ChildPool(spec, 1).start()

    with pytest.raises(HandlerSpecError) as info:
        run(scenario())
    assert message in info.value.message
    assert info.value.message.endswith(where), info.value.message
    assert f" (at {FIXTURES}" in info.value.message  # the whole path, to open it


def test_a_module_that_is_missing_names_no_place() -> None:
    async def scenario() -> None:
        await ChildPool("missing_module_xyz:handlers", 1).start()

    with pytest.raises(HandlerSpecError) as info:
        run(scenario())
    assert " (at " not in info.value.message


def test_a_registry_object_with_a_handlers_attribute() -> None:
    async def scenario() -> tuple[Capability, ...]:
        pool = ChildPool("pool_bad_specs:registry", 1)
        try:
            return await pool.start()
        finally:
            await pool.close()
    assert run(scenario()) == (Capability("registry_ok", "2", "1"),
                               Capability("registry_ok", "2", "2"))


def test_start_reports_the_capabilities_in_order() -> None:
    async def scenario() -> tuple[Capability, ...]:
        pool = ChildPool("pool_handlers:handlers", 1)
        try:
            return await pool.start()
        finally:
            await pool.close()
    caps = run(scenario())
    assert caps[:3] == (Capability("echo", "1", "1"), Capability("async_echo", "1", "1"),
                        Capability("whoami", "1", "1"))
    assert len(caps) == len(set(caps)) == 21


def test_a_module_in_the_current_folder_loads_like_python_m(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "orbit_cwd_handlers.py").write_text(
        "from orbit_child import Handler\n"
        "handlers = [Handler('cwd', '1', '1', lambda execution: {'here': True})]\n"
    )
    monkeypatch.chdir(tmp_path)

    async def scenario() -> ChildOutcome:
        async with running_pool(1, spec="orbit_cwd_handlers:handlers") as pool:
            return await pool.execute(request("cwd"))
    out = run(scenario())
    assert out.outcome is Outcome.SUCCEEDED and out.result_json == '{"here":true}'
    assert "orbit_cwd_handlers" not in sys.modules  # the parent never imported it


def test_handlers_do_not_see_where_the_credentials_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_CREDENTIALS_FILE", "/secret/place.json")
    monkeypatch.setenv("ORBIT_URL", "http://127.0.0.1:1")
    # .ci/run exports the test database's URL (and a run may set the tests' time unit);
    # this test controls the whole ORBIT_* set.
    monkeypatch.delenv("ORBIT_TEST_MYSQL_URL", raising=False)
    monkeypatch.delenv("ORBIT_TEST_TIME_UNIT", raising=False)

    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            return await pool.execute(request("environment"))
    out = run(scenario())
    assert out.outcome is Outcome.SUCCEEDED
    assert orjson.loads(out.result_json or "") == ["ORBIT_URL"]
