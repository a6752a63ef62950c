import pytest
from fluxnode.scheduler.binder.podgroup import (
    SCHEDULER_PLUGINS,
    VOLCANO,
    GroupKey,
    PodGroupError,
    PodGroupObject,
    group_of,
    job_size,
)


def pod(name="p", uid="u1", labels=None, annotations=None, owners=None):
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "labels": labels or {},
            "annotations": annotations or {},
            "ownerReferences": owners or [],
        }
    }


def job_ref(name: str, uid: str, **fields) -> dict:
    """The controller reference kube's Job controller writes on the pods it creates (or
    adopts): apiVersion batch/v1, kind Job, controller true."""
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True, **fields}


def test_pod_without_group_is_a_group_of_one_keyed_by_uid():
    ident = group_of(pod(uid="abc"))
    assert ident.key == GroupKey("ns", "pod", "abc") and ident.size == 1


def test_scheduler_plugins_and_fluence_labels_with_size_label_or_annotation():
    a = group_of(
        pod(
            labels={
                "scheduling.x-k8s.io/pod-group": "g",
                "fluence.flux-framework.org/group-size": "8",
            }
        )
    )
    b = group_of(
        pod(
            labels={"fluence.flux-framework.org/pod-group": "g"},
            annotations={"fluence.flux-framework.org/group-size": "8"},
        )
    )
    assert a == b
    assert a.key == GroupKey("ns", "group", "g") and a.size == 8


def test_indexed_job_pods_form_one_group_sized_by_the_job():
    labels = {
        "batch.kubernetes.io/job-completion-index": "3",
        "job-name": "train",
        "controller-uid": "cu1",
    }
    seen = []

    def lookup(ns, name):
        seen.append((ns, name))
        return job_size({"spec": {"completions": 4, "parallelism": 4}})

    ident = group_of(pod(labels=labels, owners=[job_ref("train", "cu1")]), lookup)
    assert ident.key == GroupKey("ns", "job", "train.cu1") and ident.size == 4
    assert seen == [("ns", "train")]


def test_job_labels_without_the_jobs_controller_reference_make_no_job_pod():
    """Kube's Job controller manages the pods whose controller reference is the Job
    (job_controller.go getPodsForJob, ClaimPods); labels anyone may write do not make a pod
    the Job's: each such pod is a group of its own, and never joins the Job's group."""
    labels = {"batch.kubernetes.io/job-completion-index": "0",
              "batch.kubernetes.io/job-name": "train",
              "batch.kubernetes.io/controller-uid": "cu1"}
    annotations = {"fluxnode.io/job": "train"}  # as the webhook leaves an admitted template
    owned = group_of(pod(uid="p0", labels=labels, annotations=annotations,
                         owners=[job_ref("train", "cu1")]), lambda ns, name: 2)
    assert str(owned.key) == "ns/job/train.cu1"
    lookalikes = {
        "no owner": [],
        "an owner that is not its controller": [job_ref("train", "cu1", controller=False)],
        "controller field absent": [{k: v for k, v in job_ref("train", "cu1").items()
                                     if k != "controller"}],
        "another kind's controller": [job_ref("train", "cu1", kind="CronJob")],
        "another API group's Job": [job_ref("train", "cu1", apiVersion="example.com/v1")],
    }
    for why, owners in lookalikes.items():
        ident = group_of(pod(uid="p1", labels=labels, annotations=annotations, owners=owners),
                         lambda ns, name: 2)
        assert str(ident.key) == "ns/pod/p1" and ident.size == 1, why
    # the uid in the key is the controller's, not what the label says
    forged = group_of(pod(uid="p2", labels={**labels, "batch.kubernetes.io/controller-uid": "x"},
                          owners=[job_ref("train", "cu1")]), lambda ns, name: 2)
    assert forged.key == owned.key


def test_job_size_is_pods_at_once():
    assert job_size({"spec": {"completions": 10, "parallelism": 4}}) == 4
    assert job_size({"spec": {"completions": 3}}) == 3
    assert job_size({"spec": {}}) == 1


def test_bad_size_is_a_clear_error():
    with pytest.raises(PodGroupError, match="pod ns/p labels: group size 'x' is not an integer"):
        group_of(
            pod(
                labels={
                    "scheduling.x-k8s.io/pod-group": "g",
                    "fluence.flux-framework.org/group-size": "x",
                }
            )
        )


def test_key_round_trips():
    key = GroupKey("ns", "job", "a/b")
    assert GroupKey.parse(str(key)) == key


def test_kueue_plain_pod_groups_name_and_size():
    ident = group_of(pod(labels={"kueue.x-k8s.io/pod-group-name": "kg"},
                         annotations={"kueue.x-k8s.io/pod-group-total-count": "5"}))
    assert ident.key == GroupKey("ns", "group", "kg") and ident.size == 5


def test_the_pods_of_a_job_the_webhook_admitted_are_one_group_indexed_or_not():
    """docs/binder.md "The FluxJob loop": the webhook's fluxnode.io/job annotation on an
    opted-in Job's template groups its pods with the Job (name and uid), sized by the Job."""
    pod = {"metadata": {"name": "plain-x", "namespace": "ns", "uid": "p1",
                        "labels": {"batch.kubernetes.io/job-name": "plain",
                                   "batch.kubernetes.io/controller-uid": "u-1"},
                        "annotations": {"fluxnode.io/job": "plain"},
                        "ownerReferences": [job_ref("plain", "u-1")]}}
    ident = group_of(pod, lambda namespace, name: {("ns", "plain"): 3}[(namespace, name)])
    assert (str(ident.key), ident.size) == ("ns/job/plain.u-1", 3)
    pod["metadata"]["annotations"] = {}  # a Job not admitted by fluxnode: pods one by one
    assert str(group_of(pod, lambda namespace, name: 3).key) == "ns/pod/p1"
    pod["metadata"]["annotations"] = {"fluxnode.io/job": "other"}  # not its own Job's
    assert str(group_of(pod, lambda namespace, name: 3).key) == "ns/pod/p1"


# -- PodGroup objects (scheduler-plugins, Volcano) ---------------------------------------



class Directory:
    """A PodGroupDirectory over objects this test writes (the protocol podgroup.py reads)."""

    def __init__(self, kinds, objects=()):
        self.kinds = set(kinds)
        self.objects = {(o.kind, o.namespace, o.name): o for o in objects}

    def installed(self, kind):
        return kind in self.kinds

    def get(self, kind, namespace, name):
        return self.objects.get((kind, namespace, name))


SP_LABEL = {"scheduling.x-k8s.io/pod-group": "g"}
VOLCANO_ANNOTATION = {"scheduling.k8s.io/group-name": "vg"}


def test_a_scheduler_plugins_podgroup_sizes_the_group_by_min_member():
    obj = PodGroupObject(SCHEDULER_PLUGINS, "ns", "g", "pg-uid", 3)
    ident = group_of(pod(labels=SP_LABEL), podgroups=Directory([SCHEDULER_PLUGINS], [obj]))
    assert (ident.key, ident.size, ident.declared, ident.waiting) == (
        GroupKey("ns", "group", "g"), 3, True, "")
    assert ident.podgroup is obj


def test_a_missing_podgroup_waits_saying_so_when_its_crd_is_installed():
    ident = group_of(pod(labels=SP_LABEL), podgroups=Directory([SCHEDULER_PLUGINS]))
    assert ident.waiting.startswith(
        "waiting for PodGroup ns/g (scheduling.x-k8s.io/v1alpha1): it does not exist yet")
    # another namespace's PodGroup of that name is not this pod's
    other = PodGroupObject(SCHEDULER_PLUGINS, "elsewhere", "g", "u", 2)
    assert group_of(pod(labels=SP_LABEL),
                    podgroups=Directory([SCHEDULER_PLUGINS], [other])).waiting


def test_without_the_crd_the_label_is_a_plain_group_name():
    ident = group_of(pod(labels=SP_LABEL), podgroups=Directory([]))
    assert (ident.size, ident.declared, ident.waiting) == (1, False, "")
    sized = group_of(pod(labels={**SP_LABEL, "fluxnode.io/group-size": "4"}),
                     podgroups=Directory([]))
    assert (sized.size, sized.declared) == (4, True)


def test_volcano_group_name_annotation_names_a_volcano_podgroup():
    obj = PodGroupObject(VOLCANO, "ns", "vg", "v-uid", 5)
    ident = group_of(pod(annotations=VOLCANO_ANNOTATION),
                     podgroups=Directory([VOLCANO], [obj]))
    assert (ident.key, ident.size, ident.declared) == (GroupKey("ns", "volcano", "vg"), 5, True)
    # a scheduler-plugins PodGroup of the same name is not Volcano's
    sp = PodGroupObject(SCHEDULER_PLUGINS, "ns", "vg", "u", 2)
    waiting = group_of(pod(annotations=VOLCANO_ANNOTATION),
                       podgroups=Directory([VOLCANO, SCHEDULER_PLUGINS], [sp]))
    assert "PodGroup ns/vg (scheduling.volcano.sh/v1beta1)" in waiting.waiting


def test_a_podgroup_min_member_below_one_is_a_clear_error():
    obj = PodGroupObject(SCHEDULER_PLUGINS, "ns", "g", "u", 0)
    with pytest.raises(PodGroupError, match=r"PodGroup ns/g .* spec.minMember: group size 0"):
        group_of(pod(labels=SP_LABEL), podgroups=Directory([SCHEDULER_PLUGINS], [obj]))
