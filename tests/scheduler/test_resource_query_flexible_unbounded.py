"""``-T flexible`` with a slot count whose effective max does not fit an int: Fluxion's
dfu_flexible_t::select_or_config keeps ``nslots`` (unsigned, calc_effective_max: UINT_MAX
for ``{min: N}`` without a max) in an ``int``, so it wraps negative, and dom_slot then
loops for that many (unsigned) slots until they run out ("not enough slots"): no match.

Oracle: Fluxion v0.54's resource-query on the tiny GRUG of tests/support/sched_graphs.py,
with the jobspecs below (a.yaml = _job({"min": 2}, ["node0"]), b.yaml = max 3000000000,
c.yaml = max 2147483647 on node0)::

    resource-query -L tiny.graphml -d -t out -T flexible -P high <<EOF
    match allocate a.yaml
    match satisfiability a.yaml
    match allocate b.yaml
    match allocate c.yaml
    quit
    EOF

whose -t output is FLUXION_OUT, pasted."""

from __future__ import annotations

import yaml
from support.rq_run import rq

FLUXION_OUT = """\
INFO: =============================
INFO: No matching resources found
INFO: JOBID=1
INFO: =============================
INFO: =============================
INFO: Unsatisfiable request
INFO: =============================
INFO: =============================
INFO: No matching resources found
INFO: JOBID=2
INFO: =============================
      ------------socket0[1:x]
      ------------socket1[1:x]
      ---------node0[1:s]
      ------rack0[1:s]
      ---tiny0[1:s]
INFO: =============================
INFO: JOBID=3
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
"""


def _job(count, hostlist=None) -> dict:
    system: dict = {"duration": 60}
    if hostlist:
        system["constraints"] = {"hostlist": hostlist}
    return {"version": 9999, "attributes": {"system": system},
            "resources": [{"type": "slot", "count": count, "label": "d",
                           "with": [{"type": "socket", "count": 1}]}],
            "tasks": [{"command": ["a"], "slot": "d", "count": {"per_slot": 1}}]}


def test_a_slot_count_past_int_max_matches_nothing_under_flexible(tmp_path, tiny_grug):
    plus = {"operator": "+", "operand": 1}
    for name, job in (("a", _job({"min": 2}, ["node0"])),
                      ("b", _job({"min": 2, "max": 3000000000, **plus})),
                      ("c", _job({"min": 2, "max": 2147483647, **plus}, ["node0"]))):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(job))
    a, b, c = (tmp_path / f"{n}.yaml" for n in "abc")
    script = (f"match allocate {a}\nmatch satisfiability {a}\nmatch allocate {b}\n"
              f"match allocate {c}\nquit\n")
    out, err, rc = rq(tmp_path, tiny_grug, script, "-T", "flexible", "-P", "high")
    assert rc == 0 and "Traceback" not in err
    assert out == FLUXION_OUT
