"""hwloc XML read as libhwloc 2 presents it to Fluxion (issue 35, fresh random cases):
v1 NUMA nodes become memory children (of the socket they cover, or of a Group), Groups
and caches without structure are merged away, and children come normal, memory, I/O.

The expected paths are Fluxion v0.54's, from
``printf 'find status=up\\nquit\\n' | resource-query -L XML -f hwloc -F jgf -d -t OUT``
on flux-sched's ``t/data/hwloc-data/001N/node_local_storage/*/0.xml`` (in the shared
corpus): the vertices of OUT's JGF other than cores and PUs, in its order.
"""

from __future__ import annotations

import json

import pytest
from support.paths import SHARED
from support.rq_run import rq

HWLOC = SHARED / "fluxion-corpus" / "data" / "hwloc-data" / "001N" / "node_local_storage"
pytestmark = pytest.mark.skipif(not HWLOC.is_dir(), reason=f"hwloc data not found at {HWLOC}")

CATALYST = ["/cluster0/catalyst321/socket0/numanode0", "/cluster0/catalyst321/socket0",
            "/cluster0/catalyst321/socket1/numanode1",
            "/cluster0/catalyst321/socket1/storage6", "/cluster0/catalyst321/socket1/storage7",
            "/cluster0/catalyst321/socket1/storage8", "/cluster0/catalyst321/socket1/storage9",
            "/cluster0/catalyst321/socket1", "/cluster0/catalyst321", "/cluster0"]
LASSEN_SOCKET0 = [f"/cluster0/lassen6/socket0/L3cache{i}" for i in range(10)] + [
    "/cluster0/lassen6/socket0/numanode0", "/cluster0/lassen6/socket0/storage0",
    "/cluster0/lassen6/socket0/gpu0", "/cluster0/lassen6/socket0/gpu1",
    "/cluster0/lassen6/socket0"]
CORONA_GROUP0 = ["/cluster0/corona116/socket0/group0/L3cache0",
                 "/cluster0/corona116/socket0/group0/L3cache1",
                 "/cluster0/corona116/socket0/group0/numanode0",
                 "/cluster0/corona116/socket0/group0/storage0",
                 "/cluster0/corona116/socket0/group0"]


def _upper_paths(tmp_path, site: str) -> list[str]:
    out, err, rc = rq(tmp_path, HWLOC / site / "0.xml", "find status=up\nquit\n",
                      "-f", "hwloc", "-F", "jgf")
    assert rc == 0, err
    graph = json.loads(next(line for line in out.splitlines() if line.startswith('{"graph"')))
    return [n["metadata"]["paths"]["containment"] for n in graph["graph"]["nodes"]
            if n["metadata"]["type"] not in ("core", "pu")]


def test_a_v1_numa_node_over_one_socket_is_that_sockets_memory_child(tmp_path):
    """catalyst (v1 XML: Machine > NUMANode > Socket > cores, bridges): each NUMA node
    under its socket, after the cores; the block devices under socket1 after it."""
    assert _upper_paths(tmp_path, "catalyst") == CATALYST


def test_caches_over_one_core_are_merged_away_and_gpus_follow_the_numa_node(tmp_path):
    """lassen: the L3 caches over several cores stay, the L2/L1 ones over one core do
    not; socket0's NUMA node, then its I/O (storage, GPUs)."""
    paths = _upper_paths(tmp_path, "lassen")
    assert paths[:len(LASSEN_SOCKET0)] == LASSEN_SOCKET0
    assert not [p for p in paths if "L2cache" in p or "L1cache" in p]


def test_a_numa_node_over_part_of_a_socket_sits_in_a_group(tmp_path):
    """corona (v1: Socket > NUMANode > Group > L3 caches): hwloc's Group for the NUMA
    node's CPUs merges with the XML's own, which keeps the NUMA node and storage."""
    paths = _upper_paths(tmp_path, "corona")
    assert paths[:len(CORONA_GROUP0)] == CORONA_GROUP0
    assert len([p for p in paths if p.rsplit("/", 1)[1].startswith("group")]) == 8
    assert len(paths) == 37
