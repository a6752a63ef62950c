"""The node agent's Prometheus metrics (served by fluxnode.agent.kube.health)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rank = Gauge(
            "fluxnode_agent_rank",
            "This node's broker rank (-1: not in the overlay)",
            registry=self.registry,
        )
        self.size = Gauge(
            "fluxnode_agent_overlay_size", "Number of ranks in the rank map", registry=self.registry
        )
        self.broker_up = Gauge(
            "fluxnode_agent_broker_up",
            "1 if this node's broker process runs",
            registry=self.registry,
        )
        self.broker_starts = Counter(
            "fluxnode_agent_broker_starts", "Broker processes started", registry=self.registry
        )
        self.broker_crashes = Counter(
            "fluxnode_agent_broker_crashes",
            "Broker processes that exited unexpectedly",
            registry=self.registry,
        )
        self.renders = Counter(
            "fluxnode_agent_config_renders", "broker.toml files written", registry=self.registry
        )
        self.node_events = Counter(
            "fluxnode_agent_node_events",
            "Node changes seen by the informer",
            registry=self.registry,
        )
        self.passes = Counter(
            "fluxnode_agent_control_loop_passes",
            "Turns of the control loop (each reconciles the node with the cluster)",
            registry=self.registry,
        )
        self.rank.set(-1)
