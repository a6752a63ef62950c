import pytest
from fluxnode.scheduler.binder.slot_assignment import AssignmentError, PodSlot, assign, assign_kinds


def test_homogeneous_pods_split_each_node():
    nodes = [
        {"rank": 0, "hostname": "n0", "cores": "0-3", "gpus": ""},
        {"rank": 2, "hostname": "n2", "cores": "4-5", "gpus": ""},
    ]
    out = assign({"a": (2, 0, 0), "b": (2, 0, 0), "c": (2, 0, 0)}, nodes)
    assert sorted((s.hostname, s.cores) for s in out.values()) == [
        ("n0", "0-1"),
        ("n0", "2-3"),
        ("n2", "4-5"),
    ]


def test_heterogeneous_largest_first():
    nodes = [
        {"rank": 0, "hostname": "n0", "cores": "0-1", "gpus": ""},
        {"rank": 1, "hostname": "n1", "cores": "0-3", "gpus": "0"},
    ]
    out = assign({"small": (1, 0, 0), "gpu": (3, 1, 0), "other": (1, 0, 0)}, nodes)
    assert out["gpu"].hostname == "n1" and out["gpu"].gpus == "0"
    assert {out["small"].hostname, out["other"].hostname} <= {"n0", "n1"}


def test_too_small_is_reported():
    with pytest.raises(AssignmentError):
        assign({"a": (4, 0, 0)}, [{"rank": 0, "hostname": "n0", "cores": "0-1", "gpus": ""}])


def test_memory_is_split_too():
    nodes = [{"rank": 0, "hostname": "n0", "cores": "0-3", "gpus": "", "memory_mib": 1024},
             {"rank": 1, "hostname": "n1", "cores": "0-3", "gpus": "", "memory_mib": 4096}]
    out = assign({"a": (1, 0, 2048), "b": (1, 0, 2048), "c": (1, 0, 512)}, nodes)
    assert out["a"].hostname == out["b"].hostname == "n1" and out["c"].hostname == "n0"
    with pytest.raises(AssignmentError, match="MiB"):
        assign({"a": (1, 0, 2048)}, nodes[:1])


def test_kinds_give_each_pod_its_own_shape_where_first_fit_on_totals_fails():
    # two 1-core + 1024 MiB slots landed on n0, one 2-core slot on n1
    kinds = {
        (1, 0, 1024): [
            {"rank": 0, "hostname": "n0", "cores": "0-1", "gpus": "", "memory_mib": 2048}
        ],
        (2, 0, 0): [{"rank": 1, "hostname": "n1", "cores": "4-5", "gpus": "", "memory_mib": 0}],
    }
    pods = {"x": (2, 0, 0), "y1": (1, 0, 1024), "y2": (1, 0, 1024)}
    totals = [node for nodes in kinds.values() for node in nodes]
    with pytest.raises(AssignmentError):
        assign(pods, totals)  # the 2-core pod takes n0's cores first
    out = assign_kinds(pods, kinds)
    assert out["x"] == PodSlot(1, "n1", "4-5", "")
    assert sorted((out[u].hostname, out[u].cores) for u in ("y1", "y2")) == [
        ("n0", "0"),
        ("n0", "1"),
    ]
    with pytest.raises(AssignmentError, match="no slots of shape"):
        assign_kinds({"z": (3, 0, 0)}, kinds)
