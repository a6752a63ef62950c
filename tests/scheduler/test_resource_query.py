"""`fluxnode resource-query` as a subprocess: output file, errors, no tracebacks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from support.rq_run import rq
from support.sched_graphs import R_TWO_NODES, cores, grug_document, grug_vertices


def test_match_cancel_and_info_blocks(tmp_path, tiny_grug):
    js = tmp_path / "job.yaml"
    js.write_text(yaml.safe_dump(cores(1)))
    out, err, rc = rq(
        tmp_path,
        tiny_grug,
        f"match allocate {js}\nmatch allocate_orelse_reserve {js}\ncancel 1 stats\nquit\n",
        "-P",
        "high",
    )
    assert rc == 0 and err == ""
    assert out.startswith("      ---------------core7[1:x]\n      ------------socket1[1:s]\n")
    assert "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n" in out
    assert 'INFO: CANCEL PREORDER COUNT="' in out


def test_errors_go_to_stderr_without_traceback(tmp_path, tiny_grug):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nresources: 7\n")
    out, err, rc = rq(tmp_path, tiny_grug,
                      f"match allocate {tmp_path}/missing.yaml\nmatch bogus x\nmatch allocate\n"
                      f"cancel 42\nmatch allocate {bad}\nget-status /nope\nquit\n")
    assert rc == 0
    assert "ERROR: can't open" in err and "ERROR: unknown subcmd bogus" in err
    assert "ERROR: malformed command" in err and "ERROR: nonexistent job 42" in err
    assert "Traceback" not in err
    assert "Could not find path /nope in resource graph." in out


def test_bad_graph_and_policy_are_one_line_errors(tmp_path, tiny_grug):
    junk = tmp_path / "junk.graphml"
    junk.write_text("not xml")
    _out, err, rc = rq(tmp_path, junk, "quit\n")
    assert rc != 0 and err.count("\n") == 1 and err.startswith("ERROR:")
    _out, err, rc = rq(tmp_path, tiny_grug, "quit\n", "-P", "sideways")
    assert rc != 0 and err.startswith("ERROR:") and "Traceback" not in err


def test_find_and_status(tmp_path, tiny_grug):
    out, err, rc = rq(tmp_path, tiny_grug,
                      "set-status /tiny0/rack0/node1 down\nget-status /tiny0/rack0/node1\n"
                      "find status=down\nquit\n")
    assert rc == 0 and err == ""
    assert "/tiny0/rack0/node1 is down\n" in out
    assert "---------node1[1:x]\n" in out and 'INFO: EXPRESSION="status=down"' in out


def test_partial_cancel_refuses_a_jgf_whose_ranks_disagree_with_the_graph(tmp_path):
    """A release document naming a vertex with another rank than the graph's frees
    nothing (as Fluxion); a consistent one frees that rank."""
    graph = tmp_path / "R.json"
    graph.write_text(json.dumps(R_TWO_NODES))
    js = tmp_path / "job.yaml"
    js.write_text(yaml.safe_dump(cores(4, nodes=2)))

    def release(rank: int) -> str:
        doc = tmp_path / f"release-{rank}.json"
        doc.write_text(json.dumps({"graph": {"nodes": [{"id": "1", "metadata": {
            "type": "node", "name": "n0", "rank": rank,
            "paths": {"containment": "/cluster0/n0"}}}], "edges": []}}))
        return str(doc)

    out, err, rc = rq(tmp_path, graph,
                      f"match allocate {js}\npartial-cancel 1 jgf {release(-1)}\n"
                      "find sched-now=allocated\n"
                      f"partial-cancel 1 jgf {release(0)}\nfind sched-now=allocated\nquit\n",
                      "-f", "rv1exec")
    assert rc == 0
    assert err.count("ERROR: error encountered while removing job 1") == 1
    first, second = out.split('INFO: EXPRESSION="sched-now=allocated"')[:2]
    held = first.rsplit("INFO: SCHEDULED AT=Now", 1)[1]
    assert "n0[" in held and "n1[" in held          # the bad document freed nothing
    assert "n0[" not in second and "n1[" in second  # the good one freed rank 0 only


def test_elapse_time_writes_what_fluxion_writes_where_it_writes_it(tmp_path, tiny_grug):
    """-e: the load block and each match's ELAPSE and visit counts. The expected lines
    (times masked) are what Fluxion's resource-query (flux-sched fd257f7) printed for the
    same graph and commands: most go to standard output even with -t, but a failed
    match's ELAPSE goes to the -t file."""
    import re
    import subprocess
    import sys

    one, big = tmp_path / "one.yaml", tmp_path / "big.yaml"
    one.write_text(yaml.safe_dump(cores(1)))
    big.write_text(yaml.safe_dump(cores(10000)))
    out_file = tmp_path / "out.R"
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(tiny_grug), "-d", "-e",
         "-t", str(out_file)],
        input=f"match allocate {one}\nmatch allocate {big}\nmatch satisfiability {one}\nquit\n",
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    stdout = proc.stdout.splitlines()
    assert re.fullmatch(r"INFO: Graph Load Time: \d\S*", stdout[0])
    elapse = re.compile(r"INFO: ELAPSE=\d+\.\d{6}")  # std::to_string of a double
    timed = [i for i, line in enumerate(stdout) if line.startswith("INFO: ELAPSE=")]
    assert timed == [9, 14] and all(elapse.fullmatch(stdout[i]) for i in timed)
    assert [line for i, line in enumerate(stdout) if i and i not in timed] == [
        "INFO: Vertex Count: 36",
        "INFO: Edge Count: 35",
        "INFO: by_type Key-Value Pairs: 7",
        "INFO: by_name Key-Value Pairs: 20",
        "INFO: by_path Key-Value Pairs: 36",
        "INFO: number of vertices with rank -1: 34",
        "INFO: number of vertices with rank 0: 1",
        "INFO: number of vertices with rank 1: 1",
        "INFO: PREORDER VISIT COUNT=8",
        "INFO: POSTORDER VISIT COUNT=5",
        "INFO: PREORDER VISIT COUNT=8",
        "INFO: POSTORDER VISIT COUNT=5",
        "INFO: PREORDER VISIT COUNT=8",
        "INFO: POSTORDER VISIT COUNT=5",
    ]
    failed = out_file.read_text().split("INFO: No matching resources found\n")[1]
    assert re.match(r"INFO: JOBID=2\nINFO: ELAPSE=\d+\.\d{6}\nINFO: =+\n", failed)
    assert out_file.read_text().count("ELAPSE") == 1


def _core_of_a_socket_job(tmp_path):
    """node[1] -> slot[1] -> socket[1] -> core[1]."""
    js = tmp_path / "job.yaml"
    js.write_text(yaml.safe_dump({
        "version": 1, "attributes": {"system": {"duration": 3600}},
        "resources": [{"type": "node", "count": 1, "with": [
            {"type": "slot", "count": 1, "label": "task", "with": [
                {"type": "socket", "count": 1, "with": [{"type": "core", "count": 1}]}]}]}],
        "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}))
    return js

def test_locality_orders_the_roots_candidates_by_interval_not_by_score(tmp_path, tiny_grug):
    """Fluxion's `locality` is not `high`: its dom_finish_graph merges the candidates'
    scores into intervals (boost::icl) and chooses by interval, so two free nodes (one
    interval) tie and keep their order, node0 first, where `high` takes node1. The
    picks below are what Fluxion's resource-query (flux-sched v0.54.0-8-gfd257f71)
    printed for this graph and stream."""
    js = _core_of_a_socket_job(tmp_path)
    out, err, rc = rq(tmp_path, tiny_grug, f"match allocate {js}\n" * 3 + "quit\n",
                      "-P", "locality")
    assert rc == 0 and err == ""
    picks = re.findall(r"(core\d+|node\d+)\[", out)
    assert picks == ["core7", "node0", "core3", "node0", "core7", "node1"]


LOCALITY_STREAM = """\
match allocate {a}
match allocate {a}
match allocate {a}
match allocate {b}
match allocate {a}
match allocate {b}
cancel 2
cancel 4
match allocate {a}
match allocate {b}
match allocate {c}
match allocate {c}
match allocate {c}
set-status /c0/node20 down
match allocate {b}
match allocate {a}
quit
"""


def _chain_grug(tmp_path, root: str, *levels: tuple[str, int, bool]):
    """A GRUG file of a cluster (basename ``root``) and a chain of ``levels``, each
    (type, count under its parent, ids scoped to the parent), each the child of the one
    before."""
    kinds = [("cluster", "cluster", root)] + [(t, t, t) for t, _n, _s in levels]
    edges, parent = [], "cluster"
    for t, n, scoped in levels:
        scope = '<data key="id_scope">1</data>' if scoped else ""
        edges.append(f'    <edge id="{parent}2{t}" source="{parent}" target="{t}">{scope}'
                     f'<data key="multi_scale">{n}</data></edge>\n')
        parent = t
    graph = tmp_path / "g.graphml"
    graph.write_text(grug_document('  <graph id="g" edgedefault="directed">\n'
                                   + grug_vertices(*kinds) + "".join(edges) + "  </graph>\n"))
    return graph


def _forty_nodes(tmp_path):
    return _chain_grug(tmp_path, "c", ("node", 40, False), ("core", 2, False))

def _jobs(out: str, names: str) -> list[str]:
    """Per job block of a -t file, the names of type ``names`` (a regex alternation)
    its lines show, in order."""
    return [" ".join(re.findall(rf"((?:{names})\d+)\[", block))
            for block in out.split("INFO: JOBID=")[:-1]]

def test_locality_takes_the_run_of_free_nodes_that_starts_highest(tmp_path):
    """40 free nodes are one run of consecutive scores, so every node ties and the first
    pick is where libstdc++'s std::sort leaves them (node30, not high's node39). Each
    exclusive job then cuts the run, and the run that starts highest goes first: after
    node30 is taken, nodes 31-39 come before 0-29; a cancel joins runs again. The
    expected picks are what Fluxion's resource-query (flux-sched v0.54.0-8-gfd257f71)
    printed for this graph and stream, one line per job."""
    graph = _forty_nodes(tmp_path)
    slot = {"type": "slot", "count": 1, "label": "s", "with": [{"type": "core", "count": 2}]}
    one_core = {"type": "slot", "count": 1, "label": "s", "with": [{"type": "core", "count": 1}]}
    files = {}
    for name, resources in (
        ("a", [{"type": "node", "count": 1, "exclusive": True, "with": [slot]}]),
        ("b", [{"type": "node", "count": 3, "exclusive": True, "with": [slot]}]),
        ("c", [one_core]),
    ):
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump({
            "version": 1, "resources": resources, "attributes": {"system": {"duration": 3600}},
            "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    out, err, rc = rq(tmp_path, graph, LOCALITY_STREAM.format(**files),
                      "-f", "grug", "-S", "CA", "-P", "locality", "-F", "simple")
    assert rc == 0 and err == ""
    jobs = _jobs(out, "core|node")
    assert jobs == [
        "core0 core1 node30",
        "core0 core1 node39",
        "core0 core1 node38",
        "core0 core1 node35 core0 core1 node36 core0 core1 node37",
        "core0 core1 node34",
        "core0 core1 node31 core0 core1 node32 core0 core1 node33",
        "core0 core1 node39",
        "core0 core1 node35 core0 core1 node36 core0 core1 node37",
        "core0 node22",
        "core1 node22",
        "core1 node23",
        "core0 core1 node27 core0 core1 node28 core0 core1 node29",
        "core0 core1 node26",
    ]


RACK_STREAM = """\
set-status /cluster0/rack2/node8 down
set-status /cluster0/rack2/node11 down
match allocate {rx}
set-status /cluster0/rack1/node5 down
match allocate {rx}
match allocate {rx}
cancel 1
set-status /cluster0/rack2/node8 up
match allocate {rx}
quit
"""


@pytest.mark.parametrize(("policy", "racks"), [
    ("first", ["rack2", "rack1", "rack0", "rack2"]),
    ("low", ["rack0", "rack1", "rack2", "rack0"]),
])
def test_a_rack_asked_for_exclusively_is_taken_with_its_down_nodes(tmp_path, policy, racks):
    """A type the jobspec asks for exclusively is taken whole: Fluxion's update follows
    every edge below it (modify_traversal), down vertices included, so each rack goes
    with all four of its nodes although two are down and the request names two. The
    picks are what Fluxion's resource-query (flux-sched v0.54.0-8-gfd257f71) printed."""
    graph = _chain_grug(tmp_path, "cluster", ("rack", 3, False), ("node", 4, True),
                        ("core", 2, True))
    rx = tmp_path / "rx.yaml"
    rx.write_text(yaml.safe_dump({
        "version": 1,
        "resources": [{"type": "rack", "count": 1, "exclusive": True, "with": [
            {"type": "node", "count": 2, "exclusive": True, "with": [
                {"type": "slot", "count": {"min": 1}, "label": "s",
                 "with": [{"type": "core", "count": 2}]}]}]}],
        "attributes": {"system": {"duration": 3600}},
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    out, err, rc = rq(tmp_path, graph, RACK_STREAM.format(rx=rx),
                      "-f", "grug", "-S", "CA", "-P", policy, "-F", "simple")
    assert rc == 0 and err == ""
    nodes = {"rack0": "node0 node1 node2 node3", "rack1": "node4 node5 node6 node7",
             "rack2": "node8 node9 node10 node11"}
    jobs = _jobs(out, "node|rack")
    assert jobs == [f"{nodes[r]} {r}" for r in racks]


def test_a_failed_partial_cancel_reports_no_visits(tmp_path):
    """Fluxion's remove zeroes its visit counts before it reads R, so a partial cancel
    that fails (a rank the job holds nothing on; R that is not JSON) prints counts of 0,
    not the last match's. Expected lines as Fluxion's resource-query printed them."""
    job = tmp_path / "a.yaml"
    job.write_text(yaml.safe_dump({
        "version": 1, "attributes": {"system": {"duration": 3600}},
        "resources": [{"type": "node", "count": 1, "exclusive": True, "with": [
            {"type": "slot", "count": 1, "label": "s",
             "with": [{"type": "core", "count": 2}]}]}],
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    other_rank = tmp_path / "pc.json"
    other_rank.write_text(json.dumps({"version": 1, "execution": {
        "R_lite": [{"rank": "1", "children": {"core": "0"}}], "nodelist": ["node1"],
        "starttime": 0, "expiration": 3600}}))
    bad = tmp_path / "bad.json"
    bad.write_text("not json\n")
    out, err, rc = rq(tmp_path, _forty_nodes(tmp_path),
                      f"match allocate {job}\npartial-cancel 1 rv1exec {other_rank} stats\n"
                      f"match allocate {job}\npartial-cancel 2 rv1exec {bad} stats\nquit\n",
                      "-f", "grug", "-S", "CA", "-P", "high", "-F", "simple")
    assert rc == 0
    assert err == ("ERROR: error encountered while removing job 1\n"
                   "ERROR: error encountered while removing job 2\n")
    assert re.findall(r'PARTIAL CANCEL (?:PRE|POST)ORDER COUNT="(\d+)"', out) == ["0"] * 4


def test_a_type_chosen_twice_is_sorted_twice_in_full(tmp_path):
    """The flexible traverser's two or-slots of one core each make the root choose among
    the same 36 tied slots twice. Fluxion's second std::sort starts from the whole order
    its first left, so the picks depend on all of it, not only on its first k. The picks
    are what Fluxion's resource-query (flux-sched v0.54.0-8-gfd257f71) printed."""
    graph = _chain_grug(tmp_path, "tiny", ("node", 1, False), ("socket", 2, False),
                        ("core", 18, False))
    one_core = {"type": "slot", "count": 1, "label": "default",
                "with": [{"type": "core", "count": 1}]}
    job = tmp_path / "or.yaml"
    job.write_text(yaml.safe_dump({
        "version": 9999, "resources": [one_core, one_core],
        "attributes": {"system": {"duration": 3600}},
        "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}]}))
    out, err, rc = rq(tmp_path, graph, f"match allocate {job}\n" * 3 + "quit\n",
                      "-f", "grug", "-S", "CA", "-P", "locality", "-T", "flexible",
                      "-F", "simple")
    assert rc == 0 and err == ""
    assert re.findall(r"(core\d+)\[", out) == ["core17", "core8", "core16"]


@pytest.mark.parametrize("filters", [["--prune-filters="], ["-p", " "],
                                     ["-p", "ALL:core", "-p", "ALL:node"]])
def test_prune_filters_given_empty_keep_the_default_and_repeat_joined(tmp_path, tiny_grug,
                                                                      filters):
    """Fluxion's resource-query ignores a -p of spaces only and joins repeated -p with
    ",", so each of these runs with ALL:core,ALL:node. `first` shows it: the edge into a
    node a job used is re-weighed by its free cores, so the second job goes to node0
    (with no filter, weights never change and node1 would be taken again). Picks as
    Fluxion's resource-query printed them."""
    js = _core_of_a_socket_job(tmp_path)
    out, err, rc = rq(tmp_path, tiny_grug, f"match allocate {js}\n" * 3 + "quit\n",
                      "-P", "first", *filters)
    assert rc == 0 and err == ""
    assert re.findall(r"(core\d+|node\d+)\[", out) == [
        "core7", "node1", "core7", "node0", "core3", "node1"]


def test_first_weighs_each_edge_into_a_vertex_with_two_parents(tmp_path):
    """ASSOCIATE_IN makes each rack's storage unit (mtl1unit) also a child of mtl2unit.
    Fluxion weighs edges, not vertices: a job through mtl2unit -> mtl1unit1 re-weighs
    that edge only, so the next job's storage comes from mtl1unit0 while its node may
    again be under rack1. Picks as Fluxion's resource-query printed them."""
    graph = tmp_path / "m.graphml"
    vertices = grug_vertices(
        ("cluster", "cluster", "mtl"), ("mtl2unit", "mtl2unit", "mtl2unit"),
        ("rack", "rack", "rack"), ("mtl1unit", "mtl1unit", "mtl1unit"), ("ssd", "ssd", "ssd"),
        ("node", "node", "node"), ("core", "core", "core"),
        ("mtl1_link", "mtl1unit", "mtl1unit"))
    vertices = vertices.replace('<node id="ssd"><data key="type">ssd</data>',
                                '<node id="ssd"><data key="type">ssd</data>'
                                '<data key="size">512</data>')
    scope = '<data key="id_scope">1</data>'
    graph.write_text(grug_document(
        '  <graph id="g" edgedefault="directed">\n' + vertices
        + '    <edge id="c2r" source="cluster" target="rack">'
          '<data key="multi_scale">2</data></edge>\n'
          '    <edge id="c2m" source="cluster" target="mtl2unit">'
          '<data key="multi_scale">1</data></edge>\n'
          f'    <edge id="r2u" source="rack" target="mtl1unit">{scope}</edge>\n'
          f'    <edge id="u2s" source="mtl1unit" target="ssd">{scope}'
          '<data key="multi_scale">4</data></edge>\n'
          f'    <edge id="r2n" source="rack" target="node">{scope}'
          '<data key="multi_scale">2</data></edge>\n'
          f'    <edge id="n2c" source="node" target="core">{scope}'
          '<data key="multi_scale">2</data></edge>\n'
          '    <edge id="m2l" source="mtl2unit" target="mtl1_link">'
          '<data key="gen_method">ASSOCIATE_IN</data></edge>\n  </graph>\n'))
    js = tmp_path / "m.yaml"
    js.write_text(yaml.safe_dump({
        "version": 9999, "attributes": {"system": {"duration": 3600}},
        "resources": [
            {"type": "rack", "count": 1, "with": [{"type": "node", "count": 1, "with": [
                {"type": "slot", "count": 1, "label": "default",
                 "with": [{"type": "core", "count": 1}]}]}]},
            {"type": "mtl2unit", "count": 1, "with": [{"type": "mtl1unit", "count": 1, "with": [
                {"type": "ssd", "count": 512, "exclusive": True}]}]}],
        "tasks": [{"command": ["a"], "slot": "default", "count": {"per_slot": 1}}]}))
    out, err, rc = rq(tmp_path, graph, f"match allocate {js}\n" * 6 + "quit\n",
                      "-f", "grug", "-S", "CA", "-P", "first", "-F", "simple")
    assert rc == 0 and err == ""
    jobs = _jobs(out, "ssd|mtl1unit|node|rack")
    assert jobs == [
        "node3 rack1 ssd3 mtl1unit1",
        "node1 rack0 ssd3 mtl1unit0",
        "node2 rack1 ssd2 mtl1unit1",
        "node3 rack1 ssd1 mtl1unit1",
        "node2 rack1 ssd0 mtl1unit1",
        "node0 rack0 ssd2 mtl1unit0",
    ]


def test_removing_a_subgraph_leaves_its_jobs_to_cancel(tmp_path, tiny_grug):
    """Fluxion's `remove PATH true` drops the vertices and nothing else: job 2, whose node
    went, keeps its spans on the rack and the cluster until `cancel 2`, which succeeds.
    The subtree filters got their new totals by Fluxion's update_total, which clamps free
    counts at 0, so after the cancel they read 0 cores used though job 1 still holds node1.
    The agfilter lines are what Fluxion's resource-query printed."""
    js = tmp_path / "node.yaml"
    js.write_text(yaml.safe_dump({
        "version": 9999, "attributes": {"system": {"duration": 3600}},
        "resources": [{"type": "slot", "count": 1, "label": "default", "with": [
            {"type": "node", "count": 1, "with": [
                {"type": "socket", "count": 2, "with": [{"type": "core", "count": 4}]}]}]}],
        "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}]}))
    out, err, rc = rq(tmp_path, tiny_grug,
                      f"match allocate {js}\nmatch allocate {js}\n"
                      "remove /tiny0/rack0/node0 true\ncancel 2\n"
                      f"match allocate {js}\nfind agfilter=t\nquit\n",
                      "-f", "grug", "-F", "jgf", "-P", "high",
                      "--prune-filters=ALL:core,ALL:node")
    assert rc == 0 and err == ""
    assert "INFO: No matching resources found\nINFO: JOBID=3\n" in out
    found = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    agfilter = {n["metadata"]["paths"]["containment"]: n["metadata"].get("agfilter")
                for n in found["graph"]["nodes"]}
    assert agfilter["/tiny0/rack0"] == {"core": "used:0, total:8", "node": "used:0, total:1"}
    assert agfilter["/tiny0"] == {"core": "used:0, total:8", "gpu": "used:0, total:2",
                                  "memory": "used:0, total:8", "node": "used:0, total:1"}


def test_an_hwloc_node_gets_rank_0(tmp_path):
    """Fluxion's hwloc reader, given no rank, numbers node vertices 0, 1, ... (flux-core
    wants node ranks in an idset), so R names rank 0. The line is what Fluxion's
    resource-query printed for this topology and request."""
    topo = Path(__file__).parent / "data" / "hwloc-one-node.xml"
    js = _core_of_a_socket_job(tmp_path)
    out, err, rc = rq(tmp_path, topo, f"match allocate {js}\nquit\n",
                      "-f", "hwloc", "-S", "CA", "-P", "high", "-F", "rv1_nosched")
    assert rc == 0 and err == ""
    assert out.splitlines()[0] == (
        '{"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "1"}}], '
        '"nodelist": ["tiny7"], "starttime": 0, "expiration": 3600}}')


def _two_node_jgf(ranked: bool) -> str:
    """A JGF cluster of two nodes of two cores; ``ranked``: the nodes have ranks 0 and 1
    and properties, else rank -1 as in a JGF written without ranks."""
    nodes, edges = [], []

    def vertex(uid, type_, name, vid, rank, path, props=None):
        md = {"type": type_, "basename": "tiny" if type_ == "cluster" else type_,
              "name": name, "id": vid, "uniq_id": uid, "rank": rank, "exclusive": False,
              "unit": "", "size": 1, "paths": {"containment": path}}
        if props:
            md["properties"] = props
        nodes.append({"id": str(uid), "metadata": md})

    vertex(0, "cluster", "tiny0", 0, -1, "/tiny0")
    uid = 1
    for n in range(2):
        node = uid
        vertex(uid, "node", f"node{n}", n, n if ranked else -1, f"/tiny0/node{n}",
               {"perf_class": str(n + 1), "fast": ""} if ranked else None)
        edges.append({"source": "0", "target": str(uid), "metadata": {"subsystem": "containment"}})
        uid += 1
        for c in range(2):
            vertex(uid, "core", f"core{c}", c, -1, f"/tiny0/node{n}/core{c}")
            edges.append({"source": str(node), "target": str(uid),
                          "metadata": {"subsystem": "containment"}})
            uid += 1
    return json.dumps({"graph": {"nodes": nodes, "edges": edges}})


def _one_core_job(tmp_path):
    js = tmp_path / "core.yaml"
    js.write_text(yaml.safe_dump({
        "version": 9999, "attributes": {"system": {"duration": 3600}},
        "resources": [{"type": "node", "count": 1, "with": [
            {"type": "slot", "count": 1, "label": "s", "with": [{"type": "core", "count": 1}]}]}],
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    return js


@pytest.mark.parametrize("writer", ["rlite", "rv1_nosched"])
def test_r_of_a_node_without_rank_is_a_writer_error(tmp_path, writer):
    """Fluxion's rlite writer encodes node ranks into an idset, which refuses -1: the
    emit fails with EINVAL, the match reads as not found and consumes no jobid. Output as
    Fluxion's resource-query printed it."""
    graph = tmp_path / "norank.json"
    graph.write_text(_two_node_jgf(ranked=False))
    js = _one_core_job(tmp_path)
    out, err, rc = rq(tmp_path, graph, f"match allocate {js}\nquit\n",
                      "-f", "jgf", "-S", "CA", "-P", "low", "-F", writer)
    assert rc == 0
    assert err == "match_allocate: ERROR: match writer emit: Invalid argument\n"
    assert out == ("INFO: =============================\nINFO: No matching resources found\n"
                   "INFO: JOBID=1\nINFO: =============================\n")


def test_r_names_the_properties_of_its_nodes(tmp_path):
    """The rv1 writers add "properties": each node property (name, or name=value) and the
    ranks of the nodes having it, sorted by property. Lines as Fluxion printed them."""
    graph = tmp_path / "ranked.json"
    graph.write_text(_two_node_jgf(ranked=True))
    js = _one_core_job(tmp_path)
    out, err, rc = rq(tmp_path, graph, f"match allocate {js}\nquit\n",
                      "-f", "jgf", "-S", "CA", "-P", "low", "-F", "rv1_nosched")
    assert rc == 0 and err == ""
    assert out.splitlines()[0] == (
        '{"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}], '
        '"nodelist": ["node0"], "properties": {"fast": "0", "perf_class=1": "0"}, '
        '"starttime": 0, "expiration": 3600}}')


def test_first_weighs_edges_by_the_filter_type_fluxion_interned_last(tmp_path, tiny_grug):
    """Under `first` an edge weighs the free units of the last type its subtree filter
    tracks, last in Fluxion's order of interned types (core, socket, gpu, node first,
    then memory as the graph names it), not alphabetically (socket). Picks as Fluxion's
    resource-query printed them for -p ALL:core,ALL:node,ALL:socket,ALL:gpu,ALL:memory."""
    def job(name, leaf, count):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "version": 1, "attributes": {"system": {"duration": 3600}},
            "resources": [{"type": "node", "count": 1, "with": [
                {"type": "socket", "count": 1, "with": [
                    {"type": "slot", "count": 1, "label": "s",
                     "with": [{"type": leaf, "count": count}]}]}]}],
            "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
        return path
    m2, c1, c3 = job("m2", "memory", 2), job("c1", "core", 1), job("c3", "core", 3)
    stream = "".join(f"match allocate {j}\n" for j in (m2, c1, c1, m2, c3)) + "quit\n"
    out, err, rc = rq(tmp_path, tiny_grug, stream, "-P", "first",
                      "-p", "ALL:core,ALL:node,ALL:socket,ALL:gpu,ALL:memory")
    assert rc == 0 and err == ""
    jobs = _jobs(out, "core|memory|socket|node")
    assert jobs == ["memory3 socket1 node1", "core7 socket1 node0", "core3 socket0 node0",
                    "memory3 socket1 node0", "core1 core2 core3 socket0 node1"]
