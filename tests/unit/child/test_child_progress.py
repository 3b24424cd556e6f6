"""``execution.progress`` and ``execution.checkpoint`` in the child, without processes: the
arguments' rules (a clear TypeError or ValueError in the handler), and the spacing of the
messages with a fake clock (at most one per 50 ms, the latest winning, the pending one sent
by ``flush`` before the answer)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from orbit_child import Execution, RawJSON
from orbit_child.progress import PROGRESS_EVERY, ProgressSender, check_progress
from orbit_wire.limits import MAX_PROGRESS_BYTES
from orbit_wire.model import Capability


def _execution(**kw: Any) -> Execution:
    return Execution(task_id="t", attempt_id="a", epoch=1, attempt_number=1,
                     capability=Capability("h", "1", "1"), payload=None, deadline_at_ms=0,
                     idempotency="NON_IDEMPOTENT", **kw)


@pytest.mark.parametrize(("fraction", "details", "error"), [
    (True, None, TypeError),
    ("0.5", None, TypeError),
    (float("nan"), None, ValueError),
    (1.01, None, ValueError),
    (-1, None, ValueError),
    (None, {"x": object()}, TypeError),
    (None, {"x": float("inf")}, ValueError),
    (None, {"n": 2**70}, ValueError),
    (None, "x" * MAX_PROGRESS_BYTES, ValueError),
    (None, RawJSON("null"), ValueError),
])
def test_bad_arguments_raise_in_the_handler(fraction: Any, details: Any,
                                            error: type[Exception]) -> None:
    with pytest.raises(error, match=r"execution\.progress"):
        _execution().progress(fraction, details)


def test_good_arguments_are_encoded_once() -> None:
    assert check_progress(0, None) == (0.0, None)
    assert check_progress(Decimal("0.25"), [1, "a"]) == (0.25, '[1,"a"]')
    assert check_progress(None, RawJSON('{"i":1.50}')) == (None, '{"i":1.50}')
    assert check_progress(None, None) == (None, None)


def test_progress_goes_to_the_sink_checked_and_checkpoint_defaults_to_none() -> None:
    seen: list[tuple[float | None, str | None]] = []
    execution = _execution(checkpoint={"i": 3},
                           _progress_sink=lambda f, d: seen.append((f, d)))
    execution.progress(0.5, {"i": 4})
    execution.progress()
    assert seen == [(0.5, '{"i":4}'), (None, None)]
    assert execution.checkpoint == {"i": 3}
    assert _execution().checkpoint is None
    _execution().progress(1.0)  # without a child it is only checked


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_notes_are_spaced_and_the_latest_wins() -> None:
    clock = _Clock()
    sent: list[tuple[float | None, str | None]] = []
    sender = ProgressSender(lambda f, d: sent.append((f, d)), clock)
    sender.note(0.1, '{"i":1}')  # the first goes at once
    for i in range(2, 50):  # a tight loop within the interval: kept, merged
        clock.now += 0.0005
        sender.note(i / 100, None)
    clock.now += 0.001
    sender.note(None, '{"i":49}')
    assert sent == [(0.1, '{"i":1}')] and sender.pending
    clock.now = 100.0 + PROGRESS_EVERY + 0.001
    sender.note(0.5, None)  # the interval is over: what is pending goes, merged
    assert sent[-1] == (0.5, '{"i":49}') and not sender.pending
    clock.now += 0.01
    sender.note(None, '{"i":50}')
    sender.flush()  # before the answer, whatever the interval
    assert sent[-1] == (None, '{"i":50}') and len(sent) == 3
    sender.flush()  # nothing pending: nothing sent
    assert len(sent) == 3
