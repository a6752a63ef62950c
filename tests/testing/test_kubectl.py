"""Real kubectl against the API emulator: what operators type, answered as a real server would.

The oracles are outside the emulator: kubectl's own output (parsed by the test's own table
parser), the manifests as `kubectl kustomize` renders them (parsed with PyYAML), and the
values the Kubernetes printers give for the pod and node states each test sets up (written
out here as literals, from pkg/printers/internalversion/printers.go)."""

from __future__ import annotations

import datetime
import json

import pytest
import yaml
from support.kubectl import REPO, kubectl, parse_table, rendered

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.kube_store import RESOURCES
from fluxnode.testing.waiting import wait_for

MAIN = {"name": "main", "image": "busybox"}


def _ago(seconds: int) -> str:
    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str, node: str | None, status: dict, namespace: str = "default") -> dict:
    spec = {"containers": [MAIN]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}


def _everything(kube: KubeEmulator) -> dict[tuple[str, str, str | None, str], dict]:
    """Every stored object by (apiVersion, kind, namespace, name), read directly."""
    out = {}
    for rt in RESOURCES:
        if rt.ref == "bindings" or (rt.plural == "events" and rt.group):
            continue
        for obj in kube.list(rt.ref):
            meta = obj["metadata"]
            out[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = obj
    return out


def _contains(stored, applied, path="") -> list[str]:
    """Where `stored` lacks or differs from what `applied` sets (the server may add fields)."""
    if isinstance(applied, dict):
        if not isinstance(stored, dict):
            return [path]
        return [p for k, v in applied.items() for p in _contains(stored.get(k), v, f"{path}.{k}")]
    if isinstance(applied, list):
        if not isinstance(stored, list) or len(stored) != len(applied):
            return [path]
        return [p for i, (s, a) in enumerate(zip(stored, applied, strict=True))
                for p in _contains(s, a, f"{path}[{i}]")]
    return [] if stored == applied else [path]


def test_get_nodes_and_pods_wide_prints_the_servers_columns(kube):
    kube.add_node("cp", control_plane=True, address="10.0.0.1")
    kube.add_node("w1", address="10.0.0.2")
    kube.add_node("w2", unschedulable=True, address="10.0.0.3")
    kube.add_node("w3", ready=False, address="10.0.0.4")
    ready = {"type": "Ready", "status": "True"}
    kube.create("pods", _pod("running", "w1", {
        "phase": "Running", "conditions": [ready], "podIP": "10.1.0.5",
        "podIPs": [{"ip": "10.1.0.5"}],
        "containerStatuses": [{"name": "main", "ready": True, "restartCount": 2,
                               "state": {"running": {"startedAt": _ago(60)}},
                               "lastState": {"terminated": {"exitCode": 1,
                                                            "finishedAt": _ago(1800)}}}]}))
    kube.create("pods", _pod("crashing", "w2", {
        "phase": "Running", "podIP": "10.1.0.6",
        "containerStatuses": [{"name": "main", "ready": False, "restartCount": 5,
                               "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}))
    kube.create("pods", _pod("done", "w1", {
        "phase": "Succeeded",
        "containerStatuses": [{"name": "main", "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}))
    kube.create("pods", _pod("waiting", None, {"phase": "Pending"}, namespace="kube-system"))
    kube.create("pods", _pod("leaving", "w1", {"phase": "Running", "conditions": [ready]}))
    kube.hold_terminations = True
    kube.delete("pods", "leaving", "default", grace_period=30)

    result = kubectl(kube, "get", "nodes,pods", "-A", "-o", "wide").check()
    nodes, pods = parse_table(result.stdout)
    assert [(n["NAME"], n["STATUS"], n["ROLES"], n["VERSION"], n["INTERNAL-IP"],
             n["EXTERNAL-IP"]) for n in nodes] == [
        ("node/cp", "Ready", "control-plane", "v1.33.0", "10.0.0.1", "<none>"),
        ("node/w1", "Ready", "<none>", "v1.33.0", "10.0.0.2", "<none>"),
        ("node/w2", "Ready,SchedulingDisabled", "<none>", "v1.33.0", "10.0.0.3", "<none>"),
        ("node/w3", "NotReady", "<none>", "v1.33.0", "10.0.0.4", "<none>"),
    ]
    assert {n["OS-IMAGE"] for n in nodes} == {"Debian GNU/Linux 12 (bookworm)"}
    assert {n["CONTAINER-RUNTIME"] for n in nodes} == {"containerd://1.7.24"}
    by_name = {p["NAME"]: p for p in pods}
    got = {name: (p["NAMESPACE"], p["READY"], p["STATUS"], p["RESTARTS"], p["IP"], p["NODE"],
                  p["NOMINATED NODE"], p["READINESS GATES"]) for name, p in by_name.items()}
    assert got == {
        "pod/running": ("default", "1/1", "Running", "2 (30m ago)", "10.1.0.5", "w1", "<none>",
                        "<none>"),
        "pod/crashing": ("default", "0/1", "CrashLoopBackOff", "5", "10.1.0.6", "w2", "<none>",
                         "<none>"),
        "pod/done": ("default", "0/1", "Completed", "0", "<none>", "w1", "<none>", "<none>"),
        "pod/leaving": ("default", "0/1", "Terminating", "0", "<none>", "w1", "<none>",
                        "<none>"),
        "pod/waiting": ("kube-system", "0/1", "Pending", "0", "<none>", "<none>", "<none>",
                        "<none>"),
    }
    # without -o wide only the priority-0 columns, and kubectl asked for the server's Table
    narrow = parse_table(kubectl(kube, "get", "pods", "-n", "kube-system").check().stdout)[0]
    assert list(narrow[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert narrow[0]["AGE"].endswith("s")


def test_apply_k_creates_exactly_the_rendered_objects(tmp_path):
    docs = rendered("daemonset/")
    with KubeEmulator(directory=tmp_path / "kube") as kube:
        before = _everything(kube)
        result = kubectl(kube, "apply", "-k", "daemonset/").check()
        created = {k: v for k, v in _everything(kube).items() if k not in before}
        want = {(d["apiVersion"], d["kind"], d["metadata"].get("namespace"),
                 d["metadata"]["name"]): d for d in docs}
        assert set(created) == set(want)
        for key, doc in want.items():
            stored = created[key]
            assert _contains(stored, doc) == [], key
            # client-side apply keeps what it applied, for the next apply's three-way merge
            last = json.loads(
                stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            )
            if last["metadata"].get("annotations") == {}:  # kubectl leaves the emptied map
                del last["metadata"]["annotations"]
            assert last == doc, key

        def line(d: dict, verb: str) -> str:
            group = d["apiVersion"].rpartition("/")[0]
            kind = d["kind"].lower() + (f".{group}" if group else "")
            return f"{kind}/{d['metadata']['name']} {verb}"

        assert result.stdout.splitlines() == [line(d, "created") for d in docs]
        versions = {k: v["metadata"]["resourceVersion"] for k, v in _everything(kube).items()}
        again = kubectl(kube, "apply", "-k", "daemonset/").check()
        # kubectl's patch of a PodDisruptionBudget is never empty (its selector's patch
        # strategy is "replace", so the whole selector is sent again: Azure/eno#246), and so
        # it says "configured"; the server finds nothing to change and writes nothing
        assert again.stdout.splitlines() == [
            line(d, "configured" if d["kind"] == "PodDisruptionBudget" else "unchanged")
            for d in docs
        ]
        assert {k: v["metadata"]["resourceVersion"] for k, v in _everything(kube).items()} == \
            versions


def test_apply_changes_what_changed_and_keeps_what_others_set(tmp_path):
    """A second `kubectl apply` sends a strategic merge patch computed from the last applied
    configuration: a removed env entry goes, a changed image and args change, and what someone
    else set (an annotation, a field the file never had) stays."""
    docs = rendered("daemonset/")
    with KubeEmulator(directory=tmp_path / "kube") as kube:
        kubectl(kube, "apply", "-k", "daemonset/").check()
        kube.patch("daemonsets.apps", "fluxnode-agent",
                   {"metadata": {"annotations": {"example.com/owner": "ops"}},
                    "spec": {"minReadySeconds": 7}}, "fluxnode")
        ds = next(d for d in docs if d["kind"] == "DaemonSet")
        container = ds["spec"]["template"]["spec"]["containers"][0]
        dropped = container["env"].pop()["name"]
        container["image"] = "fluxnode:v2"
        container["args"] = [a for a in container["args"] if not a.startswith("--topo")]
        service = next(d for d in docs if d["kind"] == "Service")
        service["spec"]["ports"][0]["name"] = "metrics"  # a Service's ports merge by port
        path = tmp_path / "changed.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        result = kubectl(kube, "apply", "-f", str(path)).check()
        assert "daemonset.apps/fluxnode-agent configured" in result.stdout.splitlines()
        # and the PodDisruptionBudget, whose patch is never empty (see above)
        assert sorted(line for line in result.stdout.splitlines() if line.endswith("configured")) \
            == ["daemonset.apps/fluxnode-agent configured",
                "poddisruptionbudget.policy/fluxnode-binder configured",
                "service/fluxnode-binder-metrics configured"]
        assert kube.get("services", "fluxnode-binder-metrics", "fluxnode")["spec"]["ports"] == \
            service["spec"]["ports"]
        stored = kube.get("daemonsets.apps", "fluxnode-agent", "fluxnode")
        got = stored["spec"]["template"]["spec"]["containers"][0]
        assert got["image"] == "fluxnode:v2"
        assert got["args"] == container["args"]
        assert [e["name"] for e in got["env"]] == [e["name"] for e in container["env"]]
        assert dropped not in {e["name"] for e in got["env"]}
        assert stored["metadata"]["annotations"]["example.com/owner"] == "ops"
        assert stored["spec"]["minReadySeconds"] == 7


def test_strict_field_validation_refuses_an_unknown_field(kube, tmp_path):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typo", "namespace": "default"},
           "spec": {"containers": [{**MAIN, "imagePullPolcy": "Always"}]}}
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(pod))
    result = kubectl(kube, "apply", "-f", str(path))
    assert result.returncode == 1
    assert 'strict decoding error: unknown field "spec.containers[0].imagePullPolcy"' in \
        result.stderr
    assert kube.list("pods", "default") == []
    # --validate=false: the field is dropped, as a real server does with fieldValidation=Ignore
    kubectl(kube, "apply", "--validate=false", "-f", str(path)).check()
    assert "imagePullPolcy" not in kube.get("pods", "typo", "default")["spec"]["containers"][0]


@pytest.mark.parametrize(
    "args, path",
    [
        (("get", "secrets", "-n", "fluxnode"), "GET /api/v1/namespaces/fluxnode/secrets"),
        (("get", "--raw", "/openapi/v2"), "GET /openapi/v2"),
    ],
)
def test_what_the_emulator_cannot_answer_fails_loudly(kube, args, path):
    result = kubectl(kube, *args)
    assert result.returncode == 1
    assert "does not emulate" in result.stderr and path in result.stderr, result.stderr


def test_cordon_and_uncordon_patch_the_node(kube):
    kube.add_node("w1")
    assert kubectl(kube, "cordon", "w1").check().stdout == "node/w1 cordoned\n"
    assert kube.get("nodes", "w1")["spec"]["unschedulable"] is True
    assert parse_table(kubectl(kube, "get", "node", "w1").check().stdout)[0][0]["STATUS"] == \
        "Ready,SchedulingDisabled"
    assert kubectl(kube, "cordon", "w1").check().stdout == "node/w1 already cordoned\n"
    assert kubectl(kube, "uncordon", "w1").check().stdout == "node/w1 uncordoned\n"
    assert "unschedulable" not in kube.get("nodes", "w1")["spec"]


def test_delete_is_graceful_for_a_bound_pod(kube):
    kube.add_node("w1")
    kube.create("pods", _pod("p", "w1", {"phase": "Running"}))
    kube.hold_terminations = True
    proc = kubectl(kube, "delete", "pod", "p", "--wait=false").check()
    assert proc.stdout == 'pod "p" deleted from default namespace\n'
    meta = kube.get("pods", "p", "default")["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30 and meta["deletionTimestamp"]
    assert kube.finish_terminations() == 1
    assert kube.list("pods", "default") == []
    kube.hold_terminations = False
    kube.create("pods", _pod("q", "w1", {"phase": "Running"}))
    kubectl(kube, "delete", "pod", "q").check()  # waits until it is gone
    assert kube.list("pods", "default") == []


def test_get_events_and_jobs_wide(kube):
    """The Event and Job printers: what `kubectl get events` shows of a binder's Scheduled
    Event, and a Job's status, completions and duration (ages in minutes: stable for the
    seconds a test runs)."""
    kube.create("events", {
        "metadata": {"name": "p.17f0", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Scheduled", "type": "Normal", "count": 3,
        "message": "Successfully assigned default/p to w1",
        "source": {"component": "fluxnode-binder"},
        "firstTimestamp": _ago(3600), "lastTimestamp": _ago(600)}, "default")
    job = {"metadata": {"name": "train", "namespace": "default"},
           "spec": {"completions": 4, "parallelism": 2,
                    "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "abc"}},
                    "template": {"spec": {"containers": [MAIN]}}}}
    kube.create("jobs.batch", {**job, "status": {"succeeded": 1, "startTime": _ago(600)}},
                "default")
    kube.create("jobs.batch", {**job, "metadata": {"name": "done", "namespace": "default"},
                               "status": {"succeeded": 4, "startTime": _ago(3 * 3600),
                                          "completionTime": _ago(3 * 3600 - 90),
                                          "conditions": [{"type": "Complete",
                                                          "status": "True"}]}}, "default")
    # an events.k8s.io/v1 Event, as the node agent writes about its Node: one stored Event,
    # so kubectl's core/v1 list shows it too (its note as MESSAGE, its reporting controller
    # and instance as SOURCE)
    kube.create("events.events.k8s.io", {
        "metadata": {"name": "w1.agent", "namespace": "default"},
        "regarding": {"kind": "Node", "name": "w1"}, "reason": "BrokerStarted",
        "type": "Normal", "note": "broker rank 0 started", "action": "Start",
        "reportingController": "fluxnode.io/agent", "reportingInstance": "w1",
        "eventTime": _ago(1200) .replace("Z", ".000000Z")}, "default")
    events = parse_table(kubectl(kube, "get", "events", "-o", "wide").check().stdout)[0]
    assert events == [
        {"LAST SEEN": "10m", "TYPE": "Normal", "REASON": "Scheduled", "OBJECT": "pod/p",
         "SUBOBJECT": "", "SOURCE": "fluxnode-binder",
         "MESSAGE": "Successfully assigned default/p to w1", "FIRST SEEN": "60m", "COUNT": "3",
         "NAME": "p.17f0"},
        {"LAST SEEN": "20m", "TYPE": "Normal", "REASON": "BrokerStarted", "OBJECT": "node/w1",
         "SUBOBJECT": "", "SOURCE": "fluxnode.io/agent, w1", "MESSAGE": "broker rank 0 started",
         "FIRST SEEN": "20m", "COUNT": "1", "NAME": "w1.agent"}]
    jobs = parse_table(kubectl(kube, "get", "jobs", "-o", "wide").check().stdout)[0]
    assert [{k: v for k, v in j.items() if k != "AGE"} for j in jobs] == [
        {"NAME": "done", "STATUS": "Complete", "COMPLETIONS": "4/4", "DURATION": "90s",
         "CONTAINERS": "main", "IMAGES": "busybox",
         "SELECTOR": "batch.kubernetes.io/controller-uid=abc"},
        {"NAME": "train", "STATUS": "Running", "COMPLETIONS": "1/4", "DURATION": "10m",
         "CONTAINERS": "main", "IMAGES": "busybox",
         "SELECTOR": "batch.kubernetes.io/controller-uid=abc"},
    ]


def test_delete_k_removes_exactly_what_apply_k_made(tmp_path):
    """`make undeploy`: the namespace goes Terminating first, so kubectl's deletes of what is
    in it still find their objects (on an emulator that emptied it at once they were 404s)."""
    docs = rendered("daemonset/")
    with KubeEmulator(directory=tmp_path / "kube") as kube:
        before = _everything(kube)
        kubectl(kube, "apply", "-k", "daemonset/").check()
        result = kubectl(kube, "delete", "-k", "daemonset/").check()

        def line(d: dict) -> str:  # kubectl 1.37's words; a namespaced object names its own
            group = d["apiVersion"].rpartition("/")[0]
            kind = d["kind"].lower() + (f".{group}" if group else "")
            where = d["metadata"].get("namespace")
            return (f'{kind} "{d["metadata"]["name"]}" deleted'
                    + (f" from {where} namespace" if where else ""))

        assert result.stdout.splitlines() == [line(d) for d in docs]
        wait_for(lambda: _everything(kube).keys() == before.keys(), 30,
                 what="the namespace controller to finish")


def test_the_example_manifests_apply_as_the_binder_page_shows(kube):
    """docs/binder.md's `kubectl apply -f example/...` lines, with strict field validation:
    each prints what it created and stores what the manifest says."""
    for name in ("pod.yaml", "group-job.yaml", "indexed-job.yaml"):
        docs = [d for d in yaml.safe_load_all((REPO / "example" / name).read_text()) if d]
        result = kubectl(kube, "apply", "-f", f"example/{name}").check()
        assert result.stdout.splitlines() == [
            f"{'pod' if d['kind'] == 'Pod' else 'job.batch'}/{d['metadata']['name']} created"
            for d in docs]
        for d in docs:
            ref = "pods" if d["kind"] == "Pod" else "jobs.batch"
            stored = kube.get(ref, d["metadata"]["name"], d["metadata"].get("namespace", "default"))
            assert _contains(stored["spec"], d["spec"]) == [], name
