"""Broker module for bench/binder.py: the scheduler service over simulated nodes.

A real broker loads this instead of fluxnode.scheduler.service; it hands the
real SchedService an R describing $FLUXNODE_BENCH_NODES nodes named
sim0..simN-1 ($FLUXNODE_BENCH_CORES cores each), so the binder can be measured
on 1,000 nodes without running 1,000 broker processes. Everything else (RPCs
over the overlay, journal, graph) is the real thing.
"""

from __future__ import annotations

import os

from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.service.module import SchedService


class SimulatedNodes:
    def __init__(self, broker, nodes: int, cores: int):
        self._broker = broker
        self.rank, self.size, self.attrs = broker.rank, broker.size, broker.attrs
        self.statedir, self.log = broker.statedir, broker.log
        self._R = build_R(
            [
                NodeResources(
                    rank=i, hostname=f"sim{i}", cores=list(range(cores)), memory_mib=65536
                )
                for i in range(nodes)
            ]
        )

    def register(self, topic, handler):
        self._broker.register(topic, handler)

    def resources(self) -> dict:
        return self._R

    def down_ranks(self) -> list[int]:
        return []

    def on_resources_changed(self, callback) -> None:
        pass  # the simulated machine never changes


def load(broker):
    nodes = int(os.environ.get("FLUXNODE_BENCH_NODES", "1000"))
    cores = int(os.environ.get("FLUXNODE_BENCH_CORES", "8"))
    return SchedService(SimulatedNodes(broker, nodes, cores))
