"""leaf_fields: the compiled reading of a leaf parent's shape against its Python reference.

A template is replayed for every vertex whose fields equal the first one's, so the two
implementations must give equal tuples (and the same None, and the same errors) for
any vertex: children with and without children of their own, any types, ids, sizes and
statuses, a vertex class whose fields are properties, an unset slot.
"""

from __future__ import annotations

import pytest
from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.traversers import leaf_shapes
from hypothesis import given, settings
from hypothesis import strategies as st
from support import seeds

compiled = pytest.mark.skipif(not leaf_shapes.COMPILED,
                              reason="the C extension is not built (or FLUXNODE_PURE_PYTHON)")


class PropertyVertex(Vertex):
    """A vertex whose ``status`` is a property: read the generic way."""

    __slots__ = ()

    @property
    def status(self):
        return Vertex.status.__get__(self).upper()

    @status.setter
    def status(self, value):
        Vertex.status.__set__(self, value)


GRANDCHILD = [Vertex(9999, "core", "core", "core9999", 0)]
kid = st.tuples(st.sampled_from(["core", "gpu", "memory"]), st.integers(-1, 2**40),
                st.integers(0, 2**63 - 1), st.sampled_from(["up", "down", "drain"]),
                st.sampled_from(["leaf"] * 8 + ["parent", "unset", "property"]))


def _vertex(n, spec):
    type_, id_, size, status, kind = spec
    cls = PropertyVertex if kind == "property" else Vertex
    v = cls(n, type_, type_, f"{type_}{n}", id_, size=size)
    v.status = status
    if kind == "parent":
        v.children = GRANDCHILD
    elif kind == "unset":
        del v.size
    return v


def _fields(impl, parent, kids):
    u = _vertex(0, parent)
    u.children = [_vertex(i + 1, k) for i, k in enumerate(kids)]
    try:
        return impl(u)
    except AttributeError as exc:
        return AttributeError, str(exc)


@compiled
@settings(max_examples=300, deadline=None)
@given(parent=kid.filter(lambda k: k[4] in ("leaf", "property")),
       kids=st.lists(kid, max_size=40))
def test_the_compiled_fields_are_the_python_fields(parent, kids):
    py = _fields(leaf_shapes._leaf_fields_py, parent, kids)
    c = _fields(leaf_shapes._c_fields, parent, kids)
    assert py == c
    if py is not None and py[0] is not AttributeError:
        assert len(py) == 8 and all(type(x) is tuple for x in py[4:])


def test_a_socket_of_cores_reads_as_written():
    """The contract, with the expected tuple written out; a child with children: None."""
    u = Vertex(0, "socket", "socket", "socket1", 1)
    u.children = [Vertex(1, "core", "core", "core0", 0), Vertex(2, "gpu", "gpu", "gpu3", 3)]
    u.children[1].status = "down"
    for impl in {leaf_shapes._leaf_fields_py, leaf_shapes.leaf_fields}:
        assert impl(u) == ("socket", 1, 1, "up", ("core", "gpu"), (0, 3), (1, 1),
                           ("up", "down"))
        u.children[0].children = GRANDCHILD
        assert impl(u) is None
        u.children[0].children = ()


def _numbers(impl, vertices):
    """What shape_templates._leaf_shape makes of ``impl``'s answers: a number per vertex (None
    for one whose children have children), new shapes numbered in order of meeting."""
    buckets: dict = {}
    ids: dict = {}
    out = []
    for u in vertices:
        try:
            got = impl(u, buckets)
        except AttributeError as exc:
            out.append((AttributeError, str(exc)))
            continue
        if got is None or type(got) is int:
            out.append(got)
            continue
        h, whole = got
        assert whole not in ids  # a shape numbered before is found, never numbered again
        number = ids[whole] = len(ids)
        buckets.setdefault(h, []).append((whole, number))
        out.append(number)
    return out


@compiled
@settings(max_examples=200, deadline=None)
@given(shapes=st.lists(st.tuples(kid.filter(lambda k: k[4] in ("leaf", "property")),
                                 st.lists(kid, max_size=6)), min_size=1, max_size=4),
       picks=st.lists(st.integers(0, 3), min_size=1, max_size=30))
def test_leaf_numbers_name_equal_fields_alike_in_both_implementations(shapes, picks):
    """leaf_number: the compiled lookup and the Python one number a stream of vertices
    alike (new objects each time, built from a few shapes so that most repeat), equal
    fields get one number and different fields different ones (the oracle: the Python
    leaf_fields of each), and both raise alike on an unset slot."""
    def build(parent, kids):
        u = _vertex(0, parent)
        u.children = [_vertex(i + 1, k) for i, k in enumerate(kids)]
        return u

    vertices = [build(*shapes[p % len(shapes)]) for p in picks]
    py = _numbers(leaf_shapes._leaf_number_py, vertices)
    c = _numbers(leaf_shapes._c_number, vertices)
    assert py == c
    seen: dict = {}
    for u, number in zip(vertices, py, strict=True):
        try:
            fields = leaf_shapes._leaf_fields_py(u)
        except AttributeError:
            continue
        if fields is None:
            assert number is None
            continue
        assert seen.setdefault(fields, number) == number
    assert len(set(seen.values())) == len(seen)


def test_a_bucket_that_is_not_a_list_of_pairs_is_refused():
    u = Vertex(0, "socket", "socket", "socket0", 0)
    u.children = [Vertex(1, "core", "core", "core0", 0)]
    for impl in {leaf_shapes._leaf_number_py, leaf_shapes.leaf_number}:
        h, whole = impl(u, {})
        assert impl(u, {h: [(whole, 7)]}) == 7
    if leaf_shapes.COMPILED:
        h, _ = leaf_shapes._c_number(u, {})
        with pytest.raises(TypeError):
            leaf_shapes._c_number(u, {h: "not a list"})
        with pytest.raises(TypeError):
            leaf_shapes._c_number(u, {h: [("no number",)]})


def _deep_numbers(deep, number, vertices, weights):
    """What shape_templates._shape makes of ``deep`` (a deep_number) for each vertex of
    ``vertices``, falling back to numbering every part the way _deep_shape does."""
    shapes: dict = {}
    buckets: dict = {}
    ids: dict = {}

    def leaf(c):
        if c.uniq_id in shapes:
            return shapes[c.uniq_id]
        got = number(c, buckets)
        if got is not None and type(got) is not int:
            h, whole = got
            got = ids.setdefault(whole, len(ids))
            buckets.setdefault(h, []).append((whole, got))
        shapes[c.uniq_id] = got
        return got

    out = []
    for u in vertices:
        got = deep(u, shapes, buckets, weights, ids)
        if got is None:
            parts = [leaf(c) if c.children else (c.type, c.id, c.size, c.status)
                     for c in u.children]
            if None in parts:
                out.append(None)
                continue
            key = ("deep", u.type, u.size, u.status, tuple(parts),
                   tuple(weights.get(c.uniq_id, 0) for c in u.children))
            got = ids.setdefault(key, len(ids))
        out.append(got)
    return out


@compiled
def test_deep_numbers_are_the_same_in_both_implementations(tiny_grug):
    """deep_number: on a graph of nodes of sockets, with random cores down and random
    edge weights on some sockets (each node visited twice, so that the second pass finds
    every part numbered), the compiled and the Python deep_number give the same numbers,
    and nodes get one number exactly when their subtrees read the same (the oracle: the
    Python leaf_fields of every socket and each child's weight)."""
    import random

    from fluxnode.scheduler.readers.grug import read_grug

    seed = seeds.choose("test_deep_numbers_are_the_same_in_both_implementations")
    rng = random.Random(seed)
    text = tiny_grug.read_text()
    rack = '<edge id="e2" source="rack" target="node"><data key="id_scope">1</data>' \
        '<data key="multi_scale">'
    tiny_grug.write_text(text.replace(rack + "2<", rack + "16<"))
    g = read_grug(tiny_grug)
    nodes = [v for v in g.walk() if v.type == "node"]
    for c in rng.sample([v for v in g.walk() if v.type == "core"], 6):
        c.status = "down"
    weights = {s.uniq_id: rng.choice([1, 2]) for s in g.walk()
               if s.type == "socket" and rng.random() < 0.3}
    order = nodes + rng.sample(nodes, len(nodes))
    py = _deep_numbers(leaf_shapes._deep_number_py, leaf_shapes._leaf_number_py, order,
                       weights)
    c = _deep_numbers(leaf_shapes._c_deep, leaf_shapes._c_number, order, weights)
    assert py == c, seed
    seen: dict = {}
    for u, number in zip(order, py, strict=True):
        key = (tuple(leaf_shapes._leaf_fields_py(s) for s in u.children),
               tuple(weights.get(s.uniq_id, 0) for s in u.children))
        assert seen.setdefault(key, number) == number, seed
    assert len(set(seen.values())) == len(seen), seed
    assert 1 < len(seen) < len(nodes), seed  # some nodes alike, some not
