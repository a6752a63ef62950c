"""Six nodes that differ in every way R's JGF and the service graph show, for the tests
that hold both to what main built before the leader kept R as its nodes (issue 32).

A rank left out (3, 6), a host name without a number, 1 to 4 sockets, cores and GPUs placed
on sockets out of order, memory none, 1 MiB, a few GiB and 256 GiB (128 granules).
"""

from __future__ import annotations

from fluxnode.broker_conf.rv1 import NodeResources

UNLIKE_NODES = [
    NodeResources(rank=0, hostname="leader", cores=[0, 1, 2, 3], memory_mib=7936),
    NodeResources(rank=1, hostname="node1", cores=[0, 1, 2, 3], gpus=[0, 1], sockets=2,
                  memory_mib=65536),
    NodeResources(rank=2, hostname="node2", cores=[3, 1, 2, 0, 5, 4], sockets=3,
                  core_sockets=[2, 0, 1, 0, 2, 1], gpus=[1, 0], gpu_sockets=[2, 0]),
    NodeResources(rank=4, hostname="node04", cores=list(range(8)), memory_mib=1),
    NodeResources(rank=5, hostname="gpu-a17", cores=[7], gpus=[0, 1, 2, 3], sockets=2,
                  memory_mib=262144),
    NodeResources(rank=7, hostname="node7", cores=[0, 1], sockets=4, memory_mib=100),
]
