"""resource-query's ``find`` as Fluxion's expression evaluator reads it
(resource/evaluators/expr_eval_api.cpp, expr_eval_vtx_target.cpp and dfu_impl_t::find):
every value checked before the walk (an invalid one: an error and no EXPRESSION block,
command.cpp's cmd_find), ``agfilter=false`` false of every vertex, one precedence left to
right, the last agfilter predicate deciding whether counts are shown."""

from __future__ import annotations

import yaml
from support.rq_run import rq

SEP = "INFO: =============================\n"


def _expr(e: str) -> str:
    return f'{SEP}INFO: EXPRESSION="{e}"\n{SEP}'


def _find(tmp_path, graph, *exprs: str, fmt: str = "simple") -> tuple[str, str]:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "version": 9999, "attributes": {"system": {"duration": 60}},
        "resources": [{"type": "slot", "count": 1, "label": "s",
                       "with": [{"type": "node", "count": 1}]}],
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    script = f"match allocate {job}\n" + "".join(f"find {e}\n" for e in exprs) + "quit\n"
    out, err, rc = rq(tmp_path, graph, script, "-P", "high", "-F", fmt)
    assert rc == 0 and "Traceback" not in err
    return out[out.index(SEP, out.index("JOBID=1")) + len(SEP):], err


def test_agfilter_false_is_false_of_every_vertex(tmp_path, tiny_grug):
    out, err = _find(tmp_path, tiny_grug, "agfilter=false", "status=up and agfilter=f")
    assert (out, err) == (_expr("agfilter=false") + _expr("status=up and agfilter=f"), "")


def test_operators_apply_left_to_right(tmp_path, tiny_grug):
    """``sched-now=allocated or status=up and status=down``: (allocated or up) and down,
    nothing is down, so nothing; with ``and`` binding tighter it would be node1's subtree."""
    e = "sched-now=allocated or status=up and status=down"
    out, err = _find(tmp_path, tiny_grug, e)
    assert (out, err) == (_expr(e), "")


def test_the_last_agfilter_decides_what_is_shown(tmp_path, tiny_grug):
    """``status=down or agfilter=true``: true of every vertex (the or), and the counts
    shown, for the vertices that have a filter; ``agfilter=t and agfilter=false`` is
    false of every vertex: nothing."""
    out, err = _find(tmp_path, tiny_grug, "status=down or agfilter=true",
                     "agfilter=t and agfilter=false", fmt="jgf")
    assert err == ""
    first, second = out.split(_expr("status=down or agfilter=true"))
    assert '"agfilter": {"core": "used:0, total:16"' in first  # the cluster's filter
    assert '"type": "core"' not in first  # a leaf has no filter: not shown
    assert second == _expr("agfilter=t and agfilter=false")


def test_an_invalid_value_is_an_error_without_an_expression_block(tmp_path, tiny_grug):
    bad = ["status=bogus", "sched-now=busy", "sched-future=later", "agfilter=yes",
           "jobid-alloc=x", "names=n[", "property=", "status=up and nonsense",
           "status=up or"]
    out, err = _find(tmp_path, tiny_grug, *bad)
    assert out == ""
    assert err.count("invalid criteria") == len(bad)


def test_names_and_property_are_read_lower_cased(tmp_path, tiny_grug):
    """validate/evaluate lower-case the value: NODE1 names node1; a property name is
    looked up lower-cased (set-property keeps the case it is given)."""
    out, err, rc = rq(tmp_path, tiny_grug,
                      "set-property /tiny0/rack0/node1 gpuType=x\n"
                      "set-property /tiny0/rack0/node0 fast=1\n"
                      "find names=NODE1\nfind property=FAST\nfind property=gpuType\nquit\n")
    assert (rc, err) == (0, "")
    node1 = out[:out.index(_expr("names=NODE1"))]
    assert "node1[1:x]" in node1 and "node0" not in node1
    rest = out[out.index(_expr("names=NODE1")) + len(_expr("names=NODE1")):]
    assert rest.startswith("      ---------node0[1:x]\n")
    assert rest.endswith(_expr("property=FAST") + _expr("property=gpuType"))
