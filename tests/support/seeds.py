"""The seed of a randomized test: fixed by default, printed, random only when asked.

A test that draws its inputs at random tries the same inputs on every run unless the person
running it asks for others, so that a failure in CI is the same failure on a laptop.
`FLUXNODE_TEST_SEED` chooses: unset, each test gets a fixed seed of its own (derived from
its name, so two tests do not share their draws); an integer, that seed for every test (to
replay a failure: the seed is printed); `random`, a fresh seed per test (a longer search,
e.g. `FLUXNODE_TEST_SEED=random make check`).
"""

from __future__ import annotations

import zlib

from fluxnode.testing.fault_schedule import choose_seed

SEED_ENV = "FLUXNODE_TEST_SEED"


def choose(name: str) -> int:
    """The seed for the test called `name`, printed with how to replay it."""
    seed = choose_seed(default=zlib.crc32(name.encode()) & ((1 << 30) - 1), env=SEED_ENV)
    print(f"seed {seed} ({SEED_ENV}={seed} replays it)")
    return seed
