"""The resource list as node shapes (scheduler/binder/resource_shapes.py): 20,000 nodes, each
unlike the others, fit one ConfigMap and read back as they were; bad documents are refused
naming what is wrong, at bounded cost.

Oracles: the listing the test made (read back, entry for entry), and the size of the values
counted here as the API server's ValidateConfigMap counts them (data as bytes, binaryData
decoded), against its limit of 1 MiB (core.MaxSecretSize)."""

from __future__ import annotations

import base64
import gzip
import json
import random

import pytest
from fluxnode.scheduler.binder import resource_shapes
from fluxnode.scheduler.binder.resource_shapes import ShapesError
from support import seeds

LIMIT = 1024 * 1024
NODES = 20_000
TEXT, GZ = "resources.json", "resources.json.gz"


def ids_text(ids: list[int]) -> str:
    """Comma-separated ids (RFC 22 allows a list without ranges), so the decoder's ranges are
    not the test's."""
    return ",".join(map(str, ids))


def scattered(seed: int, nodes: int = NODES) -> dict:
    """`nodes` nodes of 64 cores and 0-4 GPUs, each with its own random cores allocated."""
    rng = random.Random(seed)
    listing: dict[str, list[dict]] = {"free": [], "allocated": [], "down": []}
    for rank in range(nodes):
        host = f"rack{rank // 40}-node{rank % 40:02d}"
        gpus = list(range(rng.randint(0, 4)))
        taken = sorted(rng.sample(range(64), rng.randint(0, 64)))
        rest = [c for c in range(64) if c not in taken]
        if rank % 97 == 0:
            listing["down"].append(entry(rank, host, list(range(64)), gpus))
            continue
        if taken:
            listing["allocated"].append(entry(rank, host, taken, gpus))
        if rest:
            listing["free"].append(entry(rank, host, rest, [] if taken else gpus))
    return listing


def entry(rank: int, host: str, cores: list[int], gpus: list[int]) -> dict:
    return {"rank": rank, "hostname": host, "ncores": len(cores), "ngpus": len(gpus),
            "cores": ids_text(cores), "gpus": ids_text(gpus)}


def values_size(data: dict, binary: dict) -> int:
    return sum(len(v.encode()) for v in data.values() if v is not None) + sum(
        len(base64.b64decode(v)) for v in binary.values() if v is not None)


def normalized(listing: dict) -> dict:
    """Ids as sets (the writer may write ranges where the test wrote lists)."""
    def ids(text: str) -> set[int]:
        out: set[int] = set()
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
        return out
    return {s: [{**e, "cores": ids(e["cores"]), "gpus": ids(e["gpus"])} for e in entries]
            for s, entries in listing.items()}


def test_twenty_thousand_nodes_of_distinct_shapes_fit_one_configmap_and_read_back():
    listing = scattered(seeds.choose("resource_shapes_20000"))
    per_node = json.dumps(listing, separators=(",", ":"))
    assert len(per_node) > LIMIT  # the list as resource.list gives it does not fit
    data, binary, ids_kept = resource_shapes.fitting(listing, TEXT, GZ, LIMIT - 4096)
    assert ids_kept and data[TEXT] is None and binary[GZ] is not None
    assert values_size(data, binary) <= LIMIT - 4096
    back = resource_shapes.ungroup(resource_shapes.decode(data, binary, TEXT, GZ))
    assert normalized(back) == normalized(listing)


def test_a_cluster_of_few_shapes_is_readable_text():
    listing = {"free": [entry(r, f"sim{r}", list(range(8)), []) for r in range(NODES)],
               "allocated": [], "down": []}
    data, binary, _ = resource_shapes.fitting(listing, TEXT, GZ, LIMIT)
    assert binary == {GZ: None}
    assert json.loads(data[TEXT]) == {"version": 2, "allocated": [], "down": [], "free": [
        {"ranks": f"0-{NODES - 1}", "hosts": f"sim[0-{NODES - 1}]", "ncores": 8, "ngpus": 0,
         "cores": ids_text(list(range(8))), "gpus": ""}]}


def test_counts_only_when_the_ids_do_not_fit():
    listing = scattered(seeds.choose("resource_shapes_counts"), 2000)
    full, binary, ids_kept = resource_shapes.fitting(listing, TEXT, GZ, LIMIT)
    assert ids_kept
    budget = values_size(full, binary) - 1  # one byte short of the shapes with their ids
    data, binary, ids_kept = resource_shapes.fitting(listing, TEXT, GZ, budget)
    assert not ids_kept and values_size(data, binary) <= budget
    back = resource_shapes.ungroup(resource_shapes.decode(data, binary, TEXT, GZ))
    assert {s: [(e["rank"], e["hostname"], e["ncores"], e["ngpus"]) for e in entries]
            for s, entries in back.items()} == \
        {s: [(e["rank"], e["hostname"], e["ncores"], e["ngpus"]) for e in entries]
         for s, entries in listing.items()}
    with pytest.raises(ShapesError, match="even as counts"):
        resource_shapes.fitting(listing, TEXT, GZ, 1000)


def test_the_per_node_list_of_older_binders_is_read():
    old = {"free": [entry(0, "n0", [0, 1], [])], "allocated": [], "down": []}
    doc = resource_shapes.decode({TEXT: json.dumps(old)}, {}, TEXT, GZ)
    assert resource_shapes.ungroup(doc) == old


@pytest.mark.parametrize("doc, problem", [
    ({"version": 2, "free": [{"ranks": "0-2", "hosts": "n[0-1]", "ncores": 1}]},
     "free[0]: 3 ranks but 2 hosts"),
    ({"version": 2, "down": [{"ranks": "0-999999999", "hosts": "n0"}]}, "down[0]: "),
    ({"version": 2, "free": [{"hosts": "n0"}]}, "free[0]: needs ranks"),
    ({"version": 2, "free": [{"ranks": "0", "hosts": "n0", "ncores": "8"}]},
     "free[0].ncores: must be an integer"),
    ({"version": 3}, "version 3"),
    ([1], "not a free/allocated/down listing"),
])
def test_bad_documents_are_refused_naming_what_is_wrong(doc, problem):
    with pytest.raises(ShapesError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        resource_shapes.ungroup(doc)


def test_a_gzip_bomb_is_refused_after_a_bounded_read():
    bomb = gzip.compress(b" " * (resource_shapes.MAX_JSON + 1), compresslevel=9)
    assert len(bomb) < 100_000
    with pytest.raises(ShapesError, match="more than"):
        resource_shapes.decode({}, {GZ: base64.b64encode(bomb).decode()}, TEXT, GZ)
    with pytest.raises(ShapesError, match=GZ):
        resource_shapes.decode({}, {GZ: "not base64!"}, TEXT, GZ)
