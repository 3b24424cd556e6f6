"""IDs sort by creation: by millisecond, and by creation order within one (a batch made in
one millisecond stays in order); unique across threads, processes and forks."""

from __future__ import annotations

import itertools
import os
import threading
import time

from support.waiting import UNIT

from orbit_wire.ids import IdMaker, is_id, new_id, new_secret

MS = 1_800_000_000_000


def test_ids_of_one_millisecond_count_up_in_creation_order() -> None:
    maker = IdMaker()
    made = [maker.new_id(MS) for _ in range(5_000)]
    assert all(is_id(i) for i in made)
    assert made == sorted(made) and len(set(made)) == len(made)
    assert {i[:12] for i in made} == {f"{MS:012x}"}
    # Counting up by one: a batch's rows are neighbours in every index on the ID.
    assert {int(b[22:], 16) - int(a[22:], 16) for a, b in itertools.pairwise(made)} == {1}


def test_a_later_millisecond_sorts_after() -> None:
    maker = IdMaker()
    first = [maker.new_id(MS + 1) for _ in range(3)]
    assert max(first) < maker.new_id(MS + 2)
    assert maker.new_id(MS) < min(first)  # the time leads, whatever the sequence


def test_two_makers_in_one_millisecond_are_apart() -> None:
    a, b = IdMaker(), IdMaker()
    ours = {a.new_id(MS) for _ in range(1_000)}
    theirs = {b.new_id(MS) for _ in range(1_000)}
    assert not ours & theirs
    assert len({i[12:22] for i in ours}) == 1 and {i[12:22] for i in ours} != {
        i[12:22] for i in theirs}


def test_a_forked_child_draws_its_own_tag() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one ID and leave at once
        os.write(write, new_id(MS).encode())
        os._exit(0)
    os.close(write)
    try:
        child_id = os.read(read, 64).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert is_id(child_id) and child_id[12:22] != new_id(MS)[12:22]


def test_unique_across_threads_in_one_millisecond() -> None:
    maker = IdMaker()
    out: list[list[str]] = [[] for _ in range(4)]

    def make(bucket: list[str]) -> None:
        bucket.extend(maker.new_id(MS) for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(b,)) for b in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30 * UNIT)
    everything = [i for bucket in out for i in bucket]
    assert len(everything) == 20_000 and len(set(everything)) == 20_000
    assert all(bucket == sorted(bucket) for bucket in out)


def test_the_process_maker_follows_the_wall_clock() -> None:
    now = time.time_ns() // 1_000_000
    made = [new_id(now), new_id(now), new_id(now + 5)]
    assert made == sorted(made) and len(set(made)) == 3
    assert int(made[-1][:12], 16) == now + 5


def test_secrets_are_256_bit_hex_and_distinct() -> None:
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100 and all(len(s) == 64 and int(s, 16) >= 0 for s in secrets)
