"""`fluxnode agent`: the DaemonSet's container, running this node's broker for the overlay.

Validates the options the way the broker would read them (``--topo``, ``--tbon``
settings rendered into a throw-away broker.toml), then runs a `NodeAgent`
(agent/node/agent.py) until SIGTERM. Option names, environment variables and
defaults are the manifests' (daemonset/daemonset.yaml): they do not change.
"""

from __future__ import annotations

import logging
import sys
import tomllib
from pathlib import Path

import click

from fluxnode.agent.logs import LogfmtFormatter, setup_logging
from fluxnode.agent.node.agent import API_WAIT, AgentExit, AgentOptions, NodeAgent
from fluxnode.broker_conf.render import RenderError, render_broker_toml
from fluxnode.broker_conf.topology import Topology, TopologyError


def _toml_scalar(text: str) -> object:
    """``30s`` stays a string, ``2`` becomes 2, ``true`` True (as TOML would read them)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    required=True,
    help="this node's name (downward API spec.nodeName)",
)
@click.option(
    "--namespace",
    envvar="POD_NAMESPACE",
    default="fluxnode",
    help="namespace of the Secret and rank ConfigMap",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="kubeconfig file (default: in-cluster config)",
)
@click.option(
    "--selector", "-l", default=None, help="label selector choosing the nodes that run brokers"
)
@click.option(
    "--include-control-plane", is_flag=True,
    help="also run brokers on control-plane nodes (only without --daemonset)",
)
@click.option(
    "--daemonset", envvar="FLUXNODE_DAEMONSET", default=None, metavar="NAME",
    help="the agents' DaemonSet (in --namespace): a node gets a rank exactly where it runs an "
    "agent pod (default $FLUXNODE_DAEMONSET; set by the manifest)",
)
@click.option("--host-dir", type=click.Path(path_type=Path), default=Path("/etc/fluxnode"),
              help="host directory for broker.toml, R.json and curve.cert")
@click.option("--run-dir", type=click.Path(path_type=Path), default=Path("/run/fluxnode"),
              help="host directory for the broker pid, URI and local socket")
@click.option("--bin-dir", type=click.Path(path_type=Path), default=Path("/opt/fluxnode/bin"),
              help="host directory for the fluxnode-connect script")
@click.option("--state-dir", type=click.Path(path_type=Path), default=Path("/var/lib/fluxnode"),
              help="broker statedir (scheduler journal on the leader)")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8050,
    help="broker TBON port (node annotation fluxnode.io/broker-port overrides)",
)
@click.option("--bind-address", default="0.0.0.0", help="address brokers bind their TBON socket to")
@click.option("--topo", default="kary:2", help="TBON topology (kary:K or binomial)")
@click.option(
    "--tbon",
    "tbon",
    multiple=True,
    metavar="KEY=VALUE",
    help="extra [tbon] setting for broker.toml (flux-config-tbon(5)), e.g. torpid_max=30s",
)
@click.option("--allow-exec", is_flag=True,
              help="write [exec] allow = true: let `fluxnode exec` run commands on the nodes")
@click.option(
    "--secret-name", default="fluxnode-curve", help="Secret holding the cluster's CURVE certificate"
)
@click.option(
    "--rank-configmap", default="fluxnode-ranks", help="ConfigMap holding the shared rank map"
)
@click.option("--health-port", type=click.IntRange(0, 65535), default=9464,
              help="port of /healthz, /readyz and /metrics (0: any free port)")
@click.option("--no-health", is_flag=True, help="do not serve the health endpoint")
@click.option("--health-address", default="0.0.0.0", help="address of the health endpoint")
@click.option(
    "--restart-backoff",
    "backoff",
    type=(float, float),
    default=(1.0, 30.0),
    metavar="MIN MAX",
    help="broker restart backoff bounds in seconds",
)
@click.option(
    "--writer-grace",
    type=click.FloatRange(min=0),
    default=10.0,
    metavar="SEC",
    help="take over rank-map updates when the designated writer (lowest Ready rank) has not "
    "written a needed change for this long",
)
@click.option("--api-wait", type=click.FloatRange(min=0), default=API_WAIT, metavar="SEC",
              help="how long to retry an unreachable Kubernetes API at start-up before exiting")
@click.option("--verbose", "-v", is_flag=True, help="debug logging")
def agent(
    node_name: str,
    namespace: str,
    kubeconfig: str | None,
    selector: str | None,
    include_control_plane: bool,
    daemonset: str | None,
    host_dir: Path,
    run_dir: Path,
    bin_dir: Path,
    state_dir: Path,
    port: int,
    bind_address: str,
    topo: str,
    tbon: tuple[str, ...],
    allow_exec: bool,
    secret_name: str,
    rank_configmap: str,
    health_port: int,
    no_health: bool,
    health_address: str,
    backoff: tuple[float, float],
    writer_grace: float,
    api_wait: float,
    verbose: bool,
) -> None:
    """Run this node's broker under Kubernetes (the DaemonSet).

    This is the DaemonSet container's command: it renders the node's broker.toml, starts
    its broker and keeps both in step with the cluster's nodes.
    """
    setup_logging(logging.DEBUG if verbose else logging.INFO, LogfmtFormatter())
    if daemonset and include_control_plane:
        logging.getLogger("fluxnode.agent").warning(
            "--include-control-plane has no effect with --daemonset %s: the DaemonSet's "
            "nodeSelector, affinity and tolerations decide whether control-plane nodes get a rank",
            daemonset,
        )
    if not (topo.startswith("kary:") or topo == "binomial"):
        raise click.BadParameter(
            f"{topo!r}: the agent supports kary:K and binomial", param_hint="--topo"
        )
    try:
        Topology.from_spec(topo, 1)
    except (TopologyError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--topo") from None
    tbon_pairs = []
    for item in tbon:
        key, sep, value = item.partition("=")
        if not sep or not key or key == "topo":
            raise click.BadParameter(
                f"{item!r}: expected KEY=VALUE (topo has its own option)", param_hint="--tbon"
            )
        tbon_pairs.append((key.strip(), _toml_scalar(value.strip())))
    try:
        render_broker_toml(["check"], curve_cert="/c", port=port, topo=topo, tbon=dict(tbon_pairs))
    except RenderError as exc:
        raise click.BadParameter(str(exc), param_hint="--tbon") from None
    if backoff[0] <= 0 or backoff[1] < backoff[0]:
        raise click.BadParameter("need 0 < MIN <= MAX", param_hint="--restart-backoff")
    opts = AgentOptions(
        node_name=node_name,
        namespace=namespace,
        kubeconfig=kubeconfig,
        selector=selector,
        include_control_plane=include_control_plane,
        daemonset=daemonset or None,
        host_dir=host_dir,
        run_dir=run_dir,
        bin_dir=bin_dir,
        state_dir=state_dir,
        port=port,
        bind_address=bind_address,
        topo=topo,
        secret_name=secret_name,
        rank_configmap=rank_configmap,
        health_port=None if no_health else health_port,
        health_address=health_address,
        backoff_min=backoff[0],
        backoff_max=backoff[1],
        writer_grace=writer_grace,
        tbon=tuple(tbon_pairs),
        allow_exec=allow_exec,
        api_wait=api_wait,
    )
    try:
        code = NodeAgent(opts).run()
    except AgentExit as exc:
        print(f"fluxnode agent: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        print(f"fluxnode agent: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code)
