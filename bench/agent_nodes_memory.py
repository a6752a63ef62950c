"""The node agent's memory for the Nodes of a large cluster (issue 32).

    .venv/bin/python bench/agent_nodes_memory.py [--nodes 5000] [--images 40]

An API emulator (fluxnode.testing) holds `--nodes` Nodes shaped as a kubelet registers
them, plus what real clusters add: `--images` container images per node, the other four
conditions, managedFields and a few annotations. A fresh interpreter with the `fluxnode
agent` command's imports runs the agent's Informer on them through the emulator's
kubeconfig, once as before issue 32 (the official client, whole objects, a deep copy of
the cache on every reconcile) and once as the agent does now (its own client, kubeconfig.py
and rest.py; the `node_view` transform; lists in pages of 100; the reconcile's copy
sharing the views). It reports its resident memory after the imports, what the first list
and the reconcile's copy added to it, and the process's total.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from fluxnode.testing.kube_emulator import KubeEmulator

PROBE = r"""
import gc, json, sys
from fluxnode.commands import agent as command  # the agent process's imports
from fluxnode.agent.kube.agent_api import AgentApi
from fluxnode.agent.kube.informer import Informer
from fluxnode.agent.kube.kubeconfig import load_target
from fluxnode.agent.kube.rest import KubeRest
from fluxnode.agent.node.agent import NODE_LIST_PAGE
from fluxnode.agent.node.node_view import node_view

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

kubeconfig, mode = sys.argv[1], sys.argv[2]
imported = rss()
if mode == "whole":  # before issue 32: the official client, whole objects, deep copies
    from kubernetes import client, config
    api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
else:
    api = AgentApi(KubeRest(load_target(kubeconfig)))
gc.collect()
base = rss()
if mode == "whole":
    inf = Informer("nodes", api.list_node)
else:
    inf = Informer("nodes", api.list_node, transform=node_view, page=NODE_LIST_PAGE)
inf.start()
inf.synced.wait(300)
copy = inf.snapshot(copy_objects=mode == "whole")  # as the agent's reconcile takes it
gc.collect()
print(json.dumps({"nodes": len(copy), "grew": rss() - base, "rss": rss(), "imported": imported}))
inf.stop()
"""


def node(i: int, images: int) -> dict:
    name = f"node{i:05d}"
    stamp = "2026-11-28T10:00:00Z"
    conditions = [{"type": t, "status": "False", "reason": f"KubeletHas{t}",
                   "message": f"kubelet has no {t}", "lastHeartbeatTime": stamp,
                   "lastTransitionTime": stamp}
                  for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status",
                       "lastHeartbeatTime": stamp, "lastTransitionTime": stamp})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "creationTimestamp": stamp,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "z1",
                       "node.kubernetes.io/instance-type": "m6i.16xlarge"},
            "annotations": {"kubeadm.alpha.kubernetes.io/cri-socket":
                            "unix:///run/containerd/containerd.sock",
                            "node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "managedFields": [{"manager": m, "operation": "Update", "apiVersion": "v1",
                               "time": stamp, "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:status": {"f:conditions": {}, "f:images": {}}}}
                              for m in ("kubelet", "kube-controller-manager", "kubeadm")],
        },
        "spec": {"podCIDR": f"10.{i >> 8 & 255}.{i & 255}.0/24"},
        "status": {
            "capacity": {"cpu": "64", "memory": "263041760Ki", "pods": "110"},
            "allocatable": {"cpu": "63", "memory": "262529760Ki", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": f"10.1.{i >> 8 & 255}.{i & 255}"},
                          {"type": "Hostname", "address": name}],
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v1.33.0", "architecture": "amd64",
                         "bootID": f"boot-{name}", "machineID": f"machine-{name}",
                         "systemUUID": f"uuid-{name}", "osImage": "Debian GNU/Linux 12",
                         "kernelVersion": "6.1.0", "operatingSystem": "linux",
                         "containerRuntimeVersion": "containerd://1.7.24"},
            "images": [{"names": [f"registry.example.com/team/app{j}@sha256:{j:064x}",
                                  f"registry.example.com/team/app{j}:v1.{j}"],
                        "sizeBytes": 100_000_000 + j} for j in range(images)],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="Nodes (default 5000)")
    parser.add_argument("--images", type=int, default=40, help="images per Node (default 40)")
    opts = parser.parse_args()
    with KubeEmulator() as kube:
        for i in range(opts.nodes):
            kube.create("nodes", node(i, opts.images))
        for mode, what in (("whole", "before (official client, whole objects)"),
                          ("view", "the agent (own client, node_view)")):
            out = subprocess.run([sys.executable, "-c", PROBE, str(kube.kubeconfig_path), mode],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out)
            print(f"{r['nodes']} Nodes, {what}: imports {r['imported'] / 1024:.1f} MiB, "
                  f"cache and the reconcile's copy +{r['grew'] / 1024:.1f} MiB, "
                  f"process RSS {r['rss'] / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
