"""Inputs that ended a `fluxnode resource-query` session with a traceback (issue 35),
each answered as Fluxion's resource-query answers it.

The expected texts come from flux-sched's source (commit fd257f71, the corpora's):
``resource/traversers/dfu_impl.hpp`` (jobmeta_t::build: a jobspec without a duration
lasts the graph's whole duration, SYSTEM_MAX_DURATION = 3153600000 in resource-query; a
longer one is EINVAL), ``resource/traversers/dfu.cpp`` (run: a job ends by the graph's
end), ``resource/traversers/dfu_impl_update.cpp`` (upd_sched: a subtree filter that
refuses the job's span is skipped, the vertex not emitted, the level not stepped back)
and ``resource/utilities/command.cpp`` (what each outcome prints).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from support.rq_run import rq

SEP = "INFO: =============================\n"


def _slots(n: int, cores: int, duration: float | None) -> dict:
    """``n`` slots of one node with ``cores`` cores (the node taken whole)."""
    system = {} if duration is None else {"duration": duration}
    return {"version": 9999, "attributes": {"system": system},
            "resources": [{"type": "slot", "count": n, "label": "s", "with": [
                {"type": "node", "count": 1,
                 "with": [{"type": "core", "count": cores}]}]}],
            "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}


def _r(ranks: str, cores: str = "0-3") -> dict:
    return {"version": 1, "execution": {"R_lite": [{"rank": ranks, "children": {"core": cores}}],
                                        "nodelist": ["node[0-3]"], "starttime": 0,
                                        "expiration": 0}}


def _files(tmp_path, **docs) -> dict:
    out = {}
    for name, doc in docs.items():
        p = tmp_path / name
        p.write_text(yaml.safe_dump(doc) if name.endswith(".yaml") else json.dumps(doc))
        out[name.split(".")[0]] = p
    return out


def _placed(jobid: int, at: int) -> str:
    what = "ALLOCATED" if at == 0 else "RESERVED"
    return (f"{SEP}INFO: JOBID={jobid}\nINFO: RESOURCES={what}\n"
            f"INFO: SCHEDULED AT={'Now' if at == 0 else at}\n{SEP}")


def test_a_jobspec_without_duration_lasts_until_the_graph_ends(tmp_path):
    """No duration: the job holds its resources for 3153600000 s (R's expiration), and
    once they are busy it is reserved after them, cut at the graph's end; satisfiability
    and allocate_with_satisfiability find it satisfiable. A duration past the graph's end
    is EINVAL: no matching resources, and the job id is not used up. (Crashed with
    PlannerError ERANGE in free_during before.)"""
    f = _files(tmp_path, **{"busy.yaml": _slots(4, 4, 60), "open.yaml": _slots(1, 4, None),
                            "long.yaml": _slots(1, 4, 3153600001)})
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(_r("0-3")))
    out, err, rc = rq(tmp_path, graph,
                      f"match allocate {f['busy']}\n"
                      f"match allocate_orelse_reserve {f['open']}\n"
                      f"match satisfiability {f['open']}\n"
                      f"match allocate_with_satisfiability {f['open']}\n"
                      f"match allocate {f['long']}\n"
                      f"match allocate_orelse_reserve {f['long']}\n"
                      f"cancel 1\nmatch allocate {f['open']}\nquit\n",
                      "-f", "rv1exec", "-P", "low", "-F", "rv1_nosched")
    assert rc == 0 and "Traceback" not in err
    R = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["execution"]["starttime"], r["execution"]["expiration"]) for r in R] == [
        (0, 60), (60, 3153600000), (0, 3153600000)]
    blocks = [line for line in out.splitlines() if not line.startswith("{")]
    assert "\n".join(blocks) + "\n" == (
        _placed(1, 0) + _placed(2, 60)
        + f"{SEP}INFO: Satisfiable request\n{SEP}"
        + f"{SEP}INFO: No matching resources found\nINFO: JOBID=3\n{SEP}"
        # EINVAL from jobmeta_t::build: match_allocate returns before the job counter
        + f"{SEP}INFO: No matching resources found\nINFO: JOBID=4\n{SEP}" * 2
        + _placed(4, 0))


def test_a_match_after_a_half_failed_partial_cancel(tmp_path):
    """A partial cancel naming a rank the job does not hold fails after releasing the
    ranks it does hold, leaving the cluster's subtree filter counting them. A match
    that then needs more cores than that filter has left is placed without the cluster
    (Fluxion's upd_sched swallows upd_agfilter's EBUSY: the cluster is tagged, not
    emitted), and every output after it is one level deeper (m_trav_level is never
    stepped back). (Crashed with PlannerError EBUSY in planner_multi.add_span before.)"""
    f = _files(tmp_path, **{"two.yaml": _slots(2, 4, 60), "three.yaml": _slots(3, 4, 60),
                            "pc.json": _r("1-2")})
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(_r("0-3")))
    out, err, rc = rq(tmp_path, graph,
                      f"match allocate {f['two']}\npartial-cancel 1 rv1exec {f['pc']}\n"
                      f"match allocate {f['three']}\nfind sched-now=allocated\ncancel 2\n"
                      f"match allocate {f['two']}\nquit\n",
                      "-f", "rv1exec", "-P", "low", "-F", "simple")
    assert rc == 0
    assert err == "ERROR: error encountered while removing job 1\n"

    def node(i: int, level: int) -> str:
        d = "---" * level
        return "".join(f"      {d}---core{c}[1:x]\n" for c in range(4)) + f"      {d}node{i}[1:x]\n"

    assert out == (
        node(0, 2) + node(1, 2) + "      ---cluster0[1:s]\n" + _placed(1, 0)
        + node(1, 2) + node(2, 2) + node(3, 2) + _placed(2, 0)
        + "".join(node(i, 3) for i in range(4)) + "      ------cluster0[1:x]\n"
        + f'{SEP}INFO: EXPRESSION="sched-now=allocated"\n{SEP}'
        + node(1, 3) + node(2, 3) + "      ------cluster0[1:s]\n" + _placed(3, 0))


def _jgf(layouts: list[tuple[int, int]]) -> dict:
    """cluster0 -> node<i> (rank i) -> socket0, socket1 -> the cores ``layouts[i]`` says."""
    nodes, edges = [], []

    def add(type_, idx, path, rank, parent):
        uid = len(nodes)
        nodes.append({"id": str(uid), "metadata": {
            "type": type_, "basename": type_, "name": f"{type_}{idx}", "id": idx,
            "uniq_id": uid, "rank": rank, "exclusive": False, "unit": "", "size": 1,
            "paths": {"containment": path}}})
        if parent is not None:
            edges.append({"source": str(parent), "target": str(uid),
                          "metadata": {"subsystem": "containment"}})
        return uid

    c = add("cluster", 0, "/cluster0", -1, None)
    for n, lay in enumerate(layouts):
        nv = add("node", n, f"/cluster0/node{n}", n, c)
        k = 0
        for s, ncores in enumerate(lay):
            sv = add("socket", s, f"/cluster0/node{n}/socket{s}", n, nv)
            for _ in range(ncores):
                add("core", k, f"/cluster0/node{n}/socket{s}/core{k}", n, sv)
                k += 1
    return {"graph": {"nodes": nodes, "edges": edges}}


def test_node_exclusive_gang_over_nodes_alike_in_totals_not_in_shape(tmp_path):
    """Four nodes of 2 sockets and 4 cores, the last with 1 core on its first socket and
    3 on its second: taken whole by -P hinodex (and lonodex), each as it is. (The update
    walk replayed the first nodes' walk on the last and ended in an IndexError before.)
    Expected: Fluxion's resource-query (v0.54.0, built from source) on this graph and
    jobspec, ``-f jgf -P hinodex|lonodex -F simple -d``, the same for both."""
    graph = tmp_path / "het.json"
    graph.write_text(json.dumps(_jgf([(2, 2), (2, 2), (2, 2), (1, 3)])))
    job = tmp_path / "j.yaml"
    job.write_text(yaml.safe_dump({
        "version": 9999, "attributes": {"system": {"duration": 60}},
        "resources": [{"type": "slot", "count": 4, "label": "s", "with": [
            {"type": "node", "count": 1, "with": [
                {"type": "socket", "count": 1, "with": [{"type": "core", "count": 2}]}]}]}],
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    even = ("      ------------core0[1:x]\n      ------------core1[1:x]\n"
            "      ---------socket0[1:x]\n      ------------core2[1:x]\n"
            "      ------------core3[1:x]\n      ---------socket1[1:x]\n")
    last = ("      ------------core0[1:x]\n      ---------socket0[1:x]\n" + "".join(
        f"      ------------core{c}[1:x]\n" for c in range(1, 4))
        + "      ---------socket1[1:x]\n")
    want = ("".join(even + f"      ------node{i}[1:x]\n" for i in range(3))
            + last + "      ------node3[1:x]\n      ---cluster0[1:s]\n" + _placed(1, 0))
    for policy in ("hinodex", "lonodex"):
        out, err, rc = rq(tmp_path, graph, f"match allocate {job}\nquit\n",
                          "-f", "jgf", "-P", policy, "-F", "simple")
        assert (rc, err) == (0, "")
        assert out == want, policy


PC_DATA = Path(__file__).parent / "data" / "partial_cancel"


def _half_failed_files(tmp_path, cancel_ranks: str):
    f = _files(tmp_path, **{"two.yaml": _slots(2, 4, 60), "three.yaml": _slots(3, 4, 60),
                            "pc.json": _r(cancel_ranks)})
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(_r("0-3")))
    return f, graph


def _stdout_of(tmp_path, graph, cmds: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(graph), "-d",
         "-t", str(tmp_path / "ignored.out"), *args], input=cmds, capture_output=True,
        text=True, timeout=60)
    return proc.stdout


def test_jgf_after_a_half_failed_partial_cancel_keeps_the_left_out_vertexs_edges(tmp_path):
    """The cluster the update walk tags but does not emit (see above) is no JGF node, but
    Fluxion's upd_dfv still writes the edges into it and out of it (0 -> 6, 0 -> 11,
    0 -> 16). data/partial_cancel/half_failed.jgf is what Fluxion v0.54.0's resource-query
    wrote for these commands and graph (2026-11-28); its stdout had the remove's message."""
    f, graph = _half_failed_files(tmp_path, "1-2")
    cmds = (f"match allocate {f['two']}\npartial-cancel 1 rv1exec {f['pc']}\n"
            f"match allocate {f['three']}\nfind sched-now=allocated\ncancel 2\n"
            f"match allocate {f['two']}\nquit\n")
    out, err, rc = rq(tmp_path, graph, cmds, "-f", "rv1exec", "-P", "low", "-F", "jgf")
    assert (rc, err) == (0, "ERROR: error encountered while removing job 1\n")
    assert out == (PC_DATA / "half_failed.jgf").read_text()
    third = json.loads(out.splitlines()[6])["graph"]
    assert "0" not in {n["id"] for n in third["nodes"]}
    assert [e["target"] for e in third["edges"] if e["source"] == "0"] == ["6", "11", "16"]
    assert _stdout_of(tmp_path, graph, cmds, "-f", "rv1exec", "-P", "low") == (
        "remove: 2 not found in rank_to_counts.\n")


def test_a_partial_cancel_naming_a_rank_the_graph_lacks_releases_nothing(tmp_path):
    """Fluxion's remove meets the unknown rank 9 first (its rank set's order) and stops:
    node1 stays the job's, and its message goes to stdout (Fluxion v0.54's output in
    data/partial_cancel/unknown_rank.jgf)."""
    f, graph = _half_failed_files(tmp_path, "1,9")
    cmds = (f"match allocate {f['two']}\npartial-cancel 1 rv1exec {f['pc']}\n"
            f"find sched-now=allocated\nmatch allocate {f['three']}\n"
            f"find sched-now=allocated\ncancel 1\nfind sched-now=allocated\nquit\n")
    out, err, rc = rq(tmp_path, graph, cmds, "-f", "rv1exec", "-P", "low", "-F", "jgf")
    assert (rc, err) == (0, "ERROR: error encountered while removing job 1\n")
    assert out == (PC_DATA / "unknown_rank.jgf").read_text()
    assert _stdout_of(tmp_path, graph, cmds, "-f", "rv1exec", "-P", "low") == (
        "remove9 not found in by_rank map.\n")
