"""R entries from node capacity (agent/node_resources.py), read with the one quantity parser."""

from __future__ import annotations

import logging

from fluxnode.agent.node.resources import node_resources


def node(capacity: dict) -> dict:
    return {"metadata": {"name": "n1"}, "status": {"capacity": capacity}}


def test_capacity_becomes_cores_gpus_and_memory():
    res = node_resources(3, node({"cpu": "3500m", "memory": "1.5Gi", "nvidia.com/gpu": "2"}))
    assert (res.rank, res.hostname, res.cores, res.gpus, res.memory_mib) == (
        3,
        "n1",
        [0, 1, 2],
        [0, 1],
        1536,
    )


def test_unreadable_capacity_counts_as_zero_and_says_which(caplog):
    with caplog.at_level(logging.WARNING, logger="fluxnode.agent"):
        res = node_resources(0, node({"cpu": "4", "memory": "lots"}))
    assert res.memory_mib == 0 and res.cores == [0, 1, 2, 3]
    assert "node n1 status.capacity.memory: invalid quantity 'lots'" in caplog.text


def test_missing_capacity_means_one_core_and_nothing_else():
    res = node_resources(0, {"metadata": {"name": "n1"}})
    assert (res.cores, res.gpus, res.memory_mib) == ([0], [], 0)
