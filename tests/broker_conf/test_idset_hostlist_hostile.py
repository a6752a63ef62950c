"""Hostile idsets and hostlists: refused before anything is expanded, at a cost linear in
the text (issue 11: ``idset.decode("0-16777215")`` took 2.8 s and 1 GiB).

The oracle is the memory a call allocates (tracemalloc's peak), which does not move with the
machine's load as a time limit does: expanding is what costs, and expanding shows as memory.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest
from fluxnode.broker_conf import hostlist, idset


def _peak(fn) -> int:
    """Peak bytes allocated by fn(); the oracle is memory, not the code."""
    tracemalloc.start()
    try:
        fn()
    except ValueError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("text", ["0-16777215", "0-4294967295", "0-18446744073709551615"])
def test_huge_idset_is_refused_without_expanding(text):
    with pytest.raises(idset.IdsetError, match=r"holds \d+ ids, which exceeds 1048576"):
        idset.decode(text)
    # expanding 16M ids cost 2.8 s and 1 GiB; refusing them must cost next to nothing
    peak = _peak(lambda: idset.decode(text))
    assert peak < 64 * 1024, f"refusing {text!r} allocated {peak} bytes"


def test_limit_is_the_callers():
    assert idset.decode("0-3", limit=4) == [0, 1, 2, 3]
    with pytest.raises(idset.IdsetError, match="holds 5 ids, which exceeds 4"):
        idset.decode("0-4", limit=4)
    # repeated and overlapping ranges count once: the limit bounds the set, not the text
    assert idset.decode("0-3,1-2,3,0-3", limit=4) == [0, 1, 2, 3]


def test_many_overlapping_ranges_cost_linear_in_text():
    text = ",".join(["0-999"] * 20000)  # 20,000 x 1,000 ids before: merged, 1,000 after
    peak = _peak(lambda: idset.decode(text))
    assert idset.decode(text) == list(range(1000))
    # the ranges of the text (3 MiB here), never the 20 million ids (over 500 MiB)
    assert peak < 16 << 20, peak


def test_huge_numbers_are_idset_errors_not_int_conversion_errors():
    # int() refuses more than 4300 digits with a bare ValueError; the id is an IdsetError
    with pytest.raises(idset.IdsetError, match="too large"):
        idset.decode("1" * 5000)
    with pytest.raises(hostlist.HostlistError, match="too large"):
        hostlist.decode("n[" + "1" * 5000 + "]")


def test_decode_ranges_never_expands():
    assert idset.decode_ranges("7,0-3,2-5,9") == [(0, 5), (7, 7), (9, 9)]
    assert idset.decode_ranges("0-18446744073709551615") == [(0, 18446744073709551615)]


def test_huge_hostlist_is_refused_without_expanding():
    text = "node[0-16777215]"
    with pytest.raises(hostlist.HostlistError, match="names 16777216 hosts, which exceeds"):
        hostlist.decode(text)
    assert _peak(lambda: hostlist.decode(text)) < 64 * 1024
    with pytest.raises(hostlist.HostlistError, match="names 3 hosts, which exceeds 2"):
        hostlist.decode("a,b[1-2]", limit=2)
    assert hostlist.count(text) == 16777216


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("node[0-16777215]", ["node0", "node16777215", "node123"], ["node16777216", "node01"]),
        ("n[01-10]x,login", ["n01x", "n10x", "login"], ["n1x", "n11x", "n01", "n010x"]),
        ("[1-3]", ["1", "3"], ["0", "4", ""]),
    ],
)
def test_matcher_is_membership_without_expanding(text, inside, outside):
    m = hostlist.Matcher(text)
    for name in inside:
        assert name in m
    for name in outside:
        assert name not in m


def test_error_messages_cut_long_input():
    text = "x" * 100000 + "["
    with pytest.raises(hostlist.HostlistError) as exc:
        hostlist.decode(text)
    assert len(str(exc.value)) < 300
    assert "100001 characters" in str(exc.value)


def test_matcher_lookup_cost_does_not_grow_with_the_hostlist():
    # 20,000 terms and ranges: a lookup must not scan them all (a constraint is checked
    # once per node vertex)
    text = ",".join(f"n{i}x[{i},{i + 2}]" for i in range(0, 40000, 2))
    m = hostlist.Matcher(text)
    t0 = time.perf_counter()
    for i in range(2000):
        assert (f"n{i * 2}x{i * 2}" in m) and (f"n{i * 2}y" not in m)
    assert time.perf_counter() - t0 < 0.5
