"""A vertex without containment children but with edges in another subsystem is no leaf
to Fluxion (issue 35, fresh random cases on flux-sched's power graph):
``prime_pruning_filter`` (resource/traversers/dfu_impl.cpp) asks the whole graph's
``out_degree``, so power.graphml's pdus, which supply power, get a subtree filter (``find
agfilter=t`` lists them, with zero totals) and their type is not a leaf type tracked at
the cluster.

The expected values are Fluxion v0.54's: ``printf 'find agfilter=t\\nquit\\n' |
resource-query -L power.graphml -S CA -P first -F jgf -d -t OUT`` (and ``-F simple``),
``power.graphml`` from flux-sched's t/data/resource/grugs (in the shared corpus).
"""

from __future__ import annotations

import json

import pytest
from support.paths import SHARED
from support.rq_run import rq

POWER = SHARED / "fluxion-corpus" / "data" / "resource" / "grugs" / "power.graphml"
pytestmark = pytest.mark.skipif(not POWER.is_file(), reason=f"{POWER} not found")


def _find(tmp_path, fmt: str, subsystems: str = "CA") -> str:
    out, err, rc = rq(tmp_path, POWER, "find agfilter=t\nquit\n", "-S", subsystems,
                      "-F", fmt)
    assert rc == 0, err
    return out


@pytest.mark.parametrize("subsystems", ["CA", "C+PA"])
def test_pdus_that_supply_power_have_a_subtree_filter(tmp_path, subsystems):
    lines = _find(tmp_path, "simple", subsystems).splitlines()
    assert [line for line in lines if "socket" not in line and "node" not in line] == [
        "      ---------pdu0[1:x]", "      ------rack0[1:x]",
        "      ---------pdu1[1:x]", "      ------rack1[1:x]",
        "      ---------pdu2[1:x]", "      ------rack2[1:x]",
        "      ---------pdu3[1:x]", "      ------rack3[1:x]",
        "      ---power0[1:x]",
        "INFO: =============================", 'INFO: EXPRESSION="agfilter=t"',
        "INFO: ============================="]
    assert len(lines) == 228


def test_the_pdu_type_is_not_tracked_at_the_cluster(tmp_path):
    out = _find(tmp_path, "jgf")
    graph = json.loads(next(line for line in out.splitlines() if line.startswith('{"graph"')))
    md = {n["metadata"]["paths"]["containment"]: n["metadata"] for n in graph["graph"]["nodes"]}
    assert md["/power0/rack0/pdu0"]["agfilter"] == {"core": "used:0, total:0",
                                                     "node": "used:0, total:0"}
    assert md["/power0"]["agfilter"] == {
        "core": "used:0, total:2592", "gpu": "used:0, total:144",
        "memory": "used:0, total:1152", "node": "used:0, total:72"}
