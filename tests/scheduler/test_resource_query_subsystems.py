"""`resource-query -S`: Fluxion's subsystem names, and a power subsystem as the dominant
one (`-S PA`), against what Fluxion v0.54.0's resource-query wrote on the same graph,
commands and options (tests/scheduler/data/subsystems, its README says how each file
was made).

Under `-S PA` the walk goes down the power tree, and the writers still show the whole
graph's facts: each JGF vertex has its paths in every subsystem, each JGF edge names
the power subsystem (jgf_match_writers_t::emit_edg), get-status finds a vertex of the
containment tree alone by its path (by_path holds every subsystem's), and -e counts the
whole graph."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import SHARED

DATA = Path(__file__).parent / "data" / "subsystems"
FORMATS = ("simple", "pretty_simple", "jgf", "jgf_shorthand", "rlite", "rv1", "rv1_nosched")


def _run(commands: str, *args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    return _run_graph("power2.graphml", commands, *args, out=out)


def _run_graph(graph: str | Path, commands: str, *args: str,
               out: Path | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(graph), "-d", *args]
    if out is not None:
        argv += ["-t", str(out)]
    return subprocess.run(argv, input=commands, capture_output=True, text=True, timeout=120,
                          cwd=DATA)


@pytest.mark.parametrize("fmt", FORMATS)
def test_power_as_the_dominant_subsystem_writes_what_fluxion_writes(tmp_path, fmt):
    out = tmp_path / "out"
    proc = _run((DATA / "cmds.in").read_text(), "-S", "PA", "-P", "high", "-F", fmt, out=out)
    assert proc.returncode == 0
    assert out.read_text() == (DATA / f"expected.{fmt}").read_text()
    if fmt == "rlite":
        # every rlite emit fails (no node with cores or GPUs): Fluxion then allocates the
        # next match under the same job id, which fluxnode refuses (docs/scheduler.md)
        assert proc.stderr.count("\n") == (DATA / "rlite.stderr").read_text().count("\n")
    else:
        assert proc.stderr == ""  # as Fluxion's


def test_jgf_paths_and_edges_name_their_subsystems(tmp_path):
    out = tmp_path / "out"
    _run("match allocate node_power.yaml\nquit\n", "-S", "PA", "-F", "jgf", out=out)
    line = out.read_text().splitlines()[0]
    assert ('"paths": {"containment": "/grid0/rack1/node3", "power": "/powerpanel0/pdu1/node3"}'
            in line)
    assert '"paths": {"power": "/powerpanel0/pdu1/node3/power0"}' in line
    assert line.count('"metadata": {"subsystem": "power"}') == line.count('"source"') > 0


def test_load_info_counts_the_whole_graph():
    proc = _run("quit\n", "-S", "PA", "-e")
    lines = [x for x in proc.stdout.splitlines() if "Load Time" not in x]
    assert lines == (DATA / "load_info.PA").read_text().splitlines()


def test_an_auxiliary_subsystem_leaves_the_first_policys_answers_alone(tmp_path):
    """`-S C+PA -P first` answers as `-S CA` does, in Fluxion too."""
    out = tmp_path / "out"
    proc = _run((DATA / "cmds_containment.in").read_text(), "-S", "C+PA", "-P", "first",
                "-F", "jgf", out=out)
    assert proc.returncode == 0
    assert out.read_text() == (DATA / "cpa_first.jgf").read_text()


@pytest.mark.parametrize("name", ["ca", "c+pa", "PA", "pa", "C+PA"])
def test_fluxions_names_and_their_lower_case_are_taken(name):
    proc = _run("quit\n", "-S", name)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize("name", ["Ca", "C", "P", "XYZ", "C+P", "cA"])
def test_another_name_aborts_as_fluxions_map_at_does(name):
    proc = _run("quit\n", "-S", name)
    assert proc.returncode == 134
    assert proc.stderr == ("terminate called after throwing an instance of "
                           "'std::out_of_range'\n  what():  map::at\n")


@pytest.mark.parametrize("name", ["IBA", "ALL", "all", "VA", "C+IBA", "C+P+IBA", "IB+IBBA"])
def test_a_subsystem_the_graph_lacks_stops_before_any_command(name):
    proc = _run("quit\n", "-S", name)
    assert proc.returncode == 1
    assert proc.stderr == (": Runtime error: initialize_matchers_and_traversers: ERROR: "
                           "can't initialize traverser\n\n")


def test_update_replays_a_power_match(tmp_path):
    """flux-sched t3023 test 2: under -S PA, `update allocate jgf` of what two matches
    wrote gives the same output (the JGF names power paths; the reader finds each vertex
    by its paths and rank)."""
    first = tmp_path / "first"
    _run("match allocate node_power.yaml\nmatch allocate node_power.yaml\nquit\n",
         "-S", "PA", "-P", "high", "-F", "jgf", out=first)
    lines = [x for x in first.read_text().splitlines() if not x.startswith("INFO")]
    assert len(lines) == 2
    cmds = ""
    for i, line in enumerate(lines):
        (tmp_path / f"{i}.json").write_text(line + "\n")
        cmds += f"update allocate jgf {tmp_path / f'{i}.json'} {i + 1} 0 3600\n"
    again = tmp_path / "again"
    proc = _run(cmds + "quit\n", "-S", "PA", "-P", "high", "-F", "jgf", out=again)
    assert proc.stderr == ""
    assert again.read_text() == first.read_text()


def test_a_containment_jgf_updates_nothing_of_the_power_tree(tmp_path):
    """flux-sched t3023 test 3's first step: a JGF written under -S CA names the
    containment root, not the power one; Fluxion's update then walks and writes nothing
    and places the job (its expected output: the JOBID block alone); cancelling it fails
    (Fluxion v0.54 wrote this output and error on this graph)."""
    first = tmp_path / "first"
    _run("match allocate node_core.yaml\nquit\n", "-S", "CA", "-P", "high", "-F", "jgf",
         out=first)
    (tmp_path / "ca.json").write_text(first.read_text().splitlines()[0] + "\n")
    out = tmp_path / "out"
    proc = _run(f"update allocate jgf {tmp_path / 'ca.json'} 1 0 3600\ncancel 1\nquit\n",
                "-S", "PA", "-P", "high", out=out)
    assert proc.stderr == "cancel: ERROR: error encountered while removing job 1\n"
    assert out.read_text() == ("INFO: =============================\nINFO: JOBID=1\n"
                               "INFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n"
                               "INFO: =============================\n")


UPDATE = SHARED / "fluxion-corpus" / "data" / "resource"


@pytest.mark.skipif(not (UPDATE / "expected" / "update_multi").is_dir(),
                    reason="flux-sched's update_multi expected files not found")
@pytest.mark.parametrize(("test", "then"), [
    ("003", ["match allocate {job5}", "match allocate {job5}"]),
    ("004", ["match allocate {job5}", "match allocate {job5}", "cancel 1",
             "match allocate {job5}"]),
])
def test_a_containment_jgf_plans_the_nodes_the_power_tree_shares(tmp_path, test, then):
    """flux-sched t3023 tests 3 and 4, as the script runs them: two CA matches of
    update/test006.yaml (36 node slots) written as JGF, the first replayed by `update`
    under -S PA, then power matches of update/test005.yaml. Fluxion's JGF reader plans
    the JGF's exclusive vertices itself, so the 36 nodes stay busy for the power matches
    (the second finds nothing); `cancel 1` fails but frees them, and the next match
    takes them. Expected: flux-sched's expected/update_multi/TEST.R.out."""
    grug = UPDATE / "grugs" / "power.graphml"
    job5, job6 = (UPDATE / "jobspecs" / "update" / f"test00{n}.yaml" for n in (5, 6))
    first = tmp_path / "ca.out"
    _run_graph(grug, f"match allocate {job6}\nmatch allocate {job6}\nquit\n",
               "-S", "CA", "-P", "high", "-F", "jgf", out=first)
    (tmp_path / "aa.json").write_text(
        next(x for x in first.read_text().splitlines() if not x.startswith("INFO")) + "\n")
    cmds = f"update allocate jgf {tmp_path / 'aa.json'} 1 0 3600\n" + "".join(
        line.format(job5=job5) + "\n" for line in then) + "quit\n"
    out = tmp_path / "pa.out"
    _run_graph(grug, cmds, "-S", "PA", "-P", "high", out=out)
    assert out.read_text() == (UPDATE / "expected" / "update_multi" / f"{test}.R.out").read_text()


# Issue 35: under `-S C+PA` Fluxion's dom_exp also walks the power edges of each
# containment vertex it explores (explore(..., visit_t::UPV, ...) -> aux_upv,
# dfu_impl.cpp), adding one power-subsystem group per accepted child, scored with the
# visiting vertex's overall_score()/avail() as they stand (aux_upv never sets them): at
# a pdu (no containment children) -1 and 0, so unqualified. Under a stop-on-1 policy
# (`first`) tally_shares' total_count() also creates empty power groups for the
# level's types. Merged up to the root (resolve, unless a matched vertex chose its own
# children), has_remaining() finds a power type with no qualified count and the match
# fails: "No matching resources found". Which matches fail so depends on the policy
# (`first` walks the highest uniq_id first and stops early, or meets a pdu first once
# the nodes' edges are weighed) and on the prune filters (ALL:core prunes a pdu for a
# request of cores: its subtree filter counts none). Modelled in
# scheduler/traversers/aux_walk.py. Expected outputs: Fluxion v0.54.0, run in
# tests/scheduler/data/subsystems (its README has the commands):
#   resource-query -L <shared>/fluxion-corpus/data/resource/grugs/power.graphml \
#       -S C+PA -P POLICY -p PRUNE -F rv1_nosched -d < cmds_aux.in > aux.POLICY.PRUNE
POWER = SHARED / "fluxion-corpus" / "data" / "resource" / "grugs" / "power.graphml"
POLICIES = ["first", "high", "low", "lonode", "hinode", "lonodex", "hinodex", "locality",
            "variation", "firstnodex"]


@pytest.mark.parametrize("policy", ["first", "high"])
@pytest.mark.parametrize("prune", ["ALL:core", "ALL:node"])
def test_the_power_walk_of_c_pa_fails_matches_as_fluxions_does(policy, prune):
    proc = _run_graph(POWER, (DATA / "cmds_aux.in").read_text(), "-S", "C+PA", "-P", policy,
                      "-p", prune, "-F", "rv1_nosched")
    assert proc.returncode == 0
    expected = (DATA / f"aux.{policy}.{prune.replace(':', '_')}").read_text()
    assert proc.stdout == expected


def _matches(stdout: str) -> str:
    """What -e's run wrote after its graph's load figures, without the ELAPSE lines
    (times): the matches' outputs and their visit counts."""
    lines = stdout.splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("INFO: ") and not lines[i].startswith(
            "INFO: ====="):
        i += 1
    return "".join(x for x in lines[i:] if not x.startswith("INFO: ELAPSE="))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("prune", ["", "ALL:core", "ALL:node"])
def test_every_policy_walks_the_power_edges_as_fluxions_does(policy, prune):
    """cmds_aux_all.in on flux-sched's power.graphml, under every policy, with the
    default prune filters and with each alone: which matches fail, what the others
    allocate, and how many vertices each walk visited (-e), as Fluxion wrote them
    (aux_all.json, keyed "POLICY PRUNE")."""
    expected = json.loads((DATA / "aux_all.json").read_text())[f"{policy} {prune}".strip()]
    proc = _run_graph(POWER, (DATA / "cmds_aux_all.in").read_text(), "-S", "C+PA",
                      "-P", policy, "-F", "rv1_nosched", "-e", *(["-p", prune] if prune else []))
    assert (proc.returncode, proc.stderr) == (0, expected["stderr"])
    assert _matches(proc.stdout) == expected["stdout"]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_pdu_holds_a_slot_and_waits_for_its_weight_as_fluxions_does(policy):
    """cmds_aux_power2.in on the small graph: a slot of power and a node sits at a pdu
    (slot_match reads the power edges too), and once the first policy's updates weigh
    the nodes' edges, a pdu's edge (never weighed: UINT64_MAX) comes first and its power
    walk fails the satisfiability check (aux_power2.json, Fluxion's -F simple -e)."""
    expected = json.loads((DATA / "aux_power2.json").read_text())[policy]
    proc = _run((DATA / "cmds_aux_power2.in").read_text(), "-S", "C+PA", "-P", policy,
                "-F", "simple", "-e")
    assert (proc.returncode, proc.stderr) == (0, expected["stderr"])
    assert _matches(proc.stdout) == expected["stdout"]


def test_a_type_of_the_containment_tree_alone_is_known_under_pa():
    """Fluxion interns every type the graph loaded, whichever subsystem the matcher walks:
    under -S PA a jobspec of memory (in power.graphml's containment tree alone) parses,
    and finds nothing in the power tree (Fluxion v0.54's output on the same graph)."""
    proc = _run_graph(POWER, "match allocate slot_memory.yaml\nquit\n", "-S", "PA")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == ("INFO: =============================\n"
                           "INFO: No matching resources found\nINFO: JOBID=1\n"
                           "INFO: =============================\n")
