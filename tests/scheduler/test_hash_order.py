"""hash_order replays the order GCC 12's libstdc++ gives the keys of an
``std::unordered_map<int64_t, ...>``. The oracle is libstdc++ itself: the pasted orders
were printed by this C++ program built with g++ 12.2 (``g++ -O1 order.cpp``, fed one
line of keys per container), and the last test builds and runs it when a C++ compiler
is there, on random insert sequences drawn with a fixed seed.
"""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from fluxnode.scheduler.traversers.hash_order import (
    HashOrderError,
    UnorderedKeys,
    next_bucket_count,
)

ORDER_CPP = r"""
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>
int main () {
    std::string line;
    while (std::getline (std::cin, line)) {
        std::istringstream in (line);
        std::unordered_map<int64_t, int> s;
        int64_t k;
        while (in >> k) s[k] += 1;
        bool first = true;
        for (auto &kv : s) { std::cout << (first ? "" : " ") << kv.first; first = false; }
        std::cout << "\n";
    }
}
"""

# keys inserted (left to right) -> the order libstdc++ iterates them
PASTED = [
    ([1, 0], [0, 1]),
    ([0, 1, 2, 3], [3, 2, 1, 0]),
    ([3, 16, 29, 0, 13], [13, 0, 29, 16, 3]),  # 13 buckets: 16 and 29 share bucket 3
    # the 14th key rehashes to 29 buckets
    (list(range(1, 16)), [15, 14, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]),
    ([-1, 0, 5], [5, 0, -1]),  # -1 hashes as 2**64 - 1
    ([40, 7, 100, 2, 33, 59, 12], [12, 2, 100, 59, 33, 7, 40]),
    ([1, 1, 2, 2], [2, 1]),
]


@pytest.mark.parametrize(("keys", "order"), PASTED)
def test_the_order_libstdcxx_printed(keys, order):
    assert list(UnorderedKeys(keys)) == order


def test_bucket_counts_are_libstdcxx_primes():
    # _Prime_rehash_policy::_M_next_bkt(n), printed by g++ 12.2 for these n
    assert [next_bucket_count(n)[0] for n in (12, 14, 26, 58, 118, 236, 1000)] == \
        [13, 17, 29, 59, 127, 241, 1031]


def test_a_table_beyond_the_modelled_primes_is_refused():
    with pytest.raises(HashOrderError, match="more than 1056323 buckets"):
        next_bucket_count(1_056_324)


def test_random_insert_sequences_against_the_real_libstdcxx(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build libstdc++'s own answer")
    (tmp_path / "order.cpp").write_text(ORDER_CPP)
    subprocess.run([cxx, "-O1", "-o", str(tmp_path / "order"), str(tmp_path / "order.cpp")],
                   check=True, capture_output=True, timeout=120)
    rng = random.Random(35)
    cases = []
    for _ in range(400):
        n = rng.choice([1, 2, 5, 13, 14, 15, 29, 30, 60, 200, 1000])
        hi = rng.choice([5, 20, 100, 10**6, 2**40])
        cases.append([rng.randint(-3 if rng.random() < 0.2 else 0, hi) for _ in range(n)])
    text = "".join(" ".join(map(str, keys)) + "\n" for keys in cases)
    got = subprocess.run([str(tmp_path / "order")], input=text, capture_output=True,
                         text=True, check=True, timeout=60).stdout.splitlines()
    assert len(got) == len(cases)
    for keys, line in zip(cases, got, strict=True):
        assert [int(k) for k in line.split()] == list(UnorderedKeys(keys)), keys
