"""`resource-query`'s `update`: replaying an allocation from the JGF a match wrote.

Each scenario follows flux-sched's t3022: a first run matches and writes JGF, the
lines are split into one file per job, and a second run replays them with `update`;
the outputs must agree byte for byte, and failed updates must change nothing.
"""

from __future__ import annotations

import json

import yaml
from support.rq_run import rq
from support.sched_graphs import R_TWO_NODES, cores, jobspec

SHAPES = {
    "unit": cores(1),
    "node": jobspec(
        [
            {
                "type": "node",
                "count": 1,
                "exclusive": True,
                "with": [
                    {
                        "type": "slot",
                        "count": 1,
                        "label": "default",
                        "with": [{"type": "core", "count": 1}],
                    }
                ],
            }
        ]
    ),
    "mixed": jobspec(
        [
            {
                "type": "slot",
                "count": 1,
                "label": "default",
                "with": [
                    {"type": "core", "count": 2},
                    {"type": "gpu", "count": 1},
                    {"type": "memory", "count": 2},
                ],
            }
        ]
    ),
}


def _specs(tmp_path) -> dict[str, str]:
    out = {}
    for name, js in SHAPES.items():
        p = tmp_path / f"{name}.yaml"
        p.write_text(yaml.safe_dump(js))
        out[name] = str(p)
    return out


def _split_lines(tmp_path, out: str) -> list[str]:
    """One file per job's output line, JGF or R (what `grep -v INFO | split -l 1` makes)."""
    files = []
    for i, line in enumerate(ln for ln in out.splitlines() if not ln.startswith("INFO")):
        p = tmp_path / f"job{i + 1}.json"
        p.write_text(line + "\n")
        files.append(str(p))
    return files


def _no_info(out: str) -> str:
    return "".join(ln + "\n" for ln in out.splitlines() if not ln.startswith("INFO"))


def test_replayed_allocations_and_reservations_write_what_the_matches_wrote(tmp_path, tiny_grug):
    js = _specs(tmp_path)["unit"]
    first, err, rc = rq(
        tmp_path,
        tiny_grug,
        f"match allocate_orelse_reserve {js}\n" * 20 + "quit\n",
        "-P",
        "high",
        "-F",
        "jgf",
    )
    assert rc == 0 and err == "" and "SCHEDULED AT=3600" in first
    jgfs = _split_lines(tmp_path, first)
    starts = [0 if "AT=Now" in b else int(b.split("AT=")[1].split("\n")[0])
              for b in first.split("INFO: JOBID=")[1:]]
    cmds = "".join(f"update {'allocate' if at == 0 else 'reserve'} jgf {f} {i + 1} {at} 3600\n"
                   for i, (f, at) in enumerate(zip(jgfs, starts, strict=True)))
    again, err, rc = rq(tmp_path, tiny_grug, cmds + "quit\n", "-P", "high", "-F", "jgf")
    assert rc == 0 and err == ""
    assert again == first


def test_updates_and_matches_mix_and_cancel(tmp_path, tiny_grug):
    js = _specs(tmp_path)["unit"]
    m = f"match allocate_orelse_reserve {js}\n"
    first, _err, _rc = rq(tmp_path, tiny_grug, m * 5 + "cancel 4\n" + m * 3 + "cancel 6\n" + m * 2
                          + "quit\n", "-P", "high", "-F", "jgf")
    jgfs = _split_lines(tmp_path, first)
    # jobs 2 and 4 matched again, the others replayed; ids continue after replayed ones
    cmds = (f"update allocate jgf {jgfs[0]} 1 0 3600\n{m}update allocate jgf {jgfs[2]} 3 0 3600\n"
            f"{m}{m}cancel 4\n")
    again, err, rc = rq(tmp_path, tiny_grug, cmds + m * 3 + "cancel 6\n" + m * 2 + "quit\n",
                        "-P", "high", "-F", "jgf")
    assert rc == 0 and err == ""
    assert again == first


def test_whole_node_and_mixed_shapes_round_trip(tmp_path, tiny_grug):
    specs = _specs(tmp_path)
    cmds = f"match allocate {specs['mixed']}\nmatch allocate {specs['node']}\n" \
           f"match allocate {specs['mixed']}\nquit\n"
    first, err, rc = rq(tmp_path, tiny_grug, cmds, "-P", "low", "-F", "jgf")
    assert rc == 0 and err == "" and first.count("JOBID=") == 3
    jgfs = _split_lines(tmp_path, first)
    again, err, rc = rq(tmp_path, tiny_grug, "".join(
        f"update allocate jgf {f} {i + 1} 0 3600\n" for i, f in enumerate(jgfs)) + "quit\n",
        "-P", "low", "-F", "jgf")
    assert rc == 0 and err == "" and again == first
    # and read back in another format: the same R as the matches' own
    rv1_first, _e, _r = rq(tmp_path, tiny_grug, cmds, "-P", "low", "-F", "rv1_nosched")
    rv1_again, err, _r = rq(tmp_path, tiny_grug, "".join(
        f"update allocate jgf {f} {i + 1} 0 3600\n" for i, f in enumerate(jgfs)) + "quit\n",
        "-P", "low", "-F", "rv1_nosched")
    assert err == "" and rv1_again == rv1_first


def test_failed_updates_change_nothing(tmp_path, tiny_grug):
    specs = _specs(tmp_path)
    m = f"match allocate {specs['unit']}\n"
    first, _e, _r = rq(tmp_path, tiny_grug, m * 4 + "quit\n", "-P", "high", "-F", "jgf")
    jgfs = _split_lines(tmp_path, first)
    # the same ids again: refused, nothing written
    again, err, rc = rq(tmp_path, tiny_grug, m * 4 + "".join(
        f"update allocate jgf {f} {i + 1} 0 3600\n" for i, f in enumerate(jgfs)) + "quit\n",
        "-P", "high", "-F", "jgf")
    assert rc == 0 and again == first
    assert err == "ERROR: existing Jobid \n" * 4  # command.cpp's update, in its words
    # new ids on cores the matches hold: refused and rolled back (later matches unchanged)
    busy, err, rc = rq(tmp_path, tiny_grug, m * 4 + "".join(
        f"update allocate jgf {f} {i + 5} 0 3600\n" for i, f in enumerate(jgfs)) + m + "quit\n",
        "-P", "high", "-F", "jgf")
    plain, _e, _r = rq(tmp_path, tiny_grug, m * 5 + "quit\n", "-P", "high", "-F", "jgf")
    # Fluxion's JGF reader's words for the first vertex without room (as Fluxion v0.54
    # wrote on this script)
    assert err == "".join("ERROR: traverser run () returned error \n"
                          f"ERROR: update_vtx_plan: can't add span into {core}.\n"
                          for core in ("core7", "core7", "core6", "core6"))
    assert _no_info(busy) == _no_info(plain)
    # a shared vertex held exclusively by another job (a whole node) refuses too
    node_first, _e, _r = rq(tmp_path, tiny_grug, f"match allocate {specs['node']}\nquit\n",
                            "-P", "high", "-F", "jgf")
    assert "/tiny0/rack0/node1" in node_first and "/tiny0/rack0/node0" not in node_first
    with_node0_down, _e, _r = rq(
        tmp_path,
        tiny_grug,
        f"set-status /tiny0/rack0/node0 down\n{m}quit\n",
        "-P",
        "high",
        "-F",
        "jgf",
    )
    unit_on_node1 = _split_lines(tmp_path, with_node0_down)[0]
    out, err, _r = rq(
        tmp_path,
        tiny_grug,
        f"match allocate {specs['node']}\nupdate allocate jgf {unit_on_node1} 2 0 3600\nquit\n",
        "-P",
        "high",
        "-F",
        "jgf",
    )
    # an exclusive node's cores are planned too: the JGF reader finds no room in core7
    assert err == ("ERROR: traverser run () returned error \n"
                   "ERROR: update_vtx_plan: can't add span into core7.\n")
    assert _no_info(out) == _no_info(node_first)


def test_bad_update_commands_get_clear_errors(tmp_path, tiny_grug):
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    nograph = tmp_path / "nograph.json"
    nograph.write_text('{"nodes": []}')
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster", '
                         '"paths": {"containment": "/other0"}}}], "edges": []}}')
    out, err, rc = rq(
        tmp_path,
        tiny_grug,
        f"update allocate jgf {junk} 1 0 3600\nupdate allocate jgf {nograph} 1 0 3600\n"
        f"update allocate jgf {elsewhere} 1 0 3600\nupdate allocate rv1exec {junk} 1 0 3600\n"
        f"update allocate jgf {tmp_path}/missing.json 1 0 3600\nupdate allocate jgf\n"
        f"update allocate jgf {junk} one 0 3600\nquit\n",
    )
    # what was opened but not placed is answered like a failed match, as Fluxion's
    # update_run does whatever its run returned (5 blocks, as Fluxion v0.54 wrote)
    assert rc == 0 and out.count("INFO: No matching resources found\n") == 5
    # each in Fluxion's words (its JGF reader's, checked against its run of this script;
    # a JSON error's own text is jansson's there, Python's here)
    assert (
        "Traceback" not in err
        and "ERROR: fetch_jgf: JGF does not contain a required key (graph).\n" in err
        and "ERROR: exist: inconsistent input vertex: nonexistent path (/other0) 0.\n" in err
    )
    assert f"ERROR: can't open {tmp_path}/missing.json\n" in err
    assert err.count("ERROR: fetch_jgf: json_loads returned an error: ") == 2
    assert err.count("ERROR: traverser run () returned error \n") == 5
    assert "ERROR: malformed command\n" in err and err.count("ERROR:") == 11


def _rv1_graph(tmp_path):
    p = tmp_path / "R.json"
    p.write_text(json.dumps(R_TWO_NODES))
    return p


def test_rv1exec_allocations_round_trip(tmp_path):
    """flux-sched t3022 012/013: a match's R (rv1_nosched) replayed gives the same R."""
    graph = _rv1_graph(tmp_path)
    js = tmp_path / "js.yaml"
    js.write_text(yaml.safe_dump(cores(1, nodes=1)))
    args = ("-f", "rv1exec", "-P", "high", "-F", "rv1_nosched")
    first, err, rc = rq(tmp_path, graph, f"match allocate {js}\n" * 6 + "quit\n", *args)
    assert rc == 0 and err == "" and first.count("JOBID=") == 6
    files = _split_lines(tmp_path, first)
    again, err, rc = rq(
        tmp_path,
        graph,
        "".join(f"update allocate rv1exec {f} {i + 1} 0 3600\n" for i, f in enumerate(files))
        + "quit\n",
        *args,
    )
    assert rc == 0 and err == "" and again == first


def test_rv1exec_whole_node_and_rollback(tmp_path):
    """A rank given whole is held exclusively; a failed update (a type the node lacks)
    prints "No matching resources found" and leaves everything free (t3022 016)."""
    graph = _rv1_graph(tmp_path)
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps({"version": 1, "execution": {"R_lite": [
        {"rank": "1", "children": {"core": "0-3", "gpu": "0"}}], "nodelist": ["n1"],
        "starttime": 0, "expiration": 0}}))
    asic = tmp_path / "asic.json"
    asic.write_text(json.dumps({"version": 1, "execution": {"R_lite": [
        {"rank": "0", "children": {"core": "0-3", "asic": "0"}}], "nodelist": ["n0"],
        "starttime": 0, "expiration": 0}}))
    out, err, rc = rq(tmp_path, graph, f"update allocate rv1exec {asic} 1 0 3600\n"
                      f"update allocate rv1exec {whole} 2 0 3600\nfind sched-now=free\nquit\n",
                      "-f", "rv1exec", "-P", "high")
    assert rc == 0 and err == ("ERROR: traverser run () returned error \n"  # Fluxion's words
                               "ERROR: add_or_update: couldn't find vertex in graph for asic0.\n"
                               "unpack_child: failed unpacking child for asic0.\n")
    assert out.startswith("INFO: =============================\nINFO: No matching resources found\n"
                          "INFO: JOBID=1\n")
    assert "------n1[1:x]\n" in out and "---cluster0[1:s]\nINFO: =============================\n" \
        "INFO: JOBID=2\nINFO: RESOURCES=ALLOCATED" in out
    free = out.split('EXPRESSION="sched-now=free"')[0].rsplit("INFO: JOBID=2", 1)[1]
    assert "------n0[1:x]\n" in free and "n1" not in free  # n1 is taken, n0 untouched
    # n0 is still whole: a whole-node job goes there (the failed update took nothing)
    node_js = tmp_path / "node.yaml"
    node_js.write_text(yaml.safe_dump(SHAPES["node"]))
    out, err, rc = rq(tmp_path, graph, f"update allocate rv1exec {asic} 1 0 3600\n"
                      f"match allocate {node_js}\nquit\n", "-f", "rv1exec", "-P", "low")
    assert rc == 0 and "------n0[1:x]\n" in out and "JOBID=2\nINFO: RESOURCES=ALLOCATED" in out


def test_rv1exec_two_ranks_on_one_host_are_two_nodes(tmp_path):
    """Two brokers on one host: the rv1exec reader makes a node per rank (as Fluxion's
    does), so each rank's R is placed on its own node (t3022 014/015)."""
    graph = tmp_path / "R.json"
    graph.write_text(json.dumps({"version": 1, "execution": {"R_lite": [
        {"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}], "nodelist": ["h", "h"],
        "starttime": 0, "expiration": 0}}))
    files = []
    for rank in (0, 1):
        f = tmp_path / f"rank{rank}.json"
        f.write_text(json.dumps({"version": 1, "execution": {"R_lite": [
            {"rank": str(rank), "children": {"core": "0-3", "gpu": "0"}}], "nodelist": ["h"],
            "starttime": 0, "expiration": 0}}))
        files.append(f)
    out, err, rc = rq(tmp_path, graph, f"update allocate rv1exec {files[0]} 1 0 3600\n"
                      f"update allocate rv1exec {files[1]} 2 0 3600\nfind sched-now=free\nquit\n",
                      "-f", "rv1exec", "-P", "high")
    assert rc == 0 and err == ""
    assert out.count("------h[1:x]\n") == 2 and out.count("RESOURCES=ALLOCATED") == 2
    assert out.endswith("      ---cluster0[1:x]\nINFO: =============================\n"
                        'INFO: EXPRESSION="sched-now=free"\nINFO: =============================\n')
