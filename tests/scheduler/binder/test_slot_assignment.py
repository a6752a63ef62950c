import pytest
from fluxnode.scheduler.binder.slot_assignment import (
    AssignmentError,
    PodSlot,
    assign,
    slots_by_shape,
)
from fluxnode.scheduler.jobspec.builder import SlotKind

KINDS = [{"cores": 1, "gpus": 0, "memory_mib": 1024, "count": 2},
         {"cores": 2, "gpus": 0, "memory_mib": 0, "count": 1}]
SLOTS = [  # as the service lists them: by kind, then rank, then lowest ids
    {"kind": 0, "rank": 0, "hostname": "n0", "cores": "0", "gpus": "", "memory_mib": 1024},
    {"kind": 0, "rank": 0, "hostname": "n0", "cores": "1", "gpus": "", "memory_mib": 1024},
    {"kind": 1, "rank": 1, "hostname": "n1", "cores": "4-5", "gpus": "", "memory_mib": 0},
]


def test_each_pod_gets_a_slot_of_its_shape_in_uid_order():
    out = assign({"x": SlotKind(2), "y2": SlotKind(1, 0, 1024), "y1": SlotKind(1, 0, 1024)},
                 slots_by_shape(KINDS, SLOTS))
    assert out == {"x": PodSlot(1, "n1", "4-5", ""), "y1": PodSlot(0, "n0", "0", ""),
                   "y2": PodSlot(0, "n0", "1", "")}


def test_a_pod_without_a_slot_of_its_shape_is_reported():
    with pytest.raises(AssignmentError, match="3 cores"):
        assign({"z": SlotKind(3)}, slots_by_shape(KINDS, SLOTS))
    with pytest.raises(AssignmentError, match="1 cores, 0 GPUs and 1024 MiB"):
        assign({u: SlotKind(1, 0, 1024) for u in "abc"},
               slots_by_shape(KINDS, SLOTS))


def test_indexed_pods_take_slots_in_completion_index_order():
    kinds = [{"cores": 1, "gpus": 0, "memory_mib": 0, "count": 3}]
    slots = [{"kind": 0, "rank": r, "hostname": f"n{r}", "cores": "0", "gpus": ""}
             for r in range(3)]
    # uids sort the other way round from the indexes: the index decides
    out = assign({"c": SlotKind(1), "b": SlotKind(1), "a": SlotKind(1)},
                 slots_by_shape(kinds, slots), {"c": 0, "b": 1, "a": 2})
    assert {uid: s.hostname for uid, s in out.items()} == {"c": "n0", "b": "n1", "a": "n2"}
    # a pod without an index comes after the indexed ones
    out = assign({"c": SlotKind(1), "b": SlotKind(1), "a": SlotKind(1)},
                 slots_by_shape(kinds, slots), {"c": 0, "b": 1})
    assert out["a"].hostname == "n2"
