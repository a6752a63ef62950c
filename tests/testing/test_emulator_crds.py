"""CustomResourceDefinitions in the API emulator, through the official client and real kubectl.

The oracles are outside the emulator: the values the test sets and what apiextensions-apiserver
does with them (written out here as literals: pruning, defaults, the 422 wording of
pkg/apiserver/validation, the status subresource's strategy, the table convertor's cells), and
kubectl's own output parsed by the test's table parser."""

from __future__ import annotations

import datetime
import json

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from support.fluxjob_crd import API_VERSION, GROUP, PLURAL, VERSION, fluxjob, fluxjob_crd
from support.kubectl import kubectl, parse_table

from fluxnode.testing.kube_rbac import RbacAuthorizer


def _ago(seconds: int) -> str:
    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def crds(kube):
    return client.ApiextensionsV1Api(kube.api_client())


@pytest.fixture
def custom(kube, crds):
    crds.create_custom_resource_definition(fluxjob_crd())
    return client.CustomObjectsApi(kube.api_client())


def _error(exc: pytest.ExceptionInfo) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body)["message"]


def test_a_created_crd_is_established_and_served_in_discovery(kube, crds):
    created = crds.create_custom_resource_definition(fluxjob_crd())
    assert created.metadata.name == "fluxjobs.fluxnode.io"
    assert created.status is None or not created.status.conditions  # the controllers' part
    crd = crds.read_custom_resource_definition("fluxjobs.fluxnode.io")
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd.status.accepted_names.kind == "FluxJob"
    assert crd.status.accepted_names.list_kind == "FluxJobList"  # defaulted
    assert crd.spec.names.list_kind == "FluxJobList"
    api = client.ApisApi(kube.api_client())
    groups = {g.name: g.preferred_version.version for g in api.get_api_versions().groups}
    assert groups[GROUP] == VERSION
    document = client.CustomObjectsApi(kube.api_client()).get_api_resources(GROUP, VERSION)
    listed = {r.name: r for r in document.resources}
    assert set(listed) == {"fluxjobs", "fluxjobs/status"}
    assert listed["fluxjobs"].short_names == ["fj"]
    assert listed["fluxjobs"].categories == ["fluxnode"]
    assert listed["fluxjobs"].namespaced is True
    assert listed["fluxjobs"].singular_name == "fluxjob"


def test_crud_selectors_conflicts_and_watch_like_built_in_objects(kube, custom):
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                                  {**fluxjob("a"), "metadata": {
                                                      "name": "a", "labels": {"team": "x"}}})
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, fluxjob("b"))
    assert made["metadata"]["generation"] == 1 and made["metadata"]["uid"]
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, fluxjob("a"))
    assert _error(exc) == (409, 'fluxjobs.fluxnode.io "a" already exists')
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                                  label_selector="team=x")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]
    assert listed["kind"] == "FluxJobList"
    stale = dict(made, spec={**made["spec"], "pods": 3})
    custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a", stale)
    with pytest.raises(ApiException) as exc:  # the same resourceVersion again: stale now
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a", stale)
    assert exc.value.status == 409
    events = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION,
                                  "default", PLURAL, resource_version=listed["metadata"][
                                      "resourceVersion"], timeout_seconds=5)
    seen = []
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "b")
    for event in events:
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "DELETED":
            break
    assert seen == [("MODIFIED", "a"), ("DELETED", "b")]
    with pytest.raises(ApiException) as exc:
        custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "b")
    assert _error(exc) == (404, 'fluxjobs.fluxnode.io "b" not found')


def test_the_schema_prunes_defaults_and_validates(kube, custom):
    body = fluxjob("a")
    body["spec"]["bogus"] = 1
    body["spec"]["template"] = {"anything": {"goes": True}}  # x-kubernetes-preserve-unknown
    body["extra"] = "dropped"
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    assert made["spec"] == {"pods": 2, "queue": "batch", "priority": 16,
                            "template": {"anything": {"goes": True}}}
    assert "extra" not in made
    bad = fluxjob("b", pods=0, priority="high")
    del bad["spec"]["pods"]
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, bad)
    assert _error(exc) == (422, 'FluxJob.fluxnode.io "b" is invalid: [spec.pods: Required '
                                'value, spec.priority: Invalid value: "string": spec.priority '
                                'in body must be of type integer: "string"]')
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                               fluxjob("c", pods=0))
    assert _error(exc) == (422, 'FluxJob.fluxnode.io "c" is invalid: spec.pods: Invalid value: '
                                '0: spec.pods in body should be greater than or equal to 1')
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "a",
                                                     {"status": {"phase": "Lost"}})
    assert _error(exc) == (422, 'FluxJob.fluxnode.io "a" is invalid: status.phase: Unsupported '
                                'value: "Lost": supported values: "Pending", "Queued", '
                                '"Running", "Completed", "Failed"')


def test_the_status_subresource_splits_spec_and_status(kube, custom):
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                           {**fluxjob("a"), "status": {"phase": "Running"}})
    stored = kube.get(f"{PLURAL}.{GROUP}", "a", "default")
    assert "status" not in stored  # dropped on create
    # a write to the main resource keeps the stored status and bumps the generation
    out = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a",
                                                {"spec": {"pods": 4},
                                                 "status": {"phase": "Running"}})
    assert out["spec"]["pods"] == 4 and "status" not in out
    assert out["metadata"]["generation"] == 2
    # a write to /status keeps everything else, and leaves the generation
    out = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "a",
        {"spec": {"pods": 9}, "metadata": {"labels": {"x": "y"}},
         "status": {"phase": "Queued", "position": 3}})
    assert out["status"] == {"phase": "Queued", "position": 3}
    assert out["spec"]["pods"] == 4 and "labels" not in out["metadata"]
    assert out["metadata"]["generation"] == 2
    # a metadata-only change does not bump it either
    out = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a",
                                                {"metadata": {"labels": {"x": "y"}}})
    assert out["metadata"]["generation"] == 2 and out["metadata"]["labels"] == {"x": "y"}


def test_a_cluster_scoped_crd_and_deleting_a_crd(kube, crds):
    crds.create_custom_resource_definition(fluxjob_crd(scope="Cluster"))
    custom = client.CustomObjectsApi(kube.api_client())
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, fluxjob("a"))
    assert "namespace" not in custom.get_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                               "a")["metadata"]
    with pytest.raises(ApiException) as exc:  # no namespaced path for a cluster resource
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert exc.value.status == 404
    crds.delete_custom_resource_definition(f"{PLURAL}.{GROUP}")
    with pytest.raises(ApiException) as exc:  # its objects and its resource are gone
        custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert exc.value.status == 404
    assert kube.list("customresourcedefinitions.apiextensions.k8s.io") == []


def test_what_a_crd_asks_and_the_emulator_does_not_serve_is_501(kube, crds):
    crd = fluxjob_crd()
    crd["spec"]["versions"].append({**crd["spec"]["versions"][0], "name": "v1",
                                    "storage": False})
    with pytest.raises(ApiException) as exc:
        crds.create_custom_resource_definition(crd)
    status, message = _error(exc)
    assert status == 501 and "only one served version" in message
    crd = fluxjob_crd()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["queue"]["pattern"] = "^[a-z]+$"
    with pytest.raises(ApiException) as exc:
        crds.create_custom_resource_definition(crd)
    status, message = _error(exc)
    assert status == 501 and "'pattern'" in message
    crd = fluxjob_crd()
    crd["spec"]["versions"][0]["storage"] = False
    with pytest.raises(ApiException) as exc:
        crds.create_custom_resource_definition(crd)
    status, message = _error(exc)
    assert status == 422 and message.startswith(
        'CustomResourceDefinition.apiextensions.k8s.io "fluxjobs.fluxnode.io" is invalid: '
        "spec.versions: Invalid value: ") and message.endswith(
        ": must have exactly one version marked as storage version")
    crd = fluxjob_crd()
    crd["metadata"]["name"] = "jobs.fluxnode.io"
    with pytest.raises(ApiException) as exc:
        crds.create_custom_resource_definition(crd)
    assert _error(exc) == (422, 'CustomResourceDefinition.apiextensions.k8s.io '
                                '"jobs.fluxnode.io" is invalid: metadata.name: Invalid value: '
                                '"jobs.fluxnode.io": must be spec.names.plural+"."+spec.group')


def test_rbac_from_manifests_applies_to_custom_resources_and_their_status(kube, custom,
                                                                          tmp_path):
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "reader", "namespace": "default"},
         "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "reader", "namespace": "default"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "ctl", "namespace": "default"}]},
    ]))
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, fluxjob("a"))
    user = "system:serviceaccount:default:ctl"
    path = kube.add_identity(user, RbacAuthorizer.from_manifests([manifest], "default", "ctl"))
    theirs = client.CustomObjectsApi(kube.api_client(path))
    assert theirs.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                               "a")["spec"]["pods"] == 2
    with pytest.raises(ApiException) as exc:
        theirs.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "a",
                                                     {"status": {"phase": "Running"}})
    assert _error(exc) == (403, f'fluxjobs.fluxnode.io "a" is forbidden: User "{user}" '
                                'cannot patch resource "fluxjobs/status" in API group '
                                '"fluxnode.io" in the namespace "default": no RBAC rule '
                                'allows it')


def test_kubectl_gets_fluxjobs_with_the_printer_columns(kube, tmp_path):
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(fluxjob_crd()))
    assert kubectl(kube, "apply", "-f", str(path)).check().stdout == \
        "customresourcedefinition.apiextensions.k8s.io/fluxjobs.fluxnode.io created\n"
    # a CRD prints with the generic convertor's columns: its name and RFC 3339 creation time
    created = kube.get("customresourcedefinitions.apiextensions.k8s.io",
                       "fluxjobs.fluxnode.io")["metadata"]["creationTimestamp"]
    assert parse_table(kubectl(kube, "get", "crd").check().stdout)[0] == [
        {"NAME": "fluxjobs.fluxnode.io", "CREATED AT": created}]
    jobs = [fluxjob("train", pods=4, queue="gpu", priority=50),
            {**fluxjob("wait", pods=1), "metadata": {"name": "wait", "namespace": "kube-system"}}]
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(jobs))
    assert kubectl(kube, "apply", "-f", str(path)).check().stdout.splitlines() == [
        "fluxjob.fluxnode.io/train created", "fluxjob.fluxnode.io/wait created"]
    kube.patch(f"{PLURAL}.{GROUP}", "train", {"status": {
        "phase": "Running", "nodes": "node[0-3]", "startTime": _ago(600)}}, "default", "merge")
    kube.patch(f"{PLURAL}.{GROUP}", "wait", {"status": {
        "phase": "Queued", "position": 2, "reason": "Unschedulable"}}, "kube-system", "merge")
    rows = parse_table(kubectl(kube, "get", "fluxjobs", "-A").check().stdout)[0]
    assert [list(r) for r in rows[:1]] == [["NAMESPACE", "NAME", "QUEUE", "PHASE", "PRIORITY",
                                            "POSITION", "PODS", "START", "AGE"]]
    assert [{k: v for k, v in r.items() if k != "AGE"} for r in rows] == [
        {"NAMESPACE": "default", "NAME": "train", "QUEUE": "gpu", "PHASE": "Running",
         "PRIORITY": "50", "POSITION": "", "PODS": "4", "START": "10m"},
        {"NAMESPACE": "kube-system", "NAME": "wait", "QUEUE": "batch", "PHASE": "Queued",
         "PRIORITY": "16", "POSITION": "2", "PODS": "1", "START": ""},
    ]  # a missing value is a null cell, which kubectl prints empty
    assert all(r["AGE"].endswith("s") for r in rows)  # created seconds ago
    # -o wide adds the priority-1 columns; the short name and the category find them too
    wide = parse_table(kubectl(kube, "get", "fj", "-n", "kube-system", "-o", "wide")
                       .check().stdout)[0]
    assert [(r["NAME"], r["NODES"], r["REASON"]) for r in wide] == [
        ("wait", "", "Unschedulable")]
    by_category = parse_table(kubectl(kube, "get", "fluxnode").check().stdout)[0]
    assert [r["NAME"] for r in by_category] == ["train"]  # one kind: no kind/ prefix


def test_kubectl_apply_of_a_fluxjob_with_an_unknown_field_is_refused(kube, tmp_path):
    crd = tmp_path / "crd.yaml"
    crd.write_text(yaml.safe_dump(fluxjob_crd()))
    kubectl(kube, "apply", "-f", str(crd)).check()
    job = fluxjob("typo")
    job["spec"]["podz"] = 3
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    result = kubectl(kube, "apply", "-f", str(path))
    assert result.returncode == 1
    assert 'strict decoding error: unknown field "spec.podz"' in result.stderr, result.stderr
    assert kube.list(f"{PLURAL}.{GROUP}", "default") == []
    # a second apply with a change sends a merge patch (a CRD has no patch strategies)
    job["spec"] = {"pods": 2}
    path.write_text(yaml.safe_dump(job))
    kubectl(kube, "apply", "-f", str(path)).check()
    job["spec"]["queue"] = "gpu"
    path.write_text(yaml.safe_dump(job))
    assert kubectl(kube, "apply", "-f", str(path)).check().stdout == \
        "fluxjob.fluxnode.io/typo configured\n"
    assert kube.get(f"{PLURAL}.{GROUP}", "typo", "default")["spec"]["queue"] == "gpu"
    assert kube.get(f"{PLURAL}.{GROUP}", "typo", "default")["apiVersion"] == API_VERSION


def test_a_group_version_the_crd_does_not_serve_is_404(kube, crds, custom):
    other = fluxjob_crd()  # another resource of the group, served at v1
    other["metadata"]["name"] = f"queues.{GROUP}"
    other["spec"]["names"] = {"plural": "queues", "kind": "Queue"}
    other["spec"]["versions"][0]["name"] = "v1"
    crds.create_custom_resource_definition(other)
    with pytest.raises(ApiException) as exc:
        custom.list_namespaced_custom_object(GROUP, "v1", "default", PLURAL)
    assert exc.value.status == 404
    assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []
