"""The fast traverser's one decision per walk, and the one path by which its caches hear of
changed vertices.

``fast_shortcuts.decide`` says which speed-ups a select walk takes; a slot at the root
(``slot > node``: the root chooses its candidates all at once) takes none of the root
index, templates or leaves in line. The oracle is the plain ``Traverser`` with the same
tie rule, which has none of the shortcuts: stream by stream, the fast traverser must
give its answers. ``dfu_impl.SubtreeCache`` tells every watcher set of each vertex popped;
the expected sets are written out here.
"""

from __future__ import annotations

import dataclasses

import pytest
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from fluxnode.scheduler.traversers.dfu_impl import SubtreeCache
from fluxnode.scheduler.traversers.fast_shortcuts import NONE, Shortcuts, decide
from support.sched_graphs import cores, grug_recipe, jobspec

# six alike nodes of two sockets of four cores and a gpu, under the cluster itself: a
# slot of nodes sits at the root
NODES = grug_recipe("six", ("cluster", "node", 6), ("node", "socket", 2, 1),
                    ("socket", "core", 4, 1), ("socket", "gpu", 1, 1))


def _root_slot(nodes: int, ncores: int) -> dict:
    return jobspec([{"type": "slot", "count": 1, "label": "default", "with": [
        {"type": "node", "count": nodes, "with": [
            {"type": "socket", "count": 1, "with": [{"type": "core", "count": ncores}]}]}]}])


def _node_cores(ncores: int) -> dict:
    return jobspec([{"type": "node", "count": 1, "with": [{"type": "socket", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "default", "with": [
            {"type": "core", "count": ncores}]}]}]}])


@pytest.mark.parametrize("policy", ["low", "high", "lonode", "locality", "first",
                                    "firstnodex"])
@pytest.mark.parametrize("stable", [False, True])
def test_a_slot_at_the_root_gives_the_plain_walks_answers(tmp_path, policy, stable):
    """Matches with a slot at the root between ordinary ones (which leave a root index,
    templates and remembered prunes behind), and cancels: the plain walk's answers."""
    path = tmp_path / "six.graphml"
    path.write_text(NODES)
    plain = Traverser(read_grug(path), Policy.parse(policy, stable_ties=stable))
    fast = FastTraverser(read_grug(path), Policy.parse(policy, stable_ties=stable))
    stream = [cores(1), _root_slot(2, 3), _node_cores(2), _root_slot(1, 4), _root_slot(3, 1),
              cores(1), _root_slot(6, 1), _root_slot(2, 5), _node_cores(3)]
    taken = 0
    for i, js in enumerate(stream * 2):
        got = []
        for t in (plain, fast):
            try:
                res = t.match(js, op="allocate", jobid=i + 1)
                got.append(sorted((e.vertex.uniq_id, e.needs, e.exclusive)
                                  for e in res.selection))
            except NoMatch as exc:
                got.append(type(exc).__name__)
        assert got[0] == got[1], (i, got)
        taken += type(got[0]) is list
        if i % 3 == 2 and type(got[0]) is list:
            plain.cancel(i + 1)
            fast.cancel(i + 1)
    assert taken >= 8  # the stream matched, not only failed


def test_the_decision_for_each_kind_of_walk():
    """The table of docs/scheduler.md (The fast traverser's parts), written out."""
    low_fast = Policy.parse("low", stable_ties=True)
    low_exact = Policy.parse("low")
    first = Policy.parse("first")
    variation = Policy.parse("variation")
    assert decide(low_fast, False, False, False) == Shortcuts(True, True, False, True)
    assert decide(low_exact, False, False, False) == Shortcuts(False, True, False, True)
    assert decide(first, False, False, False) == Shortcuts(False, False, True, True)
    assert decide(variation, False, False, False) == Shortcuts(False, True, False, True)
    # constraints: none of them; a node at the root: the first-match walk only
    assert decide(low_fast, True, False, False) == NONE
    assert decide(first, True, False, False) == NONE
    assert decide(first, False, True, False) == Shortcuts(False, False, True, False)
    assert decide(low_fast, False, True, False) == NONE
    # a slot at the root: the first-match walk's leaves in line stay on
    assert decide(low_fast, False, False, True) == NONE
    assert decide(first, False, False, True) == Shortcuts(False, False, True, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decide(first, False, False, False).templates = False  # type: ignore[misc]


def test_every_watcher_hears_of_each_vertex_popped_until_it_stops_watching():
    cache = SubtreeCache()
    cache[1] = ("outcome",)
    a: set[int] = set()
    b: set[int] = set()
    cache.watch(a)
    cache.watch(b)
    assert cache.pop(1) == ("outcome",)
    assert cache.pop(7) is None  # not cached: the watchers hear of it all the same
    assert a == {1, 7} and b == {1, 7} and 1 not in cache
    cache.unwatch(a)
    cache.pop(9)
    assert a == {1, 7} and b == {1, 7, 9}
