"""IDs sort by creation: by millisecond, and by creation order within one (a batch made in
one millisecond stays in order), unique across threads, never backwards when the clock is.
Each test makes its own IdMaker, so the process's ``new_id`` keeps the real clock's state."""

from __future__ import annotations

import itertools
import threading
import time

from orbit_wire.ids import IdMaker, is_id, new_id, new_secret

MS = 1_800_000_000_000


def test_ids_of_one_millisecond_count_up_in_creation_order() -> None:
    maker = IdMaker()
    made = [maker.new_id(MS) for _ in range(5_000)]
    assert all(is_id(i) for i in made)
    assert made == sorted(made) and len(set(made)) == len(made)
    assert {i[:12] for i in made} == {f"{MS:012x}"}
    # Counting up by one: a batch's rows are neighbours in every index on the ID.
    assert {int(b[12:], 16) - int(a[12:], 16) for a, b in itertools.pairwise(made)} == {1}


def test_a_new_millisecond_sorts_after_and_starts_at_random() -> None:
    maker = IdMaker()
    first = [maker.new_id(MS) for _ in range(3)]
    later = [maker.new_id(MS + 1) for _ in range(3)]
    assert max(first) < min(later)
    starts = {maker.new_id(MS + 10 + k)[12:] for k in range(50)}
    assert len(starts) == 50  # random starts, not a counter carried over
    # Two processes in one millisecond: apart (80 random bits), each counting up.
    assert IdMaker().new_id(MS) != IdMaker().new_id(MS)


def test_a_clock_stepping_back_never_makes_an_earlier_id() -> None:
    maker = IdMaker()
    ahead = maker.new_id(MS + 1_000)
    behind = [maker.new_id(MS + 500) for _ in range(3)]
    assert ahead < behind[0] < behind[1] < behind[2]
    assert maker.new_id(MS + 1_001) > behind[-1]


def test_unique_across_threads_in_one_millisecond() -> None:
    maker = IdMaker()
    out: list[list[str]] = [[] for _ in range(4)]

    def make(bucket: list[str]) -> None:
        bucket.extend(maker.new_id(MS) for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(b,)) for b in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    everything = [i for bucket in out for i in bucket]
    assert len(everything) == 20_000 and len(set(everything)) == 20_000
    assert all(bucket == sorted(bucket) for bucket in out)


def test_the_process_maker_follows_the_wall_clock() -> None:
    now = time.time_ns() // 1_000_000
    made = [new_id(now), new_id(now), new_id(now + 5)]
    assert made == sorted(made) and len(set(made)) == 3
    assert int(made[-1][:12], 16) >= now + 5


def test_secrets_are_256_bit_hex_and_distinct() -> None:
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100 and all(len(s) == 64 and int(s, 16) >= 0 for s in secrets)
