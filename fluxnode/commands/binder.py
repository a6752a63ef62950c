"""`fluxnode binder`: the Deployment's container, placing pods through the lead broker.

Validates the options, loads the Kubernetes client configuration, starts a
`Binder` (scheduler/binder/binder.py) and runs until SIGTERM. Option names and
defaults are the manifests' (daemonset/binder.yaml): they do not change.
"""

from __future__ import annotations

import gc
import logging
import os
import signal

import click

from fluxnode.agent.kube.api_client import KubeConfigError, load_api_client
from fluxnode.agent.logs import JsonFormatter, setup_logging
from fluxnode.commands.common import given_as
from fluxnode.scheduler.binder.binder import Binder
from fluxnode.scheduler.binder.config import BinderConfig
from fluxnode.scheduler.policies.policy import POLICIES

log = logging.getLogger("fluxnode.binder")


@click.command()
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    type=click.Path(dir_okay=False),
    help="Kubeconfig (default: $KUBECONFIG, else in-cluster).",
)
@click.option(
    "--uri",
    envvar="FLUXNODE_URI",
    help="Lead broker URI: tcp://HOST:PORT or local://PATH "
    "(default: rank 0 from --rank-configmap).",
)
@click.option(
    "--rank-configmap",
    default="fluxnode/fluxnode-ranks",
    show_default=True,
    help="NAMESPACE/NAME of the agents' rank map.",
)
@click.option(
    "--queue-limits",
    default="fluxnode/fluxnode-queues",
    show_default=True,
    help="NAMESPACE/NAME of the ConfigMap of queue limits (key queues.yaml; docs/workloads.md); "
    "empty: no limits.",
)
@click.option("--broker-port", default=8050, show_default=True, type=click.IntRange(1, 65535),
              help="TBON port of rank 0 when the URI comes from --rank-configmap.")
@click.option(
    "--curve-cert", type=click.Path(dir_okay=False), help="CURVE certificate for a tcp:// URI."
)
@click.option(
    "--scheduler-name", default="fluxnode", show_default=True, help="spec.schedulerName to serve."
)
@click.option("--policy", default="first", show_default=True, help="Match policy for groups.")
@click.option("--bind-workers", default=16, show_default=True, type=click.IntRange(1, 256),
              help="Threads writing pod bindings to the API server.")
@click.option(
    "--alloc-batch",
    default=64,
    show_default=True,
    type=click.IntRange(1, 1024),
    help="Groups asked for in one sched.alloc round trip.",
)
@click.option(
    "--reserve-depth",
    default=1,
    show_default=True,
    type=click.IntRange(0, 64),
    help="Blocked groups that get a reservation.",
)
@click.option(
    "--resync",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds between forced retries.",
)
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True,
              help="Bind only while holding the Lease (one active binder of several).")
@click.option("--lease-namespace", default="kube-system", show_default=True,
              help="Namespace of the leader election Lease.")
@click.option("--lease-name", default="fluxnode-binder", show_default=True,
              help="Name of the leader election Lease.")
@click.option("--lease-duration", default=15.0, show_default=True, type=float,
              help="Seconds a Lease not renewed stays held.")
@click.option("--renew-deadline", default=10.0, show_default=True, type=float,
              help="Seconds the leader keeps trying to renew before it stops binding.")
@click.option("--retry-period", default=2.0, show_default=True, type=float,
              help="Seconds between tries to acquire or renew the Lease.")
@click.option("--identity", default="",
              help="Leader election identity (default: $POD_NAME, else hostname-pid).")
@click.option("--http-host", default="0.0.0.0", show_default=True,
              help="Address of the health and metrics server.")
@click.option(
    "--http-port",
    default=10259,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Health and metrics port (0: any free port).",
)
@click.option("--webhook-port", type=click.IntRange(0, 65535), default=None,
              help="Serve the admission webhook (HTTPS) on this port (0: any free port; "
              "default: no webhook).")
@click.option("--webhook-host", default="0.0.0.0", show_default=True,
              help="Address of the admission webhook.")
@click.option("--webhook-secret", default="fluxnode/fluxnode-webhook-cert", show_default=True,
              help="NAMESPACE/NAME of the Secret holding the webhook's CA and certificate.")
@click.option("--webhook-config", default="fluxnode", show_default=True,
              help="MutatingWebhookConfiguration whose caBundle is kept current.")
@click.option("--webhook-service", default="fluxnode-webhook", show_default=True,
              help="Service (in the Secret's namespace) the certificate names.")
@click.option("--webhook-cert-name", multiple=True,
              help="Another DNS name or IP address for the certificate (repeatable).")
@click.option("--webhook-cert-dir", type=click.Path(file_okay=False), default="",
              help="Directory for the served certificate and key, mode 0600 "
              "(default: a private temporary directory).")
@click.option("--webhook-cert-check", default=300.0, show_default=True,
              type=click.FloatRange(1.0),
              help="Seconds between checks of the certificate Secret and the caBundle.")
@click.option("--webhook-cert-lifetime", default=365 * 86400.0, show_default=True,
              type=click.FloatRange(3.0),
              help="Seconds the webhook's serving certificate is valid (renewed at two thirds).")
@click.option("--webhook-ca-lifetime", default=5 * 365 * 86400.0, show_default=True,
              type=click.FloatRange(3.0),
              help="Seconds the webhook's CA is valid (renewed at two thirds; at least "
              "--webhook-cert-lifetime).")
@click.option("--podgroup-discovery", default=30.0, show_default=True,
              type=click.FloatRange(1.0),
              help="Seconds between discoveries of the PodGroup CRDs (scheduler-plugins', "
              "Volcano's) whose objects size groups.")
@click.option("--resources-configmap", default="fluxnode/fluxnode-resources", show_default=True,
              help="NAMESPACE/NAME of the ConfigMap the lead replica publishes the leader's "
              "resource list into, for `kubectl fluxnode resources` (\"\": none).")
@click.option("--resources-interval", default=5.0, show_default=True,
              type=click.FloatRange(0.5),
              help="Least seconds between two asks of the leader for its resource list.")
@click.option("--resources-refresh", default=60.0, show_default=True,
              type=click.FloatRange(1.0),
              help="Most seconds between two writes of the resource list (even unchanged).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Least severe log level written (JSON lines on stderr).",
)
def binder(
    kubeconfig,
    uri,
    rank_configmap,
    queue_limits,
    broker_port,
    curve_cert,
    scheduler_name,
    policy,
    bind_workers,
    alloc_batch,
    reserve_depth,
    resync,
    leader_elect,
    lease_namespace,
    lease_name,
    lease_duration,
    renew_deadline,
    retry_period,
    identity,
    http_host,
    http_port,
    webhook_port,
    webhook_host,
    webhook_secret,
    webhook_config,
    webhook_service,
    webhook_cert_name,
    webhook_cert_dir,
    webhook_cert_check,
    webhook_cert_lifetime,
    webhook_ca_lifetime,
    podgroup_discovery,
    resources_configmap,
    resources_interval,
    resources_refresh,
    log_level,
):
    """Bind pods to nodes with the leader's graph scheduler.

    It places the pods whose spec.schedulerName is --scheduler-name through the lead
    broker's scheduler service and binds them where it placed them.
    """
    setup_logging(log_level, JsonFormatter())
    if policy not in POLICIES:
        raise click.ClickException(f"--policy: unknown {policy!r} (one of {', '.join(POLICIES)})")
    if not uri and "/" not in rank_configmap:
        raise click.ClickException(
            f"--rank-configmap: expected NAMESPACE/NAME, got {rank_configmap!r}"
        )
    if queue_limits and not _namespaced(queue_limits):
        raise click.ClickException(
            f"--queue-limits: expected NAMESPACE/NAME, got {queue_limits!r}")
    if webhook_port is not None and not _namespaced(webhook_secret):
        raise click.ClickException(
            f"--webhook-secret: expected NAMESPACE/NAME, got {webhook_secret!r}")
    if webhook_ca_lifetime < webhook_cert_lifetime:
        raise click.ClickException(
            f"--webhook-ca-lifetime {webhook_ca_lifetime:g} is shorter than "
            f"--webhook-cert-lifetime {webhook_cert_lifetime:g} (seconds)")
    if resources_configmap and not _namespaced(resources_configmap):
        raise click.ClickException(
            f"--resources-configmap: expected NAMESPACE/NAME, got {resources_configmap!r}")
    if not retry_period < renew_deadline < lease_duration:
        raise click.ClickException("need --retry-period < --renew-deadline < --lease-duration")
    try:
        api_client = load_api_client(kubeconfig)
    except KubeConfigError as exc:
        raise click.ClickException(kube_config_error(kubeconfig, exc.reason)) from None
    config = BinderConfig(
        scheduler_name=scheduler_name,
        uri=uri,
        rank_configmap=rank_configmap,
        queue_limits=queue_limits,
        broker_port=broker_port,
        curve_cert=curve_cert,
        policy=policy,
        bind_workers=bind_workers,
        alloc_batch=alloc_batch,
        reserve_depth=reserve_depth,
        resync=resync,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        identity=identity,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        http_host=http_host,
        http_port=http_port,
        podgroup_discovery=podgroup_discovery,
        resources_configmap=resources_configmap,
        resources_interval=resources_interval,
        resources_refresh=resources_refresh,
        **webhook_settings(click.get_current_context().params),
    )
    try:
        b = Binder(api_client, config).start()
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    if b.health is not None:
        log.info(
            "binder %s serving /healthz /readyz /metrics on %s:%d",
            b.identity,
            http_host,
            b.health.port,
        )
    if b.webhook is not None:
        log.info("binder %s serving the admission webhook on %s:%d", b.identity, webhook_host,
                 b.webhook.port)
    signal.signal(signal.SIGTERM, lambda *_: b.stop_event.set())
    frozen = False
    try:
        while not b.stop_event.wait(1):
            if not frozen and b.reconciled:
                # Everything alive once started (imported modules, the client's thousands
                # of model classes, the first list of pods and nodes) is moved out of the
                # cyclic GC's sight: each full collection would walk it again, and those
                # took a quarter of the binder's CPU in a burst. Frozen objects are still
                # freed by reference counting when dropped.
                gc.freeze()
                frozen = True
    except KeyboardInterrupt:
        pass
    b.stop()


def webhook_settings(params: dict) -> dict:
    """The --webhook-* options as the BinderConfig fields of the same names."""
    settings = {k: v for k, v in params.items() if k.startswith("webhook_")}
    settings["webhook_cert_names"] = tuple(settings.pop("webhook_cert_name"))
    return settings


def _namespaced(text: str) -> bool:
    namespace, _, name = text.partition("/")
    return bool(namespace and name and "/" not in name)


def kube_config_error(kubeconfig: str | None, reason: str) -> str:
    """Where the configuration was looked for, in the user's words: the client's own message
    ("Invalid kube-config file. No configuration found.") says neither which file nor why."""
    reason = " ".join(line.strip() for line in reason.splitlines())  # a YAML error's lines
    if kubeconfig:
        source = given_as("kubeconfig", "--kubeconfig", "KUBECONFIG")
        paths = [p for p in kubeconfig.split(os.pathsep) if p]
        if not any(os.path.exists(p) for p in paths):
            reason = "no such file" if len(paths) == 1 else "none of these files exists"
        return f"cannot load Kubernetes configuration: {source} {kubeconfig}: {reason}"
    return (f"cannot load Kubernetes configuration: {reason} (outside a pod, pass --kubeconfig "
            "PATH or set KUBECONFIG; the default is ~/.kube/config)")
