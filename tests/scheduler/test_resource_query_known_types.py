"""A jobspec naming a resource type resource-query never interned is refused while it is
read, as Fluxion's is: resource-query loads the graph, then finalizes its resource-type
interner (reapi_cli_impl.hpp, resource_query_t's constructor), and libjobspec turns the
interner's refusal into the parse error 'Value of "type" must be a resource type known to
fluxion' (libjobspec/jobspec.cpp). The interner holds data_std.cpp's types, the matcher's
"*", the graph's types and the prune filters' (matcher.cpp); attach adds the types of what
it reads (add_subgraph opens the interner). A parse error uses no job id
(match_allocate returns before incr_job_counter) and leaves `sat` true (command.cpp's
run_match), so satisfiability answers "Satisfiable"."""

from __future__ import annotations

import json

import yaml
from support.rq_run import rq

SEP = "INFO: =============================\n"
REFUSED = ('match_allocate: ERROR: Jobspec error for 1: Value of "type" must be a resource '
           'type known to fluxion\n')


def _job(tmp_path, leaf: str) -> str:
    p = tmp_path / f"{leaf}.yaml"
    p.write_text(yaml.safe_dump({
        "version": 9999, "attributes": {"system": {"duration": 60}},
        "resources": [{"type": "slot", "count": 1, "label": "s",
                       "with": [{"type": leaf, "count": 1}]}],
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    return str(p)


def test_a_type_the_graph_lacks_is_a_jobspec_error(tmp_path, tiny_grug):
    nic, core = _job(tmp_path, "nic"), _job(tmp_path, "core")
    out, err, rc = rq(tmp_path, tiny_grug,
                      f"match allocate {nic}\nmatch satisfiability {nic}\n"
                      f"match allocate_with_satisfiability {nic}\nmatch allocate {core}\nquit\n")
    assert rc == 0 and err == REFUSED * 3
    nothing = f"{SEP}INFO: No matching resources found\nINFO: JOBID=1\n{SEP}"
    assert out.startswith(nothing + f"{SEP}INFO: Satisfiable request\n{SEP}" + nothing)
    # the job id was not used up: the good jobspec is job 1
    assert out.endswith(f"{SEP}INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\n"
                        f"INFO: SCHEDULED AT=Now\n{SEP}")


def test_a_type_a_prune_filter_or_attach_named_is_known(tmp_path, tiny_grug):
    """-p rack:nic interns nic before the interner is closed: the jobspec reads, and
    the graph has no nic (unsatisfiable). A subgraph attached with a nic makes it known
    too (a static type such as ssd always is)."""
    nic, ssd = _job(tmp_path, "nic"), _job(tmp_path, "ssd")
    out, err, rc = rq(tmp_path, tiny_grug, f"match allocate_with_satisfiability {nic}\n"
                      f"match allocate_with_satisfiability {ssd}\nquit\n",
                      "-p", "ALL:core,rack:nic")
    assert (rc, err) == (0, "")
    assert out.count("INFO: Unsatisfiable request\n") == 2
    sub = tmp_path / "nic.json"
    sub.write_text(json.dumps({"graph": {"nodes": [
        {"id": "2", "metadata": {"type": "node", "name": "node0", "id": 0, "uniq_id": 2,
                                 "rank": -1, "paths": {"containment": "/tiny0/rack0/node0"}}},
        {"id": "100", "metadata": {"type": "nic", "name": "nic0", "id": 0, "uniq_id": 100,
                                   "rank": -1, "size": 1, "paths": {
                                       "containment": "/tiny0/rack0/node0/nic0"}}}],
        "edges": [{"source": "2", "target": "100",
                   "metadata": {"subsystem": "containment"}}]}}))
    out, err, rc = rq(tmp_path, tiny_grug, f"match allocate {nic}\nattach {sub}\n"
                      f"match allocate {nic}\nquit\n")
    assert rc == 0 and err.startswith(REFUSED)
    assert err.count("known to fluxion") == 1
