"""A `without_allocating` match where a subtree filter would refuse the job (issue 35,
random case r14747), against Fluxion v0.54's own output (data/no_alloc_refused/README.md).

`remove /cluster0/node3 true` takes node3 away while job 1 holds it, and leaves the
cluster's subtree filter short of the units job 1 still holds there. An allocating match
through the cluster then fails to add its span to that filter: Fluxion's upd_sched
swallows the error and neither emits the cluster nor steps its traversal level back, so
the last match's JGF has no cluster vertex. Under `without_allocating` (AT_NO_ALLOC)
upd_sched plans nothing, so nothing refuses and the cluster is emitted as any other
vertex: the second match's JGF has it.
"""

from __future__ import annotations

from pathlib import Path

from support.rq_run import rq

DATA = Path(__file__).parent / "data" / "no_alloc_refused"


def test_without_allocating_emits_a_vertex_whose_filter_an_allocation_would_fail(tmp_path):
    (tmp_path / "slots.json").write_text((DATA / "slots.json").read_text())
    commands = (DATA / "commands.in").read_text().replace("@slots.json",
                                                          str(tmp_path / "slots.json"))
    out, err, code = rq(tmp_path, DATA / "R.json", commands,
                        "-f", "rv1exec", "-S", "CA", "-P", "hinode", "-F", "jgf_shorthand")
    assert (code, err) == (0, "")
    expected = (DATA / "fluxion.out").read_text()
    blocks = out.split("INFO: =============================\n")
    # the matched and the allocated block differ only in the cluster vertex: a wrong
    # model shows here before the whole comparison
    assert '"type": "cluster"' in blocks[2], blocks[2]
    assert '"type": "cluster"' not in blocks[4], blocks[4]
    assert out == expected
