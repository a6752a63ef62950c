"""The arithmetic tree shapes against parent tables built as flux-core's topology plugins
build them (src/modules/overlay/topology.c, src/common/libutil/kary.c): every answer of
`Topology` for every rank of every size up to 70 is compared with what the table says,
found by brute force over it."""

from __future__ import annotations

import pytest
from fluxnode.broker_conf.topology import Topology, _mincrit_choose_k

SIZES = range(1, 71)
SPECS = ["kary:0", "kary:1", "kary:2", "kary:3", "kary:5", "binomial", "mincrit",
         "mincrit:0", "mincrit:1", "mincrit:2", "mincrit:3"]


def flux_parents(spec: str, size: int) -> list[int | None]:
    """The parent table flux-core fills: rank 0 is everyone's parent until the plugin runs."""
    table: list[int | None] = [None] + [0] * (size - 1)
    scheme, _, arg = spec.partition(":")
    if scheme == "kary" and int(arg) > 0:
        k = int(arg)
        for i in range(1, size):  # kary_parentof
            table[i] = i - 1 if k == 1 else (k + (i + 1) - 2) // k - 1
    elif scheme == "mincrit":
        k = int(arg) if arg else _mincrit_choose_k(size)
        if k > 0:
            for i in range(k + 1, size):
                table[i] = (i - k - 1) % k + 1
    elif scheme == "binomial":
        k = 0
        while (1 << k) < size:  # binomial_smallest_k
            k += 1

        def generate(root: int, k: int) -> None:  # binomial_generate
            for j in range(k):
                child = root + (1 << j)
                if child < size:
                    table[child] = root
                    generate(child, j)

        generate(0, k)
    return table


def ancestors(table: list[int | None], rank: int) -> list[int]:
    out, p = [], table[rank]
    while p is not None:
        out.append(p)
        p = table[p]
    return out


@pytest.mark.parametrize("spec", SPECS)
def test_every_answer_matches_flux_cores_table(spec):
    for size in SIZES:
        table = flux_parents(spec, size)
        topo = Topology.from_spec(spec, size)
        assert topo.parents == tuple(table), (spec, size)
        up = [ancestors(table, r) for r in range(size)]
        assert topo.maxlevel == max(len(a) for a in up), (spec, size)
        for r in range(size):
            assert topo.children(r) == [c for c in range(size) if table[c] == r], (spec, size, r)
            assert topo.level(r) == len(up[r]), (spec, size, r)
            assert topo.ancestors(r) == up[r]
            below = [d for d in range(size) if d == r or r in up[d]]
            assert topo.subtree(r) == below, (spec, size, r)
            for t in range(size) if size <= 40 else ():  # all pairs: cubic
                route = next((c for c in [t, *up[t]] if table[c] == r), None)
                assert topo.child_route(r, t) == route, (spec, size, r, t)


def test_a_million_ranks_agree_with_the_formulas_at_their_edges():
    size = 1_000_000
    kary = Topology.from_spec("kary:2", size)
    assert kary.children(499_999) == [999_999]
    assert kary.children(500_000) == []
    assert kary.parent(999_999) == 499_999 and kary.maxlevel == 19
    binomial = Topology.from_spec("binomial", size)
    assert binomial.children(0) == [1 << j for j in range(20)]
    assert binomial.parent(999_999) == 999_998 and binomial.level(999_999) == 999_999 .bit_count()
    assert binomial.subtree(2 ** 19 + 2 ** 18) == list(range(786_432, 1_000_000))
    chain = Topology.from_spec("kary:1", size)
    assert chain.level(999_999) == 999_999 and chain.child_route(5, 999_999) == 6
