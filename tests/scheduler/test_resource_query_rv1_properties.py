"""Node properties of an R read with ``-f rv1exec``: Fluxion's rv1exec reader
(resource/readers/resource_reader_rv1exec.cpp, build_pmap) gives the node of each rank
an ``execution.properties`` entry names the property, with the value "" (properties_t
inserts (name, "")); from there they are the node's like any other: get-property prints
``name=``, find property= finds the node, constraints match it, and the JGF and RV1
writers write them (``{"fast": ""}`` in the vertex, ``"properties": {"fast": "1"}`` in R,
rv1_match_writers_t gathering each property's ranks)."""

from __future__ import annotations

import json

from support.rq_run import rq

R = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-3", "children": {"core": "0-3"}}], "nodelist": ["node[0-3]"],
    "properties": {"fast": "1-2", "amd": "3"}, "starttime": 0, "expiration": 0}}


def _job(tmp_path, constraint: dict | None) -> str:
    system: dict = {"duration": 60}
    if constraint is not None:
        system["constraints"] = constraint
    p = tmp_path / "job.json"  # JSON: a property must be a quoted string (constraint.cpp)
    p.write_text(json.dumps({
        "version": 9999, "attributes": {"system": system},
        "resources": [{"type": "slot", "count": 1, "label": "s", "with": [
            {"type": "node", "count": 1, "with": [{"type": "core", "count": 1}]}]}],
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}))
    return str(p)


def _graph(tmp_path, R=R):
    p = tmp_path / "R.json"
    p.write_text(json.dumps(R))
    return p


def test_get_property_and_find_see_rv1_properties(tmp_path):
    out, err, rc = rq(tmp_path, _graph(tmp_path),
                      "get-property /cluster0/node1\nget-property /cluster0/node0\n"
                      "find property=fast\nfind property=amd\nquit\n",
                      "-f", "rv1exec", "-P", "low")
    assert (rc, err) == (0, "")
    sep = "INFO: =============================\n"
    assert out == (
        "fast=\nNo properties were found for /cluster0/node0 (vtx's uniq_id=1).\n"
        "      ------node1[1:x]\n      ------node2[1:x]\n      ---cluster0[1:x]\n"
        f'{sep}INFO: EXPRESSION="property=fast"\n{sep}'
        "      ------node3[1:x]\n      ---cluster0[1:x]\n"
        f'{sep}INFO: EXPRESSION="property=amd"\n{sep}')


def test_constraints_match_rv1_properties_and_writers_write_them(tmp_path):
    job = _job(tmp_path, {"properties": ["fast"]})
    out, err, rc = rq(tmp_path, _graph(tmp_path), f"match allocate {job}\n" * 3 + "quit\n",
                      "-f", "rv1exec", "-P", "low", "-F", "rv1")
    assert (rc, err) == (0, "")
    Rs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["execution"]["nodelist"] for r in Rs] == [["node1"], ["node2"]]
    assert [r["execution"]["properties"] for r in Rs] == [{"fast": "1"}, {"fast": "2"}]
    nodes = [v["metadata"] for r in Rs for v in r["scheduling"]["graph"]["nodes"]
             if v["metadata"]["type"] == "node"]
    assert [n["properties"] for n in nodes] == [{"fast": ""}] * 2
    assert "INFO: JOBID=3\n" in out and out.count("No matching resources found") == 1


def test_a_bad_properties_idset_is_a_load_error(tmp_path):
    bad = json.loads(json.dumps(R))
    bad["execution"]["properties"] = {"fast": "1-x"}
    _out, err, rc = rq(tmp_path, _graph(tmp_path, bad), "quit\n", "-f", "rv1exec")
    assert rc != 0 and err.startswith("ERROR: can't load") and "properties.fast" in err
