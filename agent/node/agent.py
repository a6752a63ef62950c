"""`fluxnode agent`: the per-node agent the DaemonSet runs.

It keeps this node's broker in step with the cluster: the CURVE Secret (created once
per cluster), the shared rank map (ConfigMap), the rendered broker.toml / R / connect
script on the host, and the broker process itself. One control loop reacts to node
and rank-map changes from two informers; everything it needs to decide is recomputed
from that state on each turn, so a missed turn is repaired by the next.
"""

from __future__ import annotations

import json
import logging
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2
from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.agent.broker.message import NODEID_ANY
from fluxnode.agent.kube.agent_api import AgentApi
from fluxnode.agent.kube.api_error import KubeAccessError, api_errors
from fluxnode.agent.kube.backoff import Backoff
from fluxnode.agent.kube.health import HealthServer
from fluxnode.agent.kube.informer import EventHandler, Informer, wait_synced
from fluxnode.agent.kube.kubeconfig import load_target
from fluxnode.agent.kube.node_affinity import NodeAffinityError
from fluxnode.agent.kube.rest import KubeRest
from fluxnode.agent.node import host_files, overlay_config
from fluxnode.agent.node import resources as node_resources
from fluxnode.agent.node.events import NodeEvents
from fluxnode.agent.node.host_files import HostFiles, write_atomic
from fluxnode.agent.node.metrics import AgentMetrics
from fluxnode.agent.node.node_view import node_view
from fluxnode.agent.node.overlay_config import OverlaySettings
from fluxnode.agent.node.ranks import RankStore
from fluxnode.agent.node.secret import SecretError, ensure_curve_secret
from fluxnode.agent.node.selection import NodeSelection, daemon_placement, is_ready
from fluxnode.agent.node.supervisor import BrokerSupervisor
from fluxnode.broker_conf import certificate
from urllib3.exceptions import HTTPError

NODE_LIST_PAGE = 100
"""Nodes per list request: a page of whole Nodes is parsed before `node_view` keeps its
small part, and 500 of them (the informer's default) would leave the agent about 17 MiB
larger for good with 5,000 Nodes (bench/agent_nodes_memory.py, issue 32)."""

LIVENESS_STALE = 60.0
"""Seconds without a control-loop pass before /healthz fails and the kubelet restarts us."""

log = logging.getLogger("fluxnode.agent")

SYNC_TIMEOUT = 60.0
API_WAIT = 60.0  # how long to wait for an unreachable API server at start-up
IDLE_TICK = 2.0  # longest wait of the control loop for an event


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass(frozen=True)
class AgentOptions:
    node_name: str
    namespace: str
    kubeconfig: str | None
    selector: str | None
    include_control_plane: bool
    host_dir: Path
    run_dir: Path
    bin_dir: Path
    state_dir: Path
    port: int
    bind_address: str
    topo: str
    secret_name: str
    rank_configmap: str
    health_port: int | None
    health_address: str
    backoff_min: float
    backoff_max: float
    writer_grace: float = 10.0
    daemonset: str | None = None  # membership follows this DaemonSet's placement (selection.py)
    tbon: tuple[tuple[str, object], ...] = ()
    allow_exec: bool = False  # [exec] allow in broker.toml (`fluxnode exec`)
    api_wait: float = API_WAIT


class AgentExit(Exception):
    """Stop the agent with this one-line message and a non-zero status."""


class NodeAgent:
    def __init__(self, opts: AgentOptions):
        self.opts = opts
        self.files = HostFiles(opts.host_dir, opts.run_dir, opts.bin_dir)
        self.selection = NodeSelection(include_control_plane=opts.include_control_plane)
        self.settings = OverlaySettings(
            port=opts.port,
            bind_address=opts.bind_address,
            topo=opts.topo,
            cert_path=str(self.files.cert),
            tbon=opts.tbon,
            allow_exec=opts.allow_exec,
        )
        self.supervisor = BrokerSupervisor(
            self.files,
            opts.node_name,
            opts.state_dir,
            Backoff(opts.backoff_min, opts.backoff_max, jitter=False),
        )
        self.metrics = AgentMetrics()
        self.heartbeat = time.monotonic()
        self.events: queue.Queue = queue.Queue()
        self._abort = threading.Event()  # set on a signal or a fatal informer error
        self.rank: int | None = None
        self.status = "starting"
        self._last_status = ""
        self._starts_seen = self._crashes_seen = 0
        self._render_key: tuple | None = None
        self._r_key: tuple | None = None
        self._pending_since: float | None = None
        self._pending_for = None
        self.record_event = lambda reason, note, type_="Normal": None

    # -- setup -----------------------------------------------------------------------------
    def _connect(self) -> None:
        self.api = AgentApi(KubeRest(load_target(self.opts.kubeconfig)))
        self.apps = self.api
        events = NodeEvents(self.api, self.opts.namespace, self.opts.node_name)
        self.supervisor.notify = events.record
        self.record_event = events.record

    def _install_certificate(self) -> None:
        """Get the CURVE Secret; an unreachable API is retried for a while (nodes boot before
        it)."""
        deadline = time.monotonic() + self.opts.api_wait
        delay = 0.5
        while True:
            try:
                cert = ensure_curve_secret(self.api, self.opts.namespace, self.opts.secret_name)
                break
            except SecretError as exc:
                raise AgentExit(str(exc)) from None
            except (HTTPError, OSError, *api_errors(), KubeAccessError) as exc:
                if isinstance(exc, KubeAccessError) and "permission denied" in str(exc):
                    raise
                if time.monotonic() + delay > deadline or self._abort.is_set():
                    raise AgentExit(
                        "cannot reach the Kubernetes API at "
                        f"{self.api.host}: "
                        f"{_one_line(exc)}"
                    ) from None
                log.warning(
                    "Kubernetes API not reachable yet (%s); retrying in %.1fs",
                    _one_line(exc),
                    delay,
                )
                self._abort.wait(delay)
                delay = min(delay * 2, 5.0)
        self.files.write_cert(certificate.dumps(cert))

    def _render_connect_script(self) -> None:
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("fluxnode.templates", ""),
            autoescape=False,
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
        )
        text = env.get_template("connect.sh.j2").render(
            node=self.opts.node_name, run_dir=str(self.files.run_dir), pid_name=host_files.PID_NAME,
            uri_name=host_files.URI_NAME, cli_path=str(Path(sys.executable).parent))
        try:
            self.files.write_connect_script(text)
        except (
            OSError
        ) as exc:  # e.g. a read-only /usr (Container-Optimized OS): the broker still runs
            log.warning(
                "cannot write the connect script %s: %s; pass a writable --bin-dir "
                "(e.g. /var/lib/fluxnode-bin)",
                self.files.connect_script,
                exc.strerror or exc,
            )

    def _start_informers(self) -> None:
        def changed(what: str) -> EventHandler:
            def handler(kind: str, _obj: object) -> None:
                if what == "nodes":
                    self.metrics.node_events.inc()
                self.events.put(("change", what))

            return handler

        def fatal(exc: Exception) -> None:
            self.events.put(("fatal", exc))
            self._abort.set()

        self.nodes = Informer("nodes", self.api.list_node, changed("nodes"), on_fatal=fatal,
                              transform=node_view, page=NODE_LIST_PAGE,
                              label_selector=self.opts.selector or None).start()
        self.rank_configmaps = Informer(
            "configmaps",
            self.api.list_namespaced_config_map,
            changed("configmaps"),
            on_fatal=fatal,
            namespace=self.opts.namespace,
            field_selector=f"metadata.name={self.opts.rank_configmap}",
        ).start()
        self.rank_store = RankStore(self.api, self.opts.namespace, self.opts.rank_configmap)
        self.daemonsets = None
        if self.opts.daemonset:
            self.daemonsets = Informer(
                "daemonsets",
                self.apps.list_namespaced_daemon_set,
                changed("daemonsets"),
                on_fatal=fatal,
                namespace=self.opts.namespace,
                field_selector=f"metadata.name={self.opts.daemonset}",
            ).start()

    def _live(self) -> tuple[bool, str]:
        age = time.monotonic() - self.heartbeat
        return age < LIVENESS_STALE, f"control loop last ran {age:.1f}s ago"

    def _ready(self) -> tuple[bool, str]:
        if not self.supervisor.wanted:
            # Nothing to run here (node not a member, or NotReady): the agent is where it should
            # be, and an unready pod would stall the DaemonSet's rolling update.
            return True, self.status
        # Why the last broker exited (its last error line), until one answers again: a broker
        # in a crash loop spends most of its time between two starts.
        exited = self.supervisor.exit_reason
        if not self.supervisor.running:
            return False, exited or self.status
        try:
            with Client.connect(self.files.local_uri, timeout=2.0) as c:
                c.rpc("broker.ping", {}, nodeid=NODEID_ANY, timeout=2.0)
        except (ConnectError, RPCError, OSError) as exc:
            text = f"broker pid {self.supervisor.pid} does not answer broker.ping: {exc}"
            return False, f"{text} (before: {exited})" if exited else text
        return True, f"rank {self.rank}, broker pid {self.supervisor.pid}"

    # -- control loop ----------------------------------------------------------------------
    def run(self) -> int:
        health = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        try:
            self.files.prepare()
            self._connect()
            self._install_certificate()
            self._render_connect_script()
            if self.opts.health_port is not None:
                health = HealthServer(
                    self.opts.health_address,
                    self.opts.health_port,
                    self._live,
                    self._ready,
                    self.metrics.registry,
                ).start()
                self._write_health_port(health.port)
            self._start_informers()
            stopping = False
            informers = [self.nodes, self.rank_configmaps]
            if self.daemonsets is not None:
                informers.append(self.daemonsets)
            if not wait_synced(informers, SYNC_TIMEOUT, self._abort.is_set):
                stopping = self._drain(block=False)
                if not stopping:
                    raise AgentExit(
                        f"could not list {', '.join(i.name for i in informers)} within "
                        f"{SYNC_TIMEOUT:.0f}s"
                    )
            while not stopping:
                try:
                    self._reconcile()
                except KubeAccessError:
                    raise
                except (*api_errors(), HTTPError, OSError, RuntimeError) as exc:
                    # Transient (API restarting, conflict storm, disk hiccup): the next turn
                    # retries.
                    self._set_status(
                        f"reconcile failed, will retry: {_one_line(exc)}", logging.WARNING
                    )
                except ValueError as exc:
                    # A rank map someone edited into nonsense: keep what runs, say what to fix.
                    self._set_status(
                        f"ConfigMap {self.opts.namespace}/{self.opts.rank_configmap}: {exc}; "
                        "fix it or delete it (the agents then rebuild it)",
                        logging.ERROR,
                    )
                wait = self.supervisor.tick()
                self.metrics.passes.inc()
                self._publish_metrics()
                self.heartbeat = time.monotonic()
                stopping = self._drain(
                    block=True, timeout=min(wait, IDLE_TICK) if wait else IDLE_TICK
                )
            log.info("agent stopping")
            return 0
        except KubeAccessError as exc:
            raise AgentExit(str(exc)) from None
        finally:
            # A broker with children is killed rather than shut down, so its subtree stays up and
            # rejoins when the agent comes back (rolling update); a leaf says goodbye (offline at
            # once).
            children = self.supervisor.placement.children if self.supervisor.placement else ()
            self.supervisor.stop("agent shutting down", in_place=bool(children))
            if health:
                health.stop()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.events.put(("stop", signum))
        self._abort.set()

    def _write_health_port(self, port: int) -> None:
        write_atomic(self.files.run_dir / "agent.health", f"{port}\n")

    def _drain(self, block: bool, timeout: float = 0.0) -> bool:
        """Take every pending event; True when the agent must stop. Fatal errors raise."""
        stop = False
        try:
            item = self.events.get(timeout=timeout) if block else self.events.get_nowait()
            while True:
                if item[0] == "fatal":
                    raise item[1]
                if item[0] == "stop":
                    stop = True
                item = self.events.get_nowait()
        except queue.Empty:
            pass
        return stop

    def _set_status(self, text: str, level: int = logging.INFO) -> None:
        self.status = text
        if text != self._last_status:
            log.log(level, text)
            self._last_status = text

    def _may_write(self, nodes: dict[str, dict]):
        """Designated writer of the rank map: the agent of the lowest Ready rank (see ranks.py)."""
        def decide(stored, wanted) -> bool:
            ready = [r for h, r in stored.live().items() if h in nodes and is_ready(nodes[h])]
            if not ready or stored.hosts[min(ready)] == self.opts.node_name:
                self._pending_since = None
                return True
            if self._pending_since is None or self._pending_for != wanted:
                self._pending_since, self._pending_for = time.monotonic(), wanted
            return time.monotonic() - self._pending_since >= self.opts.writer_grace

        return decide

    def _selection(self) -> NodeSelection | None:
        """Who may hold a rank now; None (and a status saying why) when the DaemonSet to
        follow is missing or its template cannot be read: then nothing is changed."""
        if self.daemonsets is None:
            return self.selection
        key = f"{self.opts.namespace}/{self.opts.daemonset}"
        ds = self.daemonsets.get(key)
        if ds is None:
            self._set_status(f"DaemonSet {key} not found: membership unchanged until it exists",
                             logging.WARNING)
            return None
        try:
            daemon = daemon_placement(ds)
        except NodeAffinityError as exc:
            self._set_status(f"DaemonSet {key}: {exc}; membership unchanged", logging.ERROR)
            return None
        if daemon != self.selection.daemon:
            self.selection = NodeSelection(self.opts.include_control_plane, daemon)
        return self.selection

    def _why_not(self, me: dict | None, selection: NodeSelection) -> str:
        if me is None:
            what = f"outside --selector {self.opts.selector}" if self.opts.selector else "missing"
            return f"no Node {self.opts.node_name} ({what})"
        reason = selection.reason_against(me) or "not admitted"
        if self.opts.daemonset:
            return f"DaemonSet {self.opts.namespace}/{self.opts.daemonset}: {reason}"
        return reason

    def _reconcile(self) -> None:
        nodes = self.nodes.snapshot(copy_objects=False)  # views are only read (node_view.py)
        selection = self._selection()
        if selection is None:
            return
        members = selection.members(nodes)
        view_rv = self.nodes.resource_version_number
        rank_map = self.rank_store.reconcile(
            set(members),
            selection.joinable(nodes),
            view_rv,
            self.rank_configmaps.get(f"{self.opts.namespace}/{self.opts.rank_configmap}"),
            self._may_write(nodes),
            self.rank_configmaps.resource_version_number,
        )
        unknown = [h for h in rank_map.live() if h not in nodes]
        if unknown and view_rv < rank_map.nodes_resource_version:
            self._set_status(
                f"waiting for the node list to catch up with the rank map ({', '.join(unknown)})"
            )
            return
        config_changed = False
        if rank_map.size:
            # Rendering is cheap next to R for big clusters, but both only change with the
            # rank map, node addresses/ports or capacities, not with every node heartbeat.
            render_key = (
                rank_map.hosts,
                rank_map.vacant,
                tuple(overlay_config.endpoints(rank_map, nodes, self.settings)),
            )
            if render_key != self._render_key:
                if self.files.write_config(overlay_config.render(rank_map, nodes, self.settings)):
                    config_changed = True
                    self.metrics.renders.inc()
                    log.info("rendered %s: %d rank(s)", self.files.config, rank_map.size)
                self._render_key = render_key
            r_key = tuple(
                (
                    h,
                    r,
                    json.dumps(
                        (nodes.get(h) or {}).get("status", {}).get("capacity"), sort_keys=True
                    ),
                )
                for h, r in rank_map.live().items()
            )
            if r_key != self._r_key:
                self.files.write_resources(node_resources.cluster_R(rank_map, nodes))
                self._r_key = r_key
        self.rank = rank_map.rank_of(self.opts.node_name)
        me = nodes.get(self.opts.node_name)
        stop_in_place = False
        placement = overlay_config.placement(rank_map, nodes, self.settings, self.opts.node_name)
        if me is None or self.opts.node_name not in members:
            why = self._why_not(me, selection)
            if self.supervisor.running:
                self.record_event("BrokerStopped", f"node is no longer a member: {why}")
            self._set_status(f"node {self.opts.node_name} is not a member ({why}): no broker here")
            placement = None
        elif not is_ready(me) and self.rank == 0:
            # Stopping the leader would take the whole overlay down with it; keep it.
            self._set_status(
                f"node {self.opts.node_name} is NotReady but hosts the leader (rank 0): "
                "its broker keeps running",
                logging.WARNING,
            )
        elif not is_ready(me):
            if self.supervisor.running:
                self.record_event(
                    "BrokerStopped",
                    f"node is NotReady: broker rank {self.rank} stopped, the overlay shows it down",
                    "Warning",
                )
            self._set_status(
                f"node {self.opts.node_name} is NotReady: broker stopped so the overlay marks "
                f"rank {self.rank} down",
                logging.WARNING,
            )
            # A leaf says goodbye (offline at once); a broker with children is killed so its
            # subtree keeps running and rejoins when the node is Ready again (lost meanwhile).
            stop_in_place = bool(placement and placement.children)
            placement = None
        elif placement is None:
            self._set_status(f"node {self.opts.node_name} waits for a rank")
        else:
            self._set_status(f"node {self.opts.node_name} is rank {self.rank} of {rank_map.size}")
        self.metrics.size.set(rank_map.size)
        self.supervisor.ensure(
            placement, why=self.status, stop_in_place=stop_in_place, config_changed=config_changed
        )

    def _publish_metrics(self) -> None:
        m, s = self.metrics, self.supervisor
        m.rank.set(self.rank if self.rank is not None else -1)
        m.broker_up.set(1 if s.running else 0)
        if s.starts > self._starts_seen:
            m.broker_starts.inc(s.starts - self._starts_seen)
            self._starts_seen = s.starts
        if s.crashes > self._crashes_seen:
            m.broker_crashes.inc(s.crashes - self._crashes_seen)
            self._crashes_seen = s.crashes
