"""Prometheus metrics of the binder (names follow kube-scheduler's where one exists)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass
class BinderMetrics:
    """One registry per binder, so tests and several binders in one process do not collide."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.attempts = Counter(
            "fluxnode_binder_schedule_attempts", "Group scheduling attempts by result "
            "(scheduled, busy, reserved, unschedulable, error).", ["result"], registry=r)
        self.bindings = Counter(
            "fluxnode_binder_pod_bindings",
            "Pod bindings by result (bound, failed).",
            ["result"],
            registry=r,
        )
        self.latency = Histogram(
            "fluxnode_binder_pod_scheduling_duration_seconds",
            "Seconds from pod creation to a successful binding.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.attempt_duration = Histogram(
            "fluxnode_binder_scheduling_attempt_duration_seconds",
            "Seconds spent in one sched.alloc round trip.", buckets=LATENCY_BUCKETS, registry=r)
        self.pending_groups = Gauge(
            "fluxnode_binder_pending_groups", "Complete groups waiting in the queue.", registry=r)
        self.pending_pods = Gauge(
            "fluxnode_binder_pending_pods",
            "Our pods not yet placed (incl. incomplete groups).",
            registry=r,
        )
        self.events_dropped = Counter(
            "fluxnode_binder_events_dropped", "Events not posted because the queue of "
            "Events to post was full (event_recorder.py).", registry=r)
        self.leader = Gauge(
            "fluxnode_binder_leader", "1 while this replica holds the lease.", registry=r
        )
