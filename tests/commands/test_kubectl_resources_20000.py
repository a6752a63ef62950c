"""`kubectl fluxnode resources` at 20,000 nodes (issue 30): the leader's resource list as the
binder's publisher writes it into ConfigMap fluxnode/fluxnode-resources fits the object (the
API server refuses one whose values pass 1 MiB, and so does the emulator), and the plugin,
run by the real kubectl, prints what `fluxnode resource list` prints against the leader.

The leader is a real broker: rank 0 of a 20,000-host instance whose other brokers do not run;
each of the others reported its node (``resource.register``, what a broker sends when it
joins: 1 to 64 cores and 0 to 8 GPUs, drawn with a fixed seed), so the leader lists them as
down with those cores. Oracles: `fluxnode resource list` from the leader itself, the counts
the test registered, and the ConfigMap's size counted here as ValidateConfigMap counts it.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from fluxnode.agent.broker.client import Client
from fluxnode.agent.kube import raw as kube_raw
from fluxnode.broker_conf import certificate
from fluxnode.scheduler.binder.resource_publisher import ResourcePublisher
from kubernetes import client
from support import seeds
from support.binder_cluster import BINDER_MANIFEST
from support.kubectl import plugin

from fluxnode.testing.exits import stop_process
from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.ports import free_port
from fluxnode.testing.waiting import wait_for

NODES = 20_000
LIMIT = 1024 * 1024  # core.MaxSecretSize: a ConfigMap's values at most


@contextmanager
def lone_leader(root: Path, nodes: int) -> Iterator[str]:
    """Rank 0 of an instance of `nodes` hosts sim[0-N) started alone, no modules; its
    local:// URI."""
    cert = root / "curve.cert"
    certificate.write(cert, certificate.generate(), force=True)
    port = free_port()  # rank 0 listens there for its children
    cfg = root / "broker.toml"
    cfg.write_text(f'[bootstrap]\ncurve_cert = "{cert}"\ndefault_port = {port}\n'
                   'default_bind = "tcp://127.0.0.1:%p"\n'
                   'default_connect = "tcp://127.0.0.1:%p"\n'
                   f'hosts = [ {{ host = "sim[0-{nodes - 1}]" }} ]\n')
    rundir = root / "run"
    uri = f"local://{rundir}/local"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fluxnode", "broker", "--config-path", str(cfg), "--hostname",
         "sim0", "-S", f"rundir={rundir}", "-S", f"statedir={rundir}", "-S", "broker.modules=",
         "-S", "log-stderr-level=3"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        def answers() -> bool:
            assert proc.poll() is None, f"the leader exited with {proc.returncode}"
            with Client.connect(uri, timeout=2.0) as c:
                return bool(c.rpc("broker.ping", {}, nodeid=0))
        wait_for(answers, 60, what="the lone leader to answer a ping")
        yield uri
    finally:
        stop_process(proc, 30)
        assert proc.returncode != -signal.SIGKILL, "the leader did not stop on SIGTERM"


def configmap_manifest() -> dict:
    return next(d for d in yaml.safe_load_all(BINDER_MANIFEST.read_text())
                if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] ==
                "fluxnode-resources")


@pytest.mark.slow
def test_twenty_thousand_nodes_are_published_and_printed_as_the_leader_lists_them(tmp_path):
    rng = random.Random(seeds.choose("kubectl_resources_20000"))
    shapes = {r: (rng.randint(1, 64), rng.randint(0, 8)) for r in range(1, NODES)}
    kube = KubeEmulator(namespaces=("default", "fluxnode")).start()
    try:
        core = client.CoreV1Api(kube.api_client())
        core.create_namespaced_config_map("fluxnode", configmap_manifest())
        with lone_leader(tmp_path, NODES) as uri, Client.connect(uri, timeout=60) as leader:
            for rank, (cores, gpus) in shapes.items():
                leader.rpc("resource.register", {"node": {
                    "rank": rank, "hostname": f"sim{rank}", "cores": list(range(cores)),
                    "gpus": list(range(gpus))}}, nodeid=0)
            publisher = ResourcePublisher(
                lambda topic, payload: leader.rpc(topic, payload, nodeid=0),
                lambda body: kube_raw.call(core.patch_namespaced_config_map,
                                           "fluxnode-resources", "fluxnode", body),
                "test-publisher", interval=0, refresh=60)
            assert publisher.run() is True

            cm = kube_raw.call(core.read_namespaced_config_map, "fluxnode-resources",
                               "fluxnode")
            size = sum(len(v.encode()) for v in (cm.get("data") or {}).values()) + sum(
                len(base64.b64decode(v)) for v in (cm.get("binaryData") or {}).values())
            assert size <= LIMIT, size

            printed = plugin(kube, "resources").check().stdout
            direct = subprocess.run(
                [sys.executable, "-m", "fluxnode", "resource", "list"],
                env={**os.environ, "FLUXNODE_URI": uri}, capture_output=True, text=True,
                timeout=120)
            assert direct.returncode == 0, direct.stderr
            assert printed == direct.stdout
            down = printed.splitlines()[-1].split()
            assert down == ["down", str(NODES - 1), str(sum(c for c, _ in shapes.values())),
                            str(sum(g for _, g in shapes.values())), f"sim[1-{NODES - 1}]"]
    finally:
        kube.stop()
