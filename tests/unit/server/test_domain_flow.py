"""The flow-control rules without I/O: keys and patterns (orbit_wire.flow), which tasks a
dispatch may start under limits (domain.flow.admit), driven by hand-made usage and a fake
clock; a simulated dispatch loop never puts a key over its running bound or its rate in any
window, and a held task never blocks the ones behind it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_server.domain.flow import LIMIT_FULL, Held, Limit, Usage, admit, matching, usage_since
from orbit_server.domain.policies import resolve_policy
from orbit_server.domain.spec import parse_task_spec
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.flow import (
    MAX_LIMIT_KEYS,
    check_keys,
    check_pattern,
    parse_rate,
    pattern_matches,
)
from orbit_wire.policy import DeclaredPolicy
from orbit_wire.tasktype import TaskType

BASE = {"handler": "h", "handler_version": "1", "payload_version": "1", "payload": 1}


@pytest.mark.parametrize("key", ["licence:matlab", "customer:42", "a:B-9_.@+=", "x.y-z:v"])
def test_good_keys_pass(key: str) -> None:
    assert check_keys([key, key]) == (key,)
    assert check_pattern(key) == key


@pytest.mark.parametrize("key", ["", "nocolon", "Upper:x", "1a:x", "a:", ":x", "a:b c",
                                 "a:b/c", "a:*", "a:b:c" + "x" * 70, "a" * 33 + ":x"])
def test_bad_keys_are_refused(key: str) -> None:
    with pytest.raises(OrbitError) as info:
        check_keys([key])
    assert info.value.code == ErrorCode.BAD_REQUEST


def test_too_many_keys_are_refused_and_patterns_take_a_wildcard() -> None:
    with pytest.raises(OrbitError, match="at most 8"):
        check_keys([f"k:{i}" for i in range(MAX_LIMIT_KEYS + 1)])
    assert check_pattern("customer:*") == "customer:*"
    for bad in ("*", "customer:*x", "*:x", "customer:**"):
        with pytest.raises(OrbitError):
            check_pattern(bad)
    assert pattern_matches("customer:*", "customer:42")
    assert not pattern_matches("customer:*", "customers:42")
    assert not pattern_matches("customer:4", "customer:42")


@pytest.mark.parametrize(("text", "want"), [("10/1s", (10, 1000)), ("100/m", (100, 60_000)),
                                            ("5/500ms", (5, 500)), ("1/2h", (1, 7_200_000))])
def test_rates_parse(text: str, want: tuple[int, int]) -> None:
    assert parse_rate(text) == want


@pytest.mark.parametrize("text", ["10", "0/1s", "10/0s", "x/1s", "10/1d", "10/25h", "-1/s"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(OrbitError):
        parse_rate(text)


def test_a_full_key_holds_its_tasks_and_not_the_others() -> None:
    limits = {"gpu:*": Limit("gpu:*", max_running=1), "api:x": Limit("api:x", rate_count=2,
                                                                     rate_interval_ms=1000)}
    tasks = [("gpu:a",), ("gpu:a",), (), ("gpu:b",), ("api:x",), ("api:x", "gpu:c")]
    usage = {("api:x", "api:x"): Usage(0, 1)}
    admitted, held = admit(tasks, limits, usage, count=10)
    # gpu:a's second task is held; gpu:b has its own slot; api:x has one start left.
    assert admitted == [0, 2, 3, 4]
    assert held == {1: Held("gpu:a", "gpu:*", "max_running", 1),
                    5: Held("api:x", "api:x", "rate", 2)}
    assert held[1].waiting() == {"reason": LIMIT_FULL, "key": "gpu:a", "limit": "gpu:*",
                                 "bound": "max_running", "max": 1}
    # At most ``count``, in dispatch order.
    assert admit(tasks, limits, usage, count=2)[0] == [0, 2]
    # Both an exact and a wildcard limit apply to one key.
    both = {"c:1": Limit("c:1", max_running=5), "c:*": Limit("c:*", max_running=1)}
    assert matching(["c:1"], both) == [("c:1", "c:1"), ("c:1", "c:*")]
    assert admit([("c:1",), ("c:1",)], both, {}, 5)[0] == [0]


def test_a_simulated_dispatch_keeps_every_bound() -> None:
    """A fake clock and random work: each tick a dispatch admits from the queue under the
    usage the holds give; never more than max_running open per key, never more than the
    rate's count of starts in any window."""
    rnd = random.Random(7)
    limits = {"k:*": Limit("k:*", max_running=3, rate_count=4, rate_interval_ms=1000)}
    pending = [(f"k:{rnd.randint(0, 2)}",) for _ in range(300)]
    open_until: dict[str, list[int]] = {}
    starts: dict[str, list[int]] = {}
    now = 0
    while pending and now < 600_000:
        usage = {}
        for key, _p in matching({k for ks in pending for k in ks}, limits):
            running = sum(1 for end in open_until.get(key, []) if end > now)
            since = usage_since(limits["k:*"], now)
            recent = sum(1 for at in starts.get(key, []) if at > since)
            usage[(key, "k:*")] = Usage(running, recent)
        admitted, _held = admit(pending, limits, usage, count=rnd.randint(1, 8))
        for i in admitted:
            (key,) = pending[i]
            open_until.setdefault(key, []).append(now + rnd.randint(50, 900))
            starts.setdefault(key, []).append(now)
        pending = [t for i, t in enumerate(pending) if i not in set(admitted)]
        now += rnd.randint(1, 120)
    assert not pending
    for key, ats in starts.items():
        ats.sort()
        for i, at in enumerate(ats):
            assert len([a for a in ats[i:] if a < at + 1000]) <= 4, key
        ends = open_until[key]
        for at in ats:
            assert sum(1 for s, e in zip(ats, ends, strict=True) if s <= at < e) <= 3, key


def _admit_one_pair_at_a_time(task_pairs: list[tuple[tuple[str, str], ...]],
                              limits: dict[str, Limit], usage: dict[tuple[str, str], Usage],
                              count: int) -> tuple[list[int], dict[int, Held]]:
    """The rule spelled out: a task starts when, for each of its pairs in order, the key's
    running count and recent starts plus this claim's starts are under the limit's bounds;
    the first pair that is not names why it is held."""
    taken: dict[tuple[str, str], int] = {}
    admitted: list[int] = []
    held: dict[int, Held] = {}
    for i, pairs in enumerate(task_pairs):
        if len(admitted) >= count:
            break
        reason = None
        for key, pattern in pairs:
            limit, used = limits[pattern], usage.get((key, pattern), Usage())
            extra = taken.get((key, pattern), 0)
            if limit.max_running is not None and used.running + extra >= limit.max_running:
                reason = Held(key, pattern, "max_running", limit.max_running)
            elif limit.rate_count is not None and used.recent_starts + extra >= limit.rate_count:
                reason = Held(key, pattern, "rate", limit.rate_count)
            if reason is not None:
                break
        if reason is not None:
            held[i] = reason
            continue
        for pair in pairs:
            taken[pair] = taken.get(pair, 0) + 1
        admitted.append(i)
    return admitted, held


_LIMITS = st.builds(
    lambda pattern, running, rate: Limit(pattern, running, rate,
                                         None if rate is None else 1000),
    st.sampled_from(["k:*", "k:1", "j:*"]), st.none() | st.integers(0, 4),
    st.none() | st.integers(0, 4)).filter(lambda lim: lim.max_running is not None
                                          or lim.rate_count is not None)


@given(limits=st.lists(_LIMITS, min_size=1, max_size=3, unique_by=lambda lim: lim.pattern),
       tasks=st.lists(st.lists(st.sampled_from(["k:1", "k:2", "j:1", "x:1"]), max_size=3,
                               unique=True), max_size=30),
       running=st.integers(0, 5), recent=st.integers(0, 5), count=st.integers(0, 40))
def test_admission_is_the_rule_one_pair_at_a_time(limits: list[Limit], tasks: list[list[str]],
                                                  running: int, recent: int,
                                                  count: int) -> None:
    by_pattern = {lim.pattern: lim for lim in limits}
    task_pairs = [tuple(matching(keys, by_pattern)) for keys in tasks]
    usage = {pair: Usage(running, recent) for pairs in task_pairs for pair in pairs
             if pair[0] != "k:2"}  # k:2 has no usage: it counts as unused
    assert admit(tasks, by_pattern, usage, count) == _admit_one_pair_at_a_time(
        task_pairs, by_pattern, usage, count)


def test_keys_come_from_the_submit_else_the_declared_policy() -> None:
    declared = TaskType("h", "1", "1", limits=["licence:matlab"]).policy
    assert declared == DeclaredPolicy(limits=("licence:matlab",))
    left_out = resolve_policy(parse_task_spec(BASE), declared)
    assert left_out.limit_keys == ("licence:matlab",)
    given = resolve_policy(parse_task_spec({**BASE, "limits": ["customer:1"]}), declared)
    assert given.limit_keys == ("customer:1",)
    with pytest.raises(OrbitError):
        TaskType("h", "1", "1", limits=["bad"])
    with pytest.raises(OrbitError):
        parse_task_spec({**BASE, "limits": ["x:1"] * 9})
    # An operation key's digest counts the keys: the same key with other keys conflicts.
    keyed = parse_task_spec({**BASE, "operation_key": "o", "limits": ["a:1"]})
    assert keyed.digest != parse_task_spec({**BASE, "operation_key": "o"}).digest
