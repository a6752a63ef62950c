"""The allocation record's wire form: ids written as RFC 22 idsets read back (by the
tests' own parser) as the ids held, and a record read back from its wire form equal."""

import random

from fluxnode.scheduler.service.allocation import NodeShare, SlotShare
from support.oracles import parse_idset


def test_ids_written_as_idsets_read_back_as_the_same_ids():
    rng = random.Random(7)
    cases = [(), (3,), (0, 1, 2, 3), (0, 1, 2, 5), (4, 6), tuple(range(1, 200, 2))]
    cases += [tuple(sorted(rng.sample(range(64), rng.randint(0, 20)))) for _ in range(200)]
    for ids in cases:
        share = NodeShare(2, "n2", ids, ids[:1], 64)
        wire = share.to_wire()
        assert sorted(parse_idset(wire["cores"])) == list(ids), (ids, wire)
        assert sorted(parse_idset(wire["gpus"])) == list(ids[:1])
        assert NodeShare.from_wire(wire) == share
        assert SlotShare.from_wire(SlotShare(1, share).to_wire()) == SlotShare(1, share)
    assert NodeShare(0, "n", (0, 1, 2, 5)).to_wire()["cores"] == "0-2,5"
