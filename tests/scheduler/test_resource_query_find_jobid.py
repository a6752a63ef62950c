"""``find jobid-*=`` reads the id as Fluxion does, with flux-core's flux_job_id_parse
(libjob/id.c, libutil/fluid.c): ``job.`` dropped, dothex, F58, ``0x`` hex and a ``+``
sign taken; ``0X``, a ``-`` (read as mnemonic words), a bad dothex or base58 digit and
an id past 2**64 are invalid criteria (no EXPRESSION block).

Oracle: Fluxion v0.54's resource-query on the tiny GRUG of tests/support/sched_graphs.py
(``resource-query -L tiny.graphml -d -t out -P high < SCRIPT``, the job a socket with
two cores); FLUXION_OUT is its -t output, pasted. (Its stderr says
``findfind: invalid criteria: ...`` where fluxnode writes ``ERROR: find: ...``: not
checked here. ``ƒ3``, F58's own prefix, does not survive Fluxion's expression reader:
left out.)"""

from __future__ import annotations

import yaml
from support.rq_run import rq

SCRIPT = """\
match allocate {job}
match allocate {job}
find jobid-alloc=0x000002
find jobid-alloc=+2
find jobid-alloc=job.2
find jobid-alloc=job.0000.0000.0000.0002
find jobid-alloc=f3
find jobid-alloc=fzzzzzzzzzzzz
find jobid-span=0x2
find jobid-alloc=0X2
find jobid-alloc=-2
find jobid-alloc=2.
find jobid-alloc=f0
find jobid-alloc=18446744073709551618
quit
"""

FLUXION_OUT = """\
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node0[1:s]
      ------rack0[1:s]
      ---tiny0[1:s]
INFO: =============================
INFO: JOBID=1
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node1[1:s]
      ------rack0[1:s]
      ---tiny0[1:s]
INFO: =============================
INFO: JOBID=2
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node1[1:x]
      ------rack0[1:x]
      ---tiny0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-alloc=0x000002"
INFO: =============================
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node1[1:x]
      ------rack0[1:x]
      ---tiny0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-alloc=+2"
INFO: =============================
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node1[1:x]
      ------rack0[1:x]
      ---tiny0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-alloc=job.2"
INFO: =============================
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node1[1:x]
      ------rack0[1:x]
      ---tiny0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-alloc=job.0000.0000.0000.0002"
INFO: =============================
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node1[1:x]
      ------rack0[1:x]
      ---tiny0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-alloc=f3"
INFO: =============================
INFO: =============================
INFO: EXPRESSION="jobid-alloc=fzzzzzzzzzzzz"
INFO: =============================
      ------------socket1[1:x]
      ---------node1[1:x]
      ------rack0[1:x]
      ---tiny0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-span=0x2"
INFO: =============================
"""


def test_job_ids_in_flux_job_id_parse_encodings(tmp_path, tiny_grug):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "version": 9999, "attributes": {"system": {"duration": 60}},
        "resources": [{"type": "slot", "count": 1, "label": "d",
                       "with": [{"type": "socket", "count": 1,
                                 "with": [{"type": "core", "count": 2}]}]}],
        "tasks": [{"command": ["a"], "slot": "d", "count": {"per_slot": 1}}]}))
    out, err, rc = rq(tmp_path, tiny_grug, SCRIPT.format(job=job), "-P", "high")
    assert rc == 0 and "Traceback" not in err
    assert err.count("invalid criteria") == 5
    assert out == FLUXION_OUT
