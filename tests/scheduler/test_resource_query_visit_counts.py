"""The visit counts ``resource-query -e`` prints, when the exhaustive policies reuse a
subtree's outcome (issue 35; flux-sched's t3029-resource-prune.t, tests 1-4): a subtree
taken from the cache counts the visits its walk made, as Fluxion's walk, which has no
such cache, makes them again.

Each expected list is the one the t3029 script compares against (its ``cmp01``..
``cmp04`` here-documents), with its command files, graph and options.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import SHARED

DATA = SHARED / "fluxion-corpus" / "data" / "resource"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"corpus data not found at {DATA}")

# (t3029 test, commands file, extra options, (preorder, postorder) per match)
CASES = [
    (1, "cmds01.in", [], [(100, 80), (77, 61), (52, 41), (29, 22)]),
    (2, "cmds02.in", [], [(100, 84), (100, 81), (100, 77), (100, 74)]),
    (3, "cmds02.in", ["-p", "ALL:gpu"], [(100, 84), (77, 64), (52, 43), (29, 23)]),
    (4, "cmds03.in", [], [(100, 80), (77, 61), (54, 42), (29, 22)]),
]


@pytest.mark.parametrize(("test", "cmds", "extra", "counts"), CASES,
                         ids=[f"t3029-{c[0]}" for c in CASES])
def test_visit_counts_under_high_with_pruning(tmp_path, test, cmds, extra, counts):
    text = (DATA / "commands" / "pruning" / cmds).read_text().replace(
        "@TEST_SRCDIR@", str(DATA.parent.parent))
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L",
         str(DATA / "grugs" / "tiny.graphml"), "-S", "CA", "-P", "high", *extra,
         "-t", str(tmp_path / "out.R"), "-e"],
        input=text, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = [int(line.rsplit("=", 1)[1]) for line in proc.stdout.splitlines()
           if "ORDER VISIT COUNT=" in line]
    assert got == [n for pair in counts for n in pair]



# Under the first-match policies a vertex's children are walked by (edge weight,
# uniq_id), highest first (Fluxion's by_outedges); an edge weighs UINT64_MAX until an
# update re-weighs it, and only a vertex with a subtree filter is ever re-weighed
# (upd_by_outedges), which prime_pruning_filter never gives a leaf. So where a parent
# has both kinds of children (under -S PA the power panel's 200 power leaves and its
# pdus, a pdu's power leaves and its nodes) the leaves come before the inner vertices
# once those have weights, and mix with them by uniq_id before: on power.graphml the
# panel's leaves (uniq_ids 3538..3737) are all visited before pdu3 (uniq_id 8).
# (preorder, postorder) per match, from Fluxion v0.54.0's resource-query, run on
# 2026-11-29 as the test runs fluxnode (bench/rq_subsystems.py seed 109, reduced):
#   resource-query -L GRAPH -S PA -P first -F simple -e < commands
# where commands is "match allocate JOBSPEC" three times, then "quit".
SUBSYSTEMS = Path(__file__).parent / "data" / "subsystems"
FIRST_PA_CASES = [
    (DATA / "grugs" / "power.graphml", DATA / "jobspecs" / "power" / "test002.yaml",
     [(208, 208), (208, 208), (208, 208)]),
    (SUBSYSTEMS / "power2.graphml", SUBSYSTEMS / "node_power.yaml",
     [(9, 6), (9, 6), (9, 6)]),
    (SUBSYSTEMS / "power2.graphml", SUBSYSTEMS / "slot_power.yaml",
     [(7, 4), (7, 4), (9, 4)]),
    (SUBSYSTEMS / "power2.graphml", SUBSYSTEMS / "pdu_slot.yaml",
     [(7, 5), (7, 5), (9, 5)]),
    (SUBSYSTEMS / "power2.graphml", SUBSYSTEMS / "slot_xnode.yaml",
     [(8, 4), (8, 4), (8, 4)]),
]


@pytest.mark.parametrize(("graph", "jobspec", "counts"), FIRST_PA_CASES,
                         ids=[f"{c[0].stem}-{c[1].stem}" for c in FIRST_PA_CASES])
def test_visit_counts_of_leaves_beside_inner_vertices_under_first(graph, jobspec, counts):
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(graph), "-S", "PA",
         "-P", "first", "-F", "simple", "-e"],
        input=f"match allocate {jobspec}\n" * len(counts) + "quit\n",
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = [int(line.rsplit("=", 1)[1]) for line in proc.stdout.splitlines()
           if "ORDER VISIT COUNT=" in line]
    assert got == [n for pair in counts for n in pair]


# -e's lines per rank end in "\n", not std::endl: they wait in std::cout's buffer and go
# out with the next line that flushes, before it. `stat` (cmd_stat) writes with
# std::endl, so its lines come after them. Fluxion v0.54.0's stdout, run on 2026-11-29
# from tests/scheduler/data/subsystems (bench/rq_subsystems.py seed 185, reduced):
#   printf 'stat\nquit\n' | resource-query -L power2.graphml -e -d | grep -v "Load Time"
LOAD_THEN_STAT = """\
INFO: Vertex Count: 31
INFO: Edge Count: 35
INFO: by_type Key-Value Pairs: 7
INFO: by_name Key-Value Pairs: 14
INFO: by_path Key-Value Pairs: 37
INFO: number of vertices with rank -1: 27
INFO: number of vertices with rank 0: 1
INFO: number of vertices with rank 1: 1
INFO: number of vertices with rank 2: 1
INFO: number of vertices with rank 3: 1
INFO: Num. of Jobs Matched: 0
INFO: Min. Match Time: 0
INFO: Max. Match Time: 0
INFO: Avg. Match Time: 0
"""


def test_rank_lines_go_out_before_stat():
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L",
         str(SUBSYSTEMS / "power2.graphml"), "-e", "-d"],
        input="stat\nquit\n", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = "".join(line + "\n" for line in proc.stdout.splitlines()
                  if not line.startswith("INFO: Graph Load Time"))
    assert got == LOAD_THEN_STAT
