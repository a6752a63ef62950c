# ruff: noqa: E501  (GraphML lines)
"""Fluxion's errno when a match fails without setting one, as resource-query shows it.

Fluxion's update walk (dfu_impl_t::update) fails without setting errno when the selection
holds nothing exclusive (a request with no slot). reapi_cli_t::match_allocate then looks at
whatever errno the steps before left: EBUSY (a pruned vertex) and ENODEV (unsatisfiable)
are ordinary failures that consume the jobid; any other errno returns before the jobid is
counted, and resource-query's run_match reads ENOENT, like ENODEV, as "Unsatisfiable".
resource-query reads every command with editline's readline(), which leaves ENOTTY when
stdin is no terminal, so a walk that prunes nothing reports ENOTTY.
"""

from __future__ import annotations

import errno

import pytest
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import (
    NoMatch,
    Traverser,
    TraverserErrno,
    TraverserError,
    Unsatisfiable,
)
from support.rq_run import rq
from support.sched_graphs import R_TWO_NODES, grug_document, jobspec

# cluster > node[2] > core[2]: a node>core request walks it without pruning anything
FLAT_GRUG = grug_document("""  <graph id="flat" edgedefault="directed">
    <node id="cluster"><data key="root">1</data><data key="type">cluster</data><data key="basename">flat</data></node>
    <node id="node"><data key="type">node</data><data key="basename">node</data></node>
    <node id="core"><data key="type">core</data><data key="basename">core</data></node>
    <edge id="e1" source="cluster" target="node"><data key="multi_scale">2</data></edge>
    <edge id="e2" source="node" target="core"><data key="multi_scale">2</data></edge>
  </graph>
""")

NO_SLOT = jobspec([{"type": "node", "count": 1, "with": [{"type": "core", "count": 1}]}])


@pytest.fixture
def flat(tmp_path):
    p = tmp_path / "flat.graphml"
    p.write_text(FLAT_GRUG)
    return p


def _trav(path) -> Traverser:
    return Traverser(read_grug(str(path)), "first")


def test_library_default_keeps_nomatch(flat):
    t = _trav(flat)
    with pytest.raises(NoMatch) as exc:
        t.match(NO_SLOT)
    assert type(exc.value) is NoMatch and not exc.value.busy


@pytest.mark.parametrize(("left", "raised"), [
    (errno.ENOTTY, TraverserErrno), (errno.ENOENT, TraverserErrno),
    (errno.EBUSY, NoMatch), (errno.ENODEV, Unsatisfiable)])
def test_empty_update_reports_the_errno_left_before(flat, left, raised):
    t = _trav(flat)
    t.report_errno = True
    t.errno = left
    with pytest.raises(NoMatch) as exc:
        t.match(NO_SLOT)
    assert type(exc.value) is raised
    if raised is TraverserErrno:
        assert exc.value.errno == left


def test_a_pruned_vertex_leaves_ebusy(flat):
    t = _trav(flat)
    t.report_errno = True
    t.errno = errno.ENOTTY
    # core 3 of 2 fails at each node (dom_finish_vtx sets EBUSY): an ordinary failure
    with pytest.raises(NoMatch) as exc:
        t.match(jobspec([{"type": "node", "count": 1, "with": [{"type": "core", "count": 3}]}]),
                op="allocate")
    assert type(exc.value) is NoMatch and t.errno == errno.EBUSY


def test_resource_query_does_not_consume_the_jobid(tmp_path, flat):
    import yaml
    js = tmp_path / "noslot.yaml"
    js.write_text(yaml.safe_dump(NO_SLOT))
    out, _err, rc = rq(tmp_path, flat, f"match allocate {js}\nmatch allocate_orelse_reserve {js}\n"
                       f"cancel 9\nmatch allocate {js}\nquit\n")
    assert rc == 0
    # ENOTTY each time (the nonexistent cancel's ENOENT is gone by the next readline)
    assert out.count("INFO: JOBID=1\n") == 3 and "Unsatisfiable" not in out


def test_reservation_search_leaves_enoent(tmp_path, flat):
    """dfu_traverser_t::schedule's loop asks the planner for the next start time once
    more after the walk that fits; with none left the planner sets ENOENT, which an
    empty update then reports: no jobid consumed, and "Unsatisfiable request"."""
    import yaml
    busy = tmp_path / "busy.yaml"
    busy.write_text(yaml.safe_dump(jobspec([{"type": "node", "count": 2, "with": [
        {"type": "slot", "count": 1, "label": "default",
         "with": [{"type": "core", "count": 2}]}]}], duration=100)))
    js = tmp_path / "noslot.yaml"
    js.write_text(yaml.safe_dump(NO_SLOT))
    out, _err, rc = rq(tmp_path, flat, f"match allocate {busy}\n"
                       f"match allocate_orelse_reserve {js}\nmatch allocate {js}\nquit\n")
    assert rc == 0
    blocks = out.split("INFO: =============================\n")
    assert "INFO: No matching resources found\nINFO: Unsatisfiable request\nINFO: JOBID=2\n" \
        in blocks
    # the plain allocate fails at the root (all busy, EBUSY): an ordinary failure
    assert blocks.count("INFO: No matching resources found\nINFO: JOBID=2\n") == 1


# Fluxion's request_feasible counts the nodes a request needs through prime_jobspec, whose
# accum_if adds a type only when a prune filter tracks it. With the default filters
# (ALL:core,ALL:node) a request for more nodes than are up fails early as busy (EBUSY) for
# allocate_orelse_reserve; with ``-p ALL:core`` the count is 0, the check passes, and the
# walk finds the request unsatisfiable (ENODEV).
THREE_NODES = jobspec([{"type": "node", "count": 3, "with": [
    {"type": "slot", "count": 1, "label": "default", "with": [{"type": "core", "count": 1}]}]}])


def test_feasibility_with_default_filters_fails_early_as_busy(flat):
    t = _trav(flat)
    with pytest.raises(NoMatch) as exc:
        t.match(THREE_NODES, op="allocate_orelse_reserve")
    assert type(exc.value) is NoMatch and exc.value.busy


def test_feasibility_without_a_node_filter_leaves_it_to_the_walk(flat):
    t = Traverser(read_grug(str(flat)), "first", prune_filters="ALL:core")
    with pytest.raises(Unsatisfiable):
        t.match(THREE_NODES, op="allocate_orelse_reserve")


# dfu_impl_t::remove for a list of ranks (resource-query's `partial-cancel ... rv1exec`):
# the ranks' vertices are cancelled, then every ancestor gives back from its subtree span
# the units those vertices held, per type its filter tracks; it drops the job only when
# that span empties, and the job is fully cancelled only when the root drops it.
WHOLE_NODES = jobspec([{"type": "slot", "count": 2, "label": "default",
                        "with": [{"type": "node", "count": 1}]}])
CORES = jobspec([{"type": "node", "count": 2, "with": [
    {"type": "slot", "count": 1, "label": "default", "with": [{"type": "core", "count": 2}]}]}])


def test_rank_cancel_of_whole_nodes_keeps_the_job_when_node_is_not_tracked():
    t = Traverser(read_rv1(R_TWO_NODES), "low", prune_filters="ALL:core")
    t.match(WHOLE_NODES, jobid=1)
    # the released vertices are nodes; the root's filter tracks cores: nothing given back
    assert t.partial_cancel(1, [0, 1], by_counts=True) is False
    assert 1 in t.g.root.tags and 1 in t.jobs
    t.cancel(1)
    assert not t.g.root.tags


def test_rank_cancel_of_every_core_cancels_the_job():
    t = Traverser(read_rv1(R_TWO_NODES), "low", prune_filters="ALL:core")
    t.match(CORES, jobid=1)
    assert t.partial_cancel(1, [0], by_counts=True) is False
    assert t.partial_cancel(1, [1], by_counts=True) is True
    assert not t.g.root.tags and 1 not in t.jobs


def test_rank_cancel_where_the_job_planned_nothing_is_an_error(flat):
    # GRUG ranks only node vertices: the cores the job holds are on no rank, and the
    # node itself has no span of the job (dfu_impl_t::remove: rank not in rank_to_counts)
    t = Traverser(read_grug(str(flat)), "low", prune_filters="ALL:core")
    t.match(CORES, jobid=1)
    with pytest.raises(TraverserError):
        t.partial_cancel(1, [0], by_counts=True)


def test_default_partial_cancel_drops_ancestors_with_nothing_below():
    t = Traverser(read_rv1(R_TWO_NODES), "low", prune_filters="ALL:core")
    t.match(WHOLE_NODES, jobid=1)
    assert t.partial_cancel(1, [0, 1]) is True


# dom_dfv's x_in is inherited exclusivity or the request's own `exclusive: true`
# (dfu_impl_t::exclusivity); the *nodex policies' exclusive node type is used only by the
# update walk (modify_traversal), so `exclusive: false` on a node is no conflict there.
NODE_NOT_EXCLUSIVE = jobspec([{"type": "node", "count": 1, "exclusive": False, "with": [
    {"type": "slot", "count": 1, "label": "default", "with": [{"type": "core", "count": 1}]}]}])


@pytest.mark.parametrize("policy", ["lonodex", "hinodex", "firstnodex"])
def test_nodex_policy_allocates_a_node_asked_not_exclusive(flat, policy):
    t = Traverser(read_grug(str(flat)), policy)
    res = t.match(NODE_NOT_EXCLUSIVE, jobid=1)
    names = [e.vertex.name for e in res.selection]
    # the update still takes the whole node (both cores), as the policy wants
    assert names.count("core0") == 1 and names.count("core1") == 1 and "node0" in names \
        or names.count("core0") == 1 and names.count("core1") == 1 and "node1" in names
