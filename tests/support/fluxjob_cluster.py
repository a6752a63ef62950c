"""A real-broker cluster for the FluxJob loop: the API emulator with its Job controller, the
FluxJob CRD and the admission webhook applied from daemonset/workloads/, and a binder with
exactly daemonset/binder.yaml's RBAC serving that webhook (as tests/scheduler/binder/
test_fluxjob_loop.py sets it up), plus the helpers the queue tests share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from kubernetes import client

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for
from support.binder_cluster import BinderCluster
from support.paths import REPO

WORKLOADS = REPO / "daemonset" / "workloads"
CONFIG = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
FLUXJOBS = "fluxjobs.fluxnode.io"


def install_workloads(api) -> None:
    """Apply daemonset/workloads/ as `kubectl apply -k daemonset/` does: the FluxJob CRD and
    the MutatingWebhookConfiguration (its caBundle empty until a binder sets it)."""
    client.ApiextensionsV1Api(api).create_custom_resource_definition(
        yaml.safe_load((WORKLOADS / "fluxjob-crd.yaml").read_text()))
    client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        yaml.safe_load((WORKLOADS / "webhook.yaml").read_text()))


@contextmanager
def fluxjob_cluster(tmp_path: Path, nodes: dict[str, int], *, job_controller: bool = True,
                    **binder) -> Iterator[BinderCluster]:
    kube = KubeEmulator(namespaces=("default", "kube-system", "fluxnode"),
                        job_controller=job_controller).start()
    try:
        install_workloads(kube.api_client())
        with BinderCluster(tmp_path, nodes, emulator=kube) as c:
            start_webhook_binder(c, tmp_path, **binder)
            yield c
    finally:
        kube.stop()


def start_webhook_binder(c: BinderCluster, tmp_path: Path, **overrides):
    b = c.start_binder(webhook_port=0, webhook_host="127.0.0.1",
                       webhook_cert_dir=str(tmp_path / "certs"), **overrides)
    c.kube.service_endpoints[("fluxnode", "fluxnode-webhook")] = ("127.0.0.1", b.webhook.port)
    wait_for(lambda: all(h["clientConfig"].get("caBundle")
                         for h in c.kube.get(CONFIG, "fluxnode")["webhooks"]),
             60, what="the webhook's caBundle set by the binder")
    # the caBundle is patched before the binder serves the pair it trusts (a new CA is
    # trusted first), so it does not say the webhook serves yet; a Service sends requests
    # to a replica once it is Ready, which needs the webhook serving
    wait_for(lambda: b.webhook.problem() is None, 60, what="the binder's webhook serving")
    return b


def priority_class(api, name: str, value: int) -> None:
    client.SchedulingV1Api(api).create_priority_class(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": {"name": name}, "value": value})


def queued_job(name: str, pods: int, *, queue: str = "batch", cpu: str = "1",
               priority_class: str | None = None, deadline: int | None = None) -> dict:
    """An Indexed Job of `pods` pods opted in to `queue`, each pod asking `cpu`; `deadline`:
    its spec.activeDeadlineSeconds (its walltime)."""
    template: dict = {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "worker", "image": "busybox:1.36", "command": ["true"],
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}
    if priority_class:
        template["spec"]["priorityClassName"] = priority_class
    spec: dict = {"completionMode": "Indexed", "completions": pods, "parallelism": pods,
                  "template": template}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"fluxnode.io/queue": queue}}, "spec": spec}


def status(c: BinderCluster, name: str) -> dict:
    try:
        return c.kube.get(FLUXJOBS, name, "default").get("status") or {}
    except Exception:
        return {}


def job_pods(c: BinderCluster, name: str) -> list[dict]:
    return [p for p in c.kube.list("pods", "default")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name]


def resumed(c: BinderCluster) -> set[str]:
    """Opted-in Jobs no longer suspended (admitted) and not finished, from the Job objects
    (the Job controller's Complete and Failed conditions)."""
    def ended(job: dict) -> bool:
        return any(x.get("type") in ("Complete", "Failed") and x.get("status") == "True"
                   for x in (job.get("status") or {}).get("conditions") or [])
    return {j["metadata"]["name"] for j in c.kube.list("jobs.batch", "default")
            if (j["metadata"].get("labels") or {}).get("fluxnode.io/queue")
            and not j["spec"].get("suspend") and not ended(j)}


def finish_job(c: BinderCluster, name: str) -> None:
    """Its pods succeed (as a kubelet reports them); the Job controller completes it."""
    wait_for(lambda: len(job_pods(c, name)) == c.kube.get("jobs.batch", name, "default")[
        "spec"]["parallelism"], 120, what=f"the pods of {name}")
    c.wait_bound([p["metadata"]["name"] for p in job_pods(c, name)], 120)
    for p in job_pods(c, name):
        c.finish(p["metadata"]["name"])
    wait_for(lambda: status(c, name).get("phase") == "Finished", 120,
             what=f"the FluxJob {name} Finished")
