"""Which control groups hold the children (cgroup_plan.py): the mode choice per host, the
line said at start, the parsers of the kernel's files, and the limits' option ranges."""

from __future__ import annotations

import pytest

from orbit_supervisor.cgroup_plan import (
    CgroupPlan,
    HostCgroups,
    Mode,
    choose,
    cpu_quota_us,
    oom_kills,
    own_dir,
    parse_mounts,
    parse_proc_cgroup,
)
from orbit_supervisor.options import OptionError, SupervisorOptions
from orbit_wire.errors import ErrorCode

G = 1 << 30
PURE_V2 = HostCgroups(v2_dir="/sys/fs/cgroup/system.slice/orbit.service", v2_writable=True,
                      v2_controllers=frozenset({"cpu", "memory", "pids"}), v2_kill=True)
# This project's test machines: v1 controllers writable, v2 with cgroup.kill only.
HYBRID = HostCgroups(v2_dir="/sys/fs/cgroup/unified", v2_writable=True,
                     v2_controllers=frozenset({"hugetlb"}), v2_kill=True,
                     v1_memory_dir="/sys/fs/cgroup/memory/x", v1_memsw=True,
                     v1_cpu_dir="/sys/fs/cgroup/cpu")
NOTHING = HostCgroups()


def test_pure_v2_delegated_holds_both_limits_and_kills() -> None:
    plan = choose(PURE_V2, 2 * G, 1.5)
    assert (plan.mode, plan.memory, plan.cpu, plan.kill_v2) == (Mode.V2, "v2", "v2", True)
    assert plan.v2_controllers == ("memory", "cpu") and plan.rss_limit is None


def test_v2_not_delegated_falls_back_to_v1_then_to_the_rss_watch() -> None:
    not_ours = HostCgroups(v2_dir=PURE_V2.v2_dir, v2_writable=False,
                           v2_controllers=PURE_V2.v2_controllers, v2_kill=True,
                           v1_memory_dir="/sys/fs/cgroup/memory/x")
    plan = choose(not_ours, 2 * G, None)
    assert (plan.mode, plan.memory, plan.kill_v2) == (Mode.V1, "v1", False)
    rss = choose(NOTHING, 2 * G, 1.5)
    assert (rss.mode, rss.memory, rss.cpu, rss.rss_limit) == (Mode.RSS, None, None, 2 * G)
    assert not rss.uses_cgroups


def test_hybrid_limits_on_v1_and_kills_through_v2() -> None:
    plan = choose(HYBRID, 2 * G, 1.5)
    assert (plan.mode, plan.memory, plan.cpu, plan.memsw) == (Mode.V1, "v1", "v1", True)
    assert plan.kill_v2 and plan.v2_controllers == ()  # v2 only for cgroup.kill


def test_v2_without_the_memory_controller_uses_v1_memory_and_v2_cpu() -> None:
    host = HostCgroups(v2_dir="/sys/fs/cgroup/unified", v2_writable=True,
                       v2_controllers=frozenset({"cpu"}), v2_kill=True,
                       v1_memory_dir="/sys/fs/cgroup/memory")
    plan = choose(host, G, 2.0)
    assert (plan.mode, plan.memory, plan.cpu, plan.v2_controllers) == (
        Mode.V1, "v1", "v2", ("cpu",))


def test_the_hosts_root_v2_group_kills_but_hands_no_controller_down() -> None:
    root = HostCgroups(v2_dir="/sys/fs/cgroup", v2_writable=True, v2_root=True,
                       v2_controllers=frozenset({"cpu", "memory"}), v2_kill=True)
    plan = choose(root, G, 1.0)
    assert (plan.mode, plan.memory, plan.cpu, plan.kill_v2) == (Mode.RSS, None, None, True)
    assert plan.rss_limit == G and plan.v2_controllers == ()


def test_only_a_cpu_limit_names_its_own_mode_and_none_is_none() -> None:
    assert choose(PURE_V2, None, 1.0).mode is Mode.V2
    assert choose(NOTHING, None, 1.0).mode is Mode.NONE
    assert choose(PURE_V2, None, None) == CgroupPlan(Mode.NONE)


def test_the_start_line_says_what_is_in_force() -> None:
    line = choose(HYBRID, 2 * G, 1.5).describe()
    assert line.startswith("child limits: cgroup-v1: ")
    assert "memory.limit_in_bytes 2147483648 bytes with swap (memsw)" in line
    assert "cpu.cfs_quota_us 1.5 CPUs" in line and "kills through cgroup.kill" in line
    assert "RSS watch at 1073741824 bytes" in choose(NOTHING, G, None).describe()
    assert "no CPU limit applied" in choose(NOTHING, None, 1.0).describe()


@pytest.mark.parametrize(("cpus", "quota"), [(1.5, 150_000), (0.25, 25_000), (0.001, 1000)])
def test_cpu_quota(cpus: float, quota: int) -> None:
    assert cpu_quota_us(cpus) == quota


def test_proc_cgroup_and_mountinfo_parsed() -> None:
    groups = parse_proc_cgroup("9:name=systemd:/\n4:memory:/process_api/ab\n"
                               "1:cpu,cpuacct:/\n0::/system.slice/orbit.service\n")
    assert groups == {"systemd": "/", "memory": "/process_api/ab", "cpu": "/",
                      "cpuacct": "/", "": "/system.slice/orbit.service"}
    mounts = parse_mounts(
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "35 31 0:32 /process_api /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
        "22 1 0:21 / /proc rw - proc proc rw\n")
    assert mounts == {"cpu": ("/sys/fs/cgroup/cpu,cpuacct", "/"),
                      "memory": ("/sys/fs/cgroup/memory", "/process_api"),
                      "": ("/sys/fs/cgroup/unified", "/")}
    assert own_dir(mounts["memory"], "/process_api/ab") == "/sys/fs/cgroup/memory/ab"
    assert own_dir(mounts["memory"], "/elsewhere") is None
    assert own_dir(mounts[""], "/") == "/sys/fs/cgroup/unified"
    assert own_dir(("/sys/fs/cgroup", "/"), "/a.service") == "/sys/fs/cgroup/a.service"


def test_oom_counts_read_from_either_version() -> None:
    assert oom_kills("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n") == 2
    assert oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n") == 7
    assert oom_kills("oom_kill_disable 0\nunder_oom 0\n") is None


@pytest.mark.parametrize(("field", "value"), [
    ("child_memory_max", 1000), ("child_memory_max", 2**51), ("child_memory_max", True),
    ("child_cpu_max", 0), ("child_cpu_max", 2048), ("child_cpu_max", float("nan")),
    ("child_cpu_max", "1.5")])
def test_child_limits_out_of_range_are_a_typed_error(field: str, value: object) -> None:
    with pytest.raises(OptionError) as err:
        SupervisorOptions(queue_ids=("a" * 32,), **{field: value})  # type: ignore[arg-type]
    assert err.value.code is ErrorCode.BAD_REQUEST and field in err.value.message


def test_child_limits_in_range_are_kept() -> None:
    opts = SupervisorOptions(queue_ids=("a" * 32,), child_memory_max=2 * G, child_cpu_max=1.5)
    assert (opts.child_memory_max, opts.child_cpu_max) == (2 * G, 1.5)
