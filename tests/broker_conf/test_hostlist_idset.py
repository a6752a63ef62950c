"""RFC 29 hostlist and RFC 22 idset tables (test vectors from the RFCs plus our own)."""

from __future__ import annotations

import pytest
from fluxnode.broker_conf import hostlist, idset

RFC29_VECTORS = [
    ("", []),
    ("foox,fooy,fooz", ["foox", "fooy", "fooz"]),
    ("[1-3,5-6]", ["1", "2", "3", "5", "6"]),
    ("foo[1-5]", ["foo1", "foo2", "foo3", "foo4", "foo5"]),
    ("foo[0-4]-eth2", [f"foo{i}-eth2" for i in range(5)]),
    ("foo1,foo1,foo1", ["foo1", "foo1", "foo1"]),
    ("[00-02]", ["00", "01", "02"]),
    ("[00-2]", ["00", "01", "02"]),
    ("foo[1,1,2,1]", ["foo1", "foo1", "foo2", "foo1"]),
    (
        "kind-worker,kind-worker[2-4]",
        ["kind-worker", "kind-worker2", "kind-worker3", "kind-worker4"],
    ),
    ("node[1-4,7]", ["node1", "node2", "node3", "node4", "node7"]),
    ("node[01-10]", [f"node{i:02d}" for i in range(1, 11)]),
    ("node[9-11]", ["node9", "node10", "node11"]),
    ("foo[0-3,18,4,20]", ["foo0", "foo1", "foo2", "foo3", "foo18", "foo4", "foo20"]),
    ("test[1,128]", ["test1", "test128"]),
]


@pytest.mark.parametrize(("text", "hosts"), RFC29_VECTORS)
def test_hostlist_decode(text, hosts):
    assert hostlist.decode(text) == hosts


ENCODE_TABLE = [
    ([], ""),
    (
        ["kind-worker", "kind-worker2", "kind-worker3", "kind-worker4"],
        "kind-worker,kind-worker[2-4]",
    ),
    (["node1", "node2", "node3", "node4", "node7"], "node[1-4,7]"),
    ([f"node{i:02d}" for i in range(1, 11)], "node[01-10]"),
    (["node9", "node10"], "node[9-10]"),
    (["node3", "node1"], "node[3,1]"),  # order is kept, never sorted
    (["foo1", "foo1"], "foo[1,1]"),
    (["a1", "b1", "a2"], "a1,b1,a2"),
    (["login", "node0", "node1"], "login,node[0-1]"),
    (["n9", "n10", "n05", "n06"], "n[9-10],n[05-06]"),  # padding change starts a new run
    (["foo0-eth2", "foo1-eth2"], "foo0-eth2,foo1-eth2"),
    (["1", "2", "3"], "[1-3]"),
    (["single7"], "single7"),
]


@pytest.mark.parametrize(("hosts", "text"), ENCODE_TABLE)
def test_hostlist_encode(hosts, text):
    assert hostlist.encode(hosts) == text
    assert hostlist.decode(text) == hosts


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("node[1-4", "unmatched '['"),
        ("node1-4]", "unmatched ']'"),
        ("node[[1]]", "nested"),
        ("node[]", "empty brackets"),
        ("node[4-1]", "descending"),
        ("node[a-b]", "not a non-negative integer"),
        ("node[1-]", "not a non-negative integer"),
        ("a,,b", "empty hostname"),
        ("node 1", "bad character"),
        ("n[1]x[2]", "more than one"),
        ("n[0-99999999]", "names 100000000 hosts, which exceeds"),
    ],
)
def test_hostlist_errors_name_input(bad, fragment):
    with pytest.raises(hostlist.HostlistError) as exc:
        hostlist.decode(bad)
    assert repr(bad) in str(exc.value)
    assert fragment in str(exc.value)


@pytest.mark.parametrize("bad", ["", "a b", "x[1]", "a,b", None])
def test_hostlist_encode_rejects_bad_names(bad):
    with pytest.raises(hostlist.HostlistError, match="invalid hostname"):
        hostlist.encode([bad])


IDSET_TABLE = [
    ("", []),
    ("0", [0]),
    ("0-3,7", [0, 1, 2, 3, 7]),
    ("[0-3,7]", [0, 1, 2, 3, 7]),
    ("1,2,5,4", [1, 2, 4, 5]),
    ("3,3,1-2", [1, 2, 3]),
    ("[99-101]", [99, 100, 101]),
    ("42", [42]),
]


@pytest.mark.parametrize(("text", "ids"), IDSET_TABLE)
def test_idset_decode(text, ids):
    assert idset.decode(text) == ids


@pytest.mark.parametrize(
    ("ids", "text", "bracketed"),
    [
        ([], "", ""),
        ([5], "5", "5"),
        ([0, 1], "0-1", "[0-1]"),
        ([7, 0, 3, 1, 2], "0-3,7", "[0-3,7]"),
        ([1, 3, 5], "1,3,5", "[1,3,5]"),
        ({4, 5, 6, 10, 11}, "4-6,10-11", "[4-6,10-11]"),
    ],
)
def test_idset_encode(ids, text, bracketed):
    assert idset.encode(ids) == text
    assert idset.encode(ids, brackets=True) == bracketed
    assert idset.decode(text) == sorted(set(ids))


def test_idset_encode_without_ranges():
    assert idset.encode([0, 1, 2], ranges=False) == "0,1,2"


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("1-", "not a non-negative integer"),
        ("-1", "not a non-negative integer"),
        ("a", "not a non-negative integer"),
        ("01", "leading zero"),
        ("3-1", "descending"),
        ("1,,2", "not a non-negative integer"),
        ("1 ,2", "not a non-negative integer"),
        ("0-4294967295", "holds 4294967296 ids, which exceeds"),
    ],
)
def test_idset_errors_name_input(bad, fragment):
    with pytest.raises(idset.IdsetError) as exc:
        idset.decode(bad)
    assert repr(bad) in str(exc.value)
    assert fragment in str(exc.value)


@pytest.mark.parametrize("bad", [-1, "1", 1.5, True])
def test_idset_encode_rejects_non_ids(bad):
    with pytest.raises(idset.IdsetError, match="non-negative integers"):
        idset.encode([bad])
