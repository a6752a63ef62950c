"""The binder's settings, one dataclass so the command line, tests and benches build it alike.

Defaults match the ``fluxnode binder`` options; the command line is the only place
that validates them (a test passing odd values gets what it asked for).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class BinderConfig:
    scheduler_name: str = "fluxnode"
    uri: str | None = None  # None: find rank 0 through the agents' rank map (rank_configmap)
    rank_configmap: str = "fluxnode/fluxnode-ranks"
    # NAMESPACE/NAME of the ConfigMap of queue limits the FluxJob loop watches (queue_limits.py);
    # empty: no limits
    queue_limits: str = "fluxnode/fluxnode-queues"
    broker_port: int = 8050
    curve_cert: str | None = None
    policy: str = "first"
    bind_workers: int = 16
    reserve_depth: int = 1
    queue_depth: int = (
        32  # busy attempts per cycle before waiting for a change (a batch is finished)
    )
    alloc_batch: int = 64  # groups asked for in one sched.alloc round trip
    resync: float = 5.0
    leader_elect: bool = True
    lease_namespace: str = "kube-system"
    lease_name: str = "fluxnode-binder"
    identity: str = ""  # empty: $POD_NAME (set by the manifest), else hostname-pid (the binder)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    http_host: str = "0.0.0.0"
    http_port: int | None = 10259
    watch_timeout: int = 300
    rpc_timeout: float = 10.0  # a sched.* answer slower than this means the leader is gone
    report_delay: float = 1.0  # an incomplete group says it waits only after this long
    # the admission webhook (issue 30; docs/binder.md "The admission webhook"): off when
    # webhook_port is None, else served on it (0: any free port) by every replica
    webhook_port: int | None = None
    webhook_host: str = "0.0.0.0"
    webhook_secret: str = "fluxnode/fluxnode-webhook-cert"  # NAMESPACE/NAME of its certificates
    webhook_config: str = "fluxnode"  # the MutatingWebhookConfiguration whose caBundle is kept
    webhook_service: str = "fluxnode-webhook"  # in the Secret's namespace: the certificate's names
    webhook_cert_names: tuple[str, ...] = ()  # more names (or IPs) for the certificate
    webhook_cert_dir: str = ""  # empty: a private temporary directory
    webhook_cert_check: float = 300.0  # seconds between checks of the Secret and the caBundle
    webhook_cert_lifetime: float = 365 * 86400.0  # seconds a serving certificate is valid
    webhook_ca_lifetime: float = 5 * 365 * 86400.0  # seconds the webhook's CA is valid
    podgroup_discovery: float = 30.0  # seconds between discoveries of the PodGroup CRDs
    # the leader's resource list for `kubectl fluxnode resources` (resource_publisher.py):
    # NAMESPACE/NAME of the ConfigMap the lead replica patches ("" : not published), the
    # least seconds between two asks of the leader, and the most between two writes
    resources_configmap: str = "fluxnode/fluxnode-resources"
    resources_interval: float = 5.0
    resources_refresh: float = 60.0

    def __post_init__(self) -> None:
        # The Lease holder names the pod, so `kubectl get lease` points at it; outside a pod
        # (no POD_NAME) the binder falls back to hostname-pid.
        if not self.identity:
            self.identity = os.environ.get("POD_NAME", "")
