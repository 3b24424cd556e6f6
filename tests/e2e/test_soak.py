"""scripts/soak.py: a short chaos run against real processes holds every promise, and its
checker reports each kind of broken promise (fed made-up facts: it must be able to fail)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]
SOAK = ROOT / "scripts" / "soak.py"


def _soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak_script", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak_script"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _attempt(attempt_id: str, started: bool = True, outcome: str | None = None
             ) -> dict[str, Any]:
    return {"id": attempt_id, "started_at_ms": 1 if started else None, "outcome": outcome}


def test_the_checker_reports_each_broken_promise() -> None:
    soak = _soak_module()
    facts = soak.TaskFacts
    good = [facts("t1", "IDEMPOTENT", "SUCCEEDED", [_attempt("a1", outcome="SUCCEEDED")]),
            facts("t2", "NON_IDEMPOTENT", "NEEDS_REVIEW", [_attempt("a2", outcome="UNKNOWN")])]
    assert soak.violations(good, ["t1 a1", "t2 a2"], [], 0) == []

    def found(tasks: list[Any], runs: list[str], conflicts: tuple[str, ...] = (),
              unsent: int = 0) -> str:
        bad = soak.violations(tasks, runs, list(conflicts), unsent)
        assert len(bad) == 1, bad
        return str(bad[0])

    assert "ran 2 times" in found(good, ["t1 a1", "t1 a1", "t2 a2"])
    assert "without a confirmed start" in found(
        [facts("t3", "IDEMPOTENT", "SUCCEEDED", [_attempt("a3", started=False),
                                                 _attempt("a4", outcome="SUCCEEDED")])],
        ["t3 a3", "t3 a4"])
    assert "never ran" in found(
        [facts("t4", "IDEMPOTENT", "SUCCEEDED", [_attempt("a5", outcome="SUCCEEDED")])], [])
    assert "idempotent t5 ended NEEDS_REVIEW" in found(
        [facts("t5", "IDEMPOTENT", "NEEDS_REVIEW", [_attempt("a6", outcome="UNKNOWN")])],
        ["t5 a6"])
    assert "non-idempotent t6 ran 2 times" in found(
        [facts("t6", "NON_IDEMPOTENT", "SUCCEEDED",
               [_attempt("a7", outcome="UNKNOWN"), _attempt("a8", outcome="SUCCEEDED")])],
        ["t6 a7", "t6 a8"])
    assert "did not end" in found([facts("t7", "IDEMPOTENT", None, [])], [])
    assert "two tasks" in found(good, ["t1 a1", "t2 a2"], ("soak-1: x and y",))
    assert "never accepted" in found(good, ["t1 a1", "t2 a2"], unsent=2)


def test_the_checker_accounts_for_every_attempt_spent() -> None:
    soak = _soak_module()
    # t1 spent two attempts and its handler ran once (a2): a1 needs an explanation.
    t1 = soak.TaskFacts("t1", "IDEMPOTENT", "SUCCEEDED",
                        [_attempt("a1", outcome="UNKNOWN"), _attempt("a2", outcome="SUCCEEDED")],
                        spent=2)
    runs = ["t1 a2"]
    assert soak.violations([t1], runs, [], 0) == []  # not checked
    assert soak.violations([t1], runs, [], 0, frozenset({"a1"})) == []  # a grant never read
    assert soak.violations([t1], runs, [], 0, frozenset(), frozenset({"a1", "a2"})) == []
    # A grant received and run, but never confirmed before its lease ran out: both sides.
    assert soak.violations([t1], ["t1 a1", "t1 a2"], [], 0, frozenset({"a1"})) == []
    (broken,) = soak.violations([t1], runs, [], 0, frozenset())
    assert "attempts started 2 - handler executions 1 = 1" in broken
    # The task's count of attempts spent must agree with what ran.
    t1.spent = 1
    (miscounted,) = soak.violations([t1], ["t1 a1", "t1 a2"], [], 0, frozenset())
    assert "attempts started 1 - handler executions 2 = -1" in miscounted


def test_a_short_soak_with_faults_holds_every_promise(tmp_path: Path) -> None:
    facts_file = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, str(SOAK), "--seconds", "15", "--seed", "7", "--fault-every", "1.0",
         "--json", str(facts_file)],
        capture_output=True, text=True, timeout=300 * UNIT, cwd=ROOT)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-4000:]
    facts = json.loads(facts_file.read_text())
    assert facts["violations"] == []  # every check held
    # Work ran, and faults happened; the grants' accounting was checked.
    assert facts["states"].get("SUCCEEDED", 0) > 0, facts
    assert sum(facts["faults"].values()) > 0, facts
    assert facts["attempts"]["checked"] and facts["attempts"]["started"] > 0, facts
