"""daemonset/: every manifest valid for a current Kubernetes, least-privilege RBAC that
is also sufficient (the agent runs against the emulator with exactly these rules)."""

from __future__ import annotations

import os
import shutil
import stat
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from support.kube_agents import AgentProcess, add_node, stop_all
from support.paths import REPO

from fluxnode.commands.agent import agent as agent_command
from fluxnode.testing.kube_emulator import RequestInfo
from fluxnode.testing.kube_rbac import RbacAuthorizer
from fluxnode.testing.waiting import wait_for

ROOT = REPO
DAEMONSET = ROOT / "daemonset"
K8S_VERSION = kubernetes_validate.latest_version()
OWNED_BY_OTHERS = {"binder.yaml": "the binder developer"}


def kustomization() -> dict:
    return yaml.safe_load((DAEMONSET / "kustomization.yaml").read_text())


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DAEMONSET / name).read_text()) if d]


def all_documents() -> list[dict]:
    return [
        d
        for name in kustomization()["resources"]
        if (DAEMONSET / name).exists()
        for d in documents(name)
    ]


def by_kind(kind: str) -> list[dict]:
    return [d for d in all_documents() if d["kind"] == kind]


def test_kustomization_lists_every_manifest():
    listed = kustomization()["resources"]
    on_disk = sorted(p.name for p in DAEMONSET.glob("*.yaml") if p.name != "kustomization.yaml")
    assert set(on_disk) <= set(listed), f"not in kustomization.yaml: {set(on_disk) - set(listed)}"
    missing = [n for n in listed if not (DAEMONSET / n).exists()]
    if missing and set(missing) <= set(OWNED_BY_OTHERS):
        pytest.skip(
            f"{', '.join(missing)} not written yet "
            f"({', '.join(OWNED_BY_OTHERS[m] for m in missing)})"
        )
    assert not missing


@pytest.mark.parametrize(
    "name", sorted(str(p.relative_to(DAEMONSET)) for p in DAEMONSET.glob("**/*.yaml")
                   if p.name != "kustomization.yaml")
)
def test_manifest_is_valid_for_current_kubernetes(name):
    for doc in documents(name):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_daemonset_shape():
    (ds,) = [d for d in by_kind("DaemonSet") if d["metadata"]["name"] == "fluxnode-agent"]
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert spec["hostNetwork"] and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["serviceAccountName"] == "fluxnode-agent"
    (c,) = spec["containers"]
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert (
        c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    )
    env = {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    # the DaemonSet the agent follows for membership is this one
    assert env == {"NODE_NAME": "spec.nodeName", "POD_NAMESPACE": "metadata.namespace",
                   "FLUXNODE_DAEMONSET": ds["metadata"]["name"]}
    # the container's arguments are ones `fluxnode agent` accepts
    assert c["command"] == ["fluxnode", "agent"]
    ctx = agent_command.make_context("agent", [*c["args"], "--node-name", "n1"])
    assert str(ctx.params["host_dir"]) == "/etc/fluxnode" and ctx.params["health_port"] == 9464
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host[[n for n, p in mounts.items() if p == "/etc/fluxnode"][0]] == "/etc/fluxnode"
    assert (
        host["run"] == "/run/fluxnode" and mounts["run"] == "/run/fluxnode"
    )  # pid/uri paths match on both sides
    # the connect script has its own host directory, written where the agent is told to
    assert host["bin"] == "/opt/fluxnode/bin" and mounts["bin"] == str(ctx.params["bin_dir"])


def agent_roles(kind: str) -> list[dict]:
    """The agent's own roles (binder.yaml has the binder's, checked by tests/binder)."""
    return [d for d in by_kind(kind) if d["metadata"]["name"] == "fluxnode-agent"]


def test_rbac_is_least_privilege():
    (cluster_role,) = agent_roles("ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    (role,) = agent_roles("Role")
    for rule in role["rules"]:
        assert (
            "*" not in rule["verbs"]
            and "*" not in rule["resources"]
            and "*" not in rule["apiGroups"]
        )
        if rule["verbs"] != ["create"]:
            assert rule.get("resourceNames"), f"{rule} is not restricted to named objects"
    secret_rules = [r for r in role["rules"] if r["resources"] == ["secrets"]]
    assert {tuple(r["verbs"]) for r in secret_rules} == {("get",), ("create",)}


@pytest.fixture
def rbac(kube):
    paths = [DAEMONSET / n for n in ("rbac.yaml",)]
    kube.authorizer = RbacAuthorizer.from_manifests(paths, "fluxnode", "fluxnode-agent")
    return kube.authorizer


def info(
    verb: str, resource: str, namespace: str | None = None, name: str | None = None, **query: str
) -> RequestInfo:
    group = resource.split(".", 1)[1] if "." in resource else ""
    return RequestInfo(verb, resource, None, namespace, name, group, query)


def test_rbac_denies_what_the_agent_does_not_need(rbac):
    assert rbac(info("list", "nodes")) is None
    assert rbac(info("get", "secrets", "fluxnode", "fluxnode-curve")) is None
    assert rbac(info("get", "secrets", "fluxnode", "other")) is not None
    assert rbac(info("list", "secrets", "fluxnode")) is not None
    assert rbac(info("create", "secrets", "default")) is not None
    assert rbac(info("update", "nodes", None, "n1")) is not None
    assert rbac(info("list", "pods")) is not None
    assert (
        rbac(info("watch", "configmaps", "fluxnode", fieldSelector="metadata.name=fluxnode-ranks"))
        is None
    )
    assert rbac(info("watch", "configmaps", "fluxnode")) is not None
    # its own DaemonSet, by name, through an informer (list/watch), and nothing else
    own = {"fieldSelector": "metadata.name=fluxnode-agent"}
    assert rbac(info("watch", "daemonsets.apps", "fluxnode", **own)) is None
    assert rbac(info("list", "daemonsets.apps", "fluxnode", **own)) is None
    assert rbac(info("watch", "daemonsets.apps", "fluxnode")) is not None
    assert rbac(info("get", "daemonsets.apps", "fluxnode", "fluxnode-agent")) is not None
    assert rbac(info("update", "daemonsets.apps", "fluxnode", "fluxnode-agent")) is not None
    assert rbac(info("list", "daemonsets.apps", "kube-system", **own)) is not None


def test_agent_runs_with_exactly_the_manifest_rbac(kube, rbac, tmp_path):
    add_node(kube, "w1")
    add_node(kube, "w2")
    # as installed: the DaemonSet exists and the agents follow it (FLUXNODE_DAEMONSET)
    (ds,) = by_kind("DaemonSet")
    kube.create("daemonsets.apps", ds, "fluxnode")
    agents = [AgentProcess(kube, n, tmp_path, "--daemonset", ds["metadata"]["name"]).start()
              for n in ("w1", "w2")]
    try:
        for a in agents:
            a.wait_broker()
        wait_for(lambda: kube.get("configmaps", "fluxnode-ranks", "fluxnode"), 20, what="rank map")
        assert all("permission denied" not in a.log for a in agents)
    finally:
        stop_all(agents)
    denied = [r for r in kube.requests if rbac(r) is not None]
    assert denied == []


# -- what `kubectl apply -k daemonset/` sends (rendered by kubectl kustomize) -------------

STANDARD_LABELS = ("name", "instance", "version", "component", "part-of", "managed-by")
# labels that may change between releases or installs: never in a selector (selectors of a
# DaemonSet/Deployment are immutable, and a PDB/Service would lose the old pods mid-upgrade)
VOLATILE_LABELS = {f"app.kubernetes.io/{k}" for k in ("version", "managed-by", "instance")}
# what containerd and CRI-O grant a container unless told otherwise
RUNTIME_DEFAULT_CAPS = {
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
    "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_rendered_manifests_are_valid_for_current_kubernetes(rendered):
    kinds = {d["kind"] for d in rendered}
    assert {"DaemonSet", "Deployment", "PodDisruptionBudget", "Service"} <= kinds
    for doc in rendered:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_every_object_has_the_standard_labels(rendered):
    for doc in rendered:
        labels = doc["metadata"].get("labels", {})
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        missing = [k for k in STANDARD_LABELS if f"app.kubernetes.io/{k}" not in labels]
        assert not missing, f"{where} lacks {missing}"
        assert labels["app.kubernetes.io/name"] == "fluxnode"
        assert labels["app.kubernetes.io/part-of"] == "fluxnode"
        assert labels["app.kubernetes.io/version"] == project_version(), where
        template = doc.get("spec", {}).get("template")
        if template:  # pods carry them too (kubectl get pods -l ...)
            for k in STANDARD_LABELS:
                assert template["metadata"]["labels"].get(f"app.kubernetes.io/{k}") == labels.get(
                    f"app.kubernetes.io/{k}"
                ), f"{where} pod template label {k}"


def selectors(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    found = []
    if doc["kind"] == "Service":
        found.append(spec["selector"])
    elif "selector" in spec:
        found.append(spec["selector"]["matchLabels"])
    pod = spec.get("template", {}).get("spec", {})
    for term in (
        pod.get("affinity", {})
        .get("podAntiAffinity", {})
        .get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ):
        found.append(term["podAffinityTerm"]["labelSelector"]["matchLabels"])
    return found


def test_selectors_are_stable_and_select_their_pods(rendered):
    templates = {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in rendered
        if d["kind"] in ("DaemonSet", "Deployment")
    }
    checked = 0
    for doc in rendered:
        for sel in selectors(doc):
            where = f"{doc['kind']}/{doc['metadata']['name']}"
            volatile = VOLATILE_LABELS & set(sel)
            assert not volatile, f"{where} selects on {volatile}"
            workload = templates[sel["app.kubernetes.io/component"]]
            pod_labels = workload["spec"]["template"]["metadata"]["labels"]
            assert sel.items() <= pod_labels.items(), f"{where} selects no pod of its workload"
            checked += 1
    assert checked >= 5  # DaemonSet, Deployment, its anti-affinity, the PDB, the Service


def test_priority_classes(agent_daemonset, binder_deployment):
    assert agent_daemonset["spec"]["template"]["spec"]["priorityClassName"] == (
        "system-node-critical"
    )
    assert binder_deployment["spec"]["template"]["spec"]["priorityClassName"] == (
        "system-cluster-critical"
    )


def container_caps(c: dict) -> set[str]:
    """The capabilities a container gets, as the runtime computes them."""
    ctx = c.get("securityContext", {})
    if ctx.get("privileged"):
        return {"ALL"}
    caps = ctx.get("capabilities", {})
    drop = set(caps.get("drop", []))
    base = set() if "ALL" in drop else RUNTIME_DEFAULT_CAPS - drop
    return base | set(caps.get("add", []))


def test_agent_least_privilege(agent_daemonset):
    pod = agent_daemonset["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    ctx = c["securityContext"]
    assert not ctx.get("privileged"), "the agent must not be privileged"
    assert container_caps(c) == set(), f"capabilities kept: {container_caps(c)}"
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    # kept, each for a reason written in daemonset.yaml and docs/installer.md
    assert pod["hostNetwork"] is True and pod["hostPID"] is True and ctx["runAsUser"] == 0
    host_paths = sorted(v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v)
    assert host_paths == ["/etc/fluxnode", "/opt/fluxnode/bin", "/run/fluxnode",
                          "/var/lib/fluxnode"]
    # the root filesystem is read-only: everything the agent and broker write is a volume
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    ctx_args = agent_command.make_context("agent", [*c["args"], "--node-name", "n1"]).params
    for key in ("host_dir", "run_dir", "bin_dir", "state_dir"):
        assert str(ctx_args[key]) in mounts, f"--{key.replace('_', '-')} is not a mounted volume"
    assert "/tmp" in mounts


def test_binder_pdb_and_metrics_service(rendered, binder_deployment):
    (pdb,) = [d for d in rendered if d["kind"] == "PodDisruptionBudget"]
    replicas = binder_deployment["spec"]["replicas"]
    assert pdb["metadata"]["namespace"] == binder_deployment["metadata"]["namespace"]
    assert pdb["spec"]["selector"]["matchLabels"] == (
        binder_deployment["spec"]["selector"]["matchLabels"]
    )
    # a drain may evict one replica, never both; and never blocks a drain for good
    assert 1 <= pdb["spec"]["minAvailable"] < replicas
    (svc,) = [d for d in rendered
              if d["kind"] == "Service" and d["metadata"]["name"] == "fluxnode-binder-metrics"]
    assert svc["metadata"]["namespace"] == binder_deployment["metadata"]["namespace"]
    assert svc["spec"]["selector"] == binder_deployment["spec"]["selector"]["matchLabels"]
    (c,) = binder_deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    (port,) = svc["spec"]["ports"]
    # the Service reaches the port the binder serves /metrics on (its --http-port)
    http_port = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--http-port=")]
    assert ports[port["targetPort"]] == int(http_port[0]) == port["port"]


def test_example_service_monitor_scrapes_the_metrics_service(rendered):
    path = ROOT / "example" / "binder-servicemonitor.yaml"
    (sm,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["kind"] == "ServiceMonitor"
    assert not any("servicemonitor" in r for r in kustomization()["resources"])  # needs the CRD
    selected = [d for d in rendered if d["kind"] == "Service" and sm["spec"]["selector"][
        "matchLabels"].items() <= d["metadata"]["labels"].items()]
    (svc,) = selected  # the metrics Service, and only it (not the webhook's)
    assert svc["metadata"]["name"] == "fluxnode-binder-metrics"
    assert not VOLATILE_LABELS & set(sm["spec"]["selector"]["matchLabels"])
    assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    for k in STANDARD_LABELS:
        assert f"app.kubernetes.io/{k}" in sm["metadata"]["labels"]


def test_dockerfile_caches_dependencies_apart_from_the_source():
    lines = [
        line.strip()
        for line in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    # fluxnode.agent.node lives in agent/, fluxnode.commands in fluxnode/commands
    tops = {(p.split(".") + ["fluxnode"])[1] for p in packages}
    sources = {t if (ROOT / t).is_dir() else "fluxnode" for t in tops}

    def copies_source(line: str) -> bool:
        return line.startswith("COPY ") and any(f" {s}/" in line for s in sources)

    first_source = next(i for i, line in enumerate(lines) if copies_source(line))
    deps = [
        i
        for i, line in enumerate(lines)
        if line.startswith("RUN ") and "-r requirements.txt" in line and "pip wheel" in line
    ]
    assert deps and deps[0] < first_source, "dependencies are built after the source is copied"
    # the dependency build sees pyproject.toml and nothing of the source
    stage = max(i for i, line in enumerate(lines[: deps[0]]) if line.startswith("FROM "))
    copied = [line for line in lines[stage : deps[0]] if line.startswith("COPY ")]
    assert copied and all("pyproject.toml" in line and not copies_source(line) for line in copied)
    # the final image installs the dependencies in a layer before (apart from) fluxnode's own
    final = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    installs = [line for line in lines[final:] if line.startswith("RUN ") and "pip install" in line]
    assert len(installs) == 2 and "requirements.txt" in installs[0] and "--no-deps" in installs[1]
    # every package folder reaches the image
    assert {s for s in sources if any(f" {s}/" in line for line in lines)} == sources


def setpriv_prefix(pod: dict, c: dict) -> list[str]:
    """Run a process as the container runtime would run this container: its uid/gid, its
    capability set (nothing else in the bounding set), no_new_privs when
    allowPrivilegeEscalation is false."""
    ctx = c.get("securityContext", {})
    caps = container_caps(c)
    assert "ALL" not in caps, "a privileged container cannot be reproduced with setpriv"
    bounding = ",".join(["-all", *(f"+{cap.lower()}" for cap in sorted(caps))])
    prefix = [
        "setpriv",
        f"--reuid={ctx.get('runAsUser', 0)}",
        f"--regid={ctx.get('runAsGroup', 0)}",
        "--clear-groups",
        "--inh-caps=-all",
        f"--bounding-set={bounding}",
    ]
    if ctx.get("allowPrivilegeEscalation") is False:
        prefix.append("--no-new-privs")
    return [*prefix, "--"]


def cap_eff(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("CapEff:")).split()[1], 16)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to drop capabilities as the container runtime does",
)
def test_agent_works_with_the_manifest_privileges(kube, rbac, tmp_path, agent_daemonset):
    """The agent and its broker run with exactly the manifest's uid and capabilities (none):
    host files written with their modes, broker up, the connect script reaching it."""
    pod = agent_daemonset["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    add_node(kube, "w1")
    agent = AgentProcess(kube, "w1", tmp_path)
    agent.args[:0] = setpriv_prefix(pod, c)
    agent.start()
    try:
        broker = agent.wait_broker()
        assert cap_eff(agent.proc.pid) == 0 and cap_eff(broker) == 0
        assert stat.S_IMODE((agent.host_dir / "curve.cert").stat().st_mode) == 0o600
        assert (agent.host_dir / "broker.toml").exists() and (agent.host_dir / "R.json").exists()
        script = agent.bin_dir / "fluxnode-connect"
        wait_for(script.exists, 10, what="connect script")
        assert stat.S_IMODE(script.stat().st_mode) == 0o755
        out = wait_for(
            lambda: (r := agent.connect("fluxnode", "resource", "list")).returncode == 0 and r,
            20,
            what="resource list through the connect script",
        )
        assert "w1" in out.stdout
        assert "permission denied" not in agent.log.lower(), agent.log[-2000:]
    finally:
        agent.stop()
    assert [r for r in kube.requests if rbac(r) is not None] == []
