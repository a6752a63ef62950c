"""What the widened random batches of issue 35 (bench/rq_random.py --wide) found, each as a
rule of Fluxion v0.54's source with the answer of its resource-query binary pasted in.

The binary's runs: flux-sched v0.54.0 built at /work/flux-build, on this test's tiny graph
(conftest's TINY_GRUG written to tiny.graphml) and the one-core jobspec
(support.sched_graphs.cores(1)) as unit.yaml, 2026-11-29, e.g.

    resource-query -L tiny.graphml -d -F jgf -p ALL:node -t out < cmds
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from support.rq_run import SEP, framed_match, rq
from support.sched_graphs import cores

FIND_CMDS = """match allocate {job}
find status=up and agfilter=t
find jobid-alloc=1 or agfilter=t
quit
"""

# (node ids, (source, target) of the edges) of each find's JGF, as Fluxion wrote them.
# dom_find_dfv writes an edge to every child that was emitted, whether or not the
# vertex itself then is; under agfilter=t a vertex without a subtree filter (under
# ALL:node the nodes have none) or, when the expression names a job, without that job's
# span in it is not emitted (`jobid-alloc=1 or agfilter=t` is true of every vertex).
FIND_JGF = {
    "ALL:node": [
        (["4", "5", "6", "7", "1", "0"],
         [("2", "4"), ("2", "5"), ("3", "6"), ("3", "7"), ("0", "1")]),
        (["7", "1", "0"], [("3", "7"), ("0", "1")]),
    ],
    "ALL:core": [
        (["4", "5", "2", "6", "7", "3", "1", "0"],
         [("2", "4"), ("2", "5"), ("1", "2"), ("3", "6"), ("3", "7"), ("1", "3"),
          ("0", "1")]),
        (["7", "3", "1", "0"], [("3", "7"), ("1", "3"), ("0", "1")]),
    ],
}


def _graphs(text: str) -> list[tuple[list[str], list[tuple[str, str]]]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            g = json.loads(line)["graph"]
            out.append(([n["id"] for n in g["nodes"]],
                        [(e["source"], e["target"]) for e in g["edges"]]))
    return out


@pytest.mark.parametrize("prune", sorted(FIND_JGF))
def test_find_writes_the_edges_of_its_walk(tmp_path, tiny_grug, prune):
    """r8023 (seeds 8000-8299): `-S C+PA -p ALL:node` then `find agfilter=t` under
    jgf_shorthand; fluxnode had rebuilt the edges from the emitted vertices' levels and
    lost those below a vertex left out."""
    job = tmp_path / "unit.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    out, err, rc = rq(tmp_path, tiny_grug, FIND_CMDS.format(job=job), "-F", "jgf",
                      "-p", prune)
    assert (rc, err) == (0, "")
    assert _graphs(out)[1:] == FIND_JGF[prune]


ONE_CORE_TREE = """\
      ---------------core7[1:x]
      ------------socket1[1:s]
      ---------node1[1:s]
      ------rack0[1:s]
      ---tiny0[1:s]
"""
ONE_CORE = framed_match(ONE_CORE_TREE, 1)
ABORT_STDERR = ("terminate called after throwing an instance of 'std::out_of_range'\n"
                "  what():  no element available\n")
# the same commands with the default filters (the root has one): no abort; job 3 takes
# node0's core7
NO_ABORT = (ONE_CORE + SEP + "INFO: No matching resources found\nINFO: Unsatisfiable request\n"
            "INFO: JOBID=2\n" + SEP + framed_match(ONE_CORE_TREE.replace("node1", "node0"), 3))


def _site_graph(tmp_path, tiny_grug):
    """The tiny graph with a root of type `site`: no leaf type is anchored at it (Fluxion
    anchors them at `cluster`), so `-p rack:node` leaves it without a subtree filter, as
    it leaves power.graphml's power panel under `-S PA`."""
    site = tmp_path / "site.graphml"
    site.write_text(tiny_grug.read_text().replace(
        '<data key="type">cluster<', '<data key="type">site<'))
    for name, n in (("unit.yaml", 1), ("eight.yaml", 8)):
        (tmp_path / name).write_text(yaml.safe_dump(cores(n)))
    return site


@pytest.mark.parametrize("op", ["satisfiability", "allocate_with_satisfiability",
                                "allocate_orelse_reserve"])
def test_a_root_without_subtree_filter_aborts_where_fluxion_reads_it(tmp_path, tiny_grug, op):
    """dfu_traverser_t::is_satisfiable, and ::schedule once its first walk failed, read
    the root's filter with subplans.at (dom), which throws std::out_of_range when the
    prune filters gave the root none; nothing catches it and resource-query aborts
    (`resource-query -L site.graphml -d -p rack:node -t out < cmds`: exit 134, this
    stderr, the -t output of the commands before). The default filters give the root
    one: the same commands are answered."""
    site = _site_graph(tmp_path, tiny_grug)
    cmds = (f"match allocate {tmp_path}/unit.yaml\nmatch {op} {tmp_path}/eight.yaml\n"
            f"match allocate {tmp_path}/unit.yaml\nquit\n")
    assert rq(tmp_path, site, cmds, "-p", "rack:node") == (ONE_CORE, ABORT_STDERR, 134)
    if op == "allocate_orelse_reserve":
        assert rq(tmp_path, site, cmds) == (NO_ABORT, "", 0)


def test_a_plain_allocate_never_reads_the_root_filter(tmp_path, tiny_grug):
    """`match allocate` fails with EBUSY without reading it (schedule's MATCH_ALLOCATE
    case): Fluxion answers every match."""
    site = _site_graph(tmp_path, tiny_grug)
    cmds = "".join(f"match allocate {tmp_path}/eight.yaml\n" for _ in range(2)) + "quit\n"
    out, err, rc = rq(tmp_path, site, cmds, "-p", "rack:node")
    assert (rc, err, out.count("INFO: No matching resources found\n")) == (0, "", 2)


def _slot(*with_: dict, label: str = "default") -> dict:
    return {"type": "slot", "count": 1, "label": label, "with": list(with_)}


# a core asked non-exclusive (labelled) in a slot; two sockets below one node, a slot in
# each; two slots at the root's level
REFUSED = {
    "shared.yaml": [_slot({"type": "core", "count": 2, "exclusive": False, "label": "lab"})],
    "sockets.yaml": [{"type": "node", "count": 1, "with": [
        {"type": "socket", "count": 1, "with": [_slot({"type": "core", "count": 1})]},
        {"type": "socket", "count": 1, "with": [_slot({"type": "gpu", "count": 1}, label="b")]},
    ]}],
    "slots.yaml": [_slot({"type": "core", "count": 1}),
                   _slot({"type": "core", "count": 1}, label="b")],
}
REFUSED_CMDS = """match allocate {d}/shared.yaml
match allocate {d}/sockets.yaml
match satisfiability {d}/slots.yaml
match allocate {d}/unit.yaml
quit
"""
# by_excl's line has no newline of its own: one per core visited (both nodes' cores, in
# the walk's order: `first` visits a socket's cores from the highest uniq_id down, `low`
# up), run together; test ()'s has one, and match_allocate adds its own after the lot
CORES_VISITED = {
    "first": ["core7", "core6", "core5", "core4", "core3", "core2", "core1", "core0"] * 2,
    "low": ["core0", "core1", "core2", "core3", "core4", "core5", "core6", "core7"] * 2,
}
REFUSED_STDERR = (
    "match_allocate: ERROR: {by_excl}\n"
    "match_allocate: ERROR: test: siblings in jobspec request same resource type : socket.\n"
    "test: siblings in jobspec request same resource type : socket.\n"
    "test: siblings in jobspec request same resource type : socket.\n"
    "test: siblings in jobspec request same resource type : socket.\n"
    "\n"
    "match_allocate: ERROR: test: siblings in jobspec request same resource type : cluster.\n"
    "\n"
)
REFUSED_OUT = """INFO: =============================
INFO: No matching resources found
INFO: JOBID=1
INFO: =============================
INFO: =============================
INFO: No matching resources found
INFO: JOBID=2
INFO: =============================
INFO: =============================
INFO: Unsatisfiable request
INFO: =============================
""" + ONE_CORE.replace("JOBID=1", "JOBID=3")
# `low` takes the lowest core of node0 where `first` took core7 of node1
ALLOCATED = {"first": REFUSED_OUT,
             "low": REFUSED_OUT.replace("core7", "core0").replace("socket1", "socket0")
             .replace("node1", "node0")}


@pytest.mark.parametrize("policy", sorted(CORES_VISITED))
def test_the_traversers_refusals_in_its_words(tmp_path, tiny_grug, policy):
    """What dfu_impl_t writes to its m_err_msg when it refuses a vertex, and
    reapi_cli_t::match_allocate prints for a failed match ("match_allocate: ERROR: "
    and the whole message, then a newline): by_excl's exclusivity conflict and test ()'s
    siblings of one type, in the walk's order; nothing for a match that succeeds. Under
    `first` (the first-match walk) and `low` (leaves in line, shape templates, the
    subtree cache): none of their shortcuts replays a walk that wrote one. Fluxion's
    answer: `resource-query -L tiny.graphml -P POLICY -d -t out < cmds`."""
    for name, resources in REFUSED.items():
        (tmp_path / name).write_text(yaml.safe_dump(
            {"version": 9999, "resources": resources,
             "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}],
             "attributes": {"system": {"duration": 3600}}}))
    (tmp_path / "unit.yaml").write_text(yaml.safe_dump(cores(1)))
    got = rq(tmp_path, tiny_grug, REFUSED_CMDS.format(d=tmp_path), "-P", policy)
    by_excl = "".join(f"by_excl: exclusivity conflicts at jobspec=lab : vertex={c}"
                      for c in CORES_VISITED[policy])
    assert got == (ALLOCATED[policy], REFUSED_STDERR.format(by_excl=by_excl), 0)


def test_the_flexible_traversers_slots_run_out_in_its_words(tmp_path, tiny_grug):
    """dfu_flexible_t::dom_slot keeps the slot count (unsigned, no max: UINT_MAX) in an
    int, so select_or_config's bound is -1, and dom_slot then takes slots until the
    candidates run out: "dom_slot: not enough slots." at each socket, and no match.
    (The simple traverser allocates the whole graph.) `resource-query -L tiny.graphml
    -T flexible -d -t out < cmds`, r11236 of `--wide --more --seeds 11000-11299`."""
    job = tmp_path / "open.yaml"
    job.write_text(yaml.safe_dump(
        {"version": 9999, "resources": [{"type": "slot", "count": {"min": 1},
                                         "label": "default",
                                         "with": [{"type": "core", "count": {"min": 2}}]}],
         "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}],
         "attributes": {"system": {"duration": 3600}}}))
    got = rq(tmp_path, tiny_grug, f"match allocate {job}\nquit\n", "-T", "flexible")
    assert got == ("INFO: =============================\n"
                   "INFO: No matching resources found\n"
                   "INFO: JOBID=1\n"
                   "INFO: =============================\n",
                   "match_allocate: ERROR: dom_slot: not enough slots.\n"
                   "dom_slot: not enough slots.\n"
                   "dom_slot: not enough slots.\n"
                   "dom_slot: not enough slots.\n"
                   "\n", 0)


def test_an_abort_loses_what_fluxions_stdout_had_not_flushed(tmp_path, tiny_grug):
    """-e's lines per rank end in "\\n", not std::endl: they wait in std::cout's buffer,
    which abort() never writes. `resource-query -L site.graphml -d -e -p rack:node -t out
    < cmds` wrote this to stdout (and, when it ends normally, the rank lines too)."""
    site = _site_graph(tmp_path, tiny_grug)
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(site), "-d", "-e",
         "-p", "rack:node", "-t", str(tmp_path / "out")],
        input=f"match satisfiability {tmp_path}/eight.yaml\nquit\n", capture_output=True,
        text=True, timeout=60)
    load_time, *rest = proc.stdout.splitlines(keepends=True)
    assert load_time.startswith("INFO: Graph Load Time: ")
    assert (proc.returncode, proc.stderr, "".join(rest)) == (134, ABORT_STDERR, (
        "INFO: Vertex Count: 36\n"
        "INFO: Edge Count: 35\n"
        "INFO: by_type Key-Value Pairs: 7\n"
        "INFO: by_name Key-Value Pairs: 20\n"
        "INFO: by_path Key-Value Pairs: 36\n"))
