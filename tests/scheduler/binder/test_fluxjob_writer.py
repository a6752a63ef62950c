"""FluxJob records written off the binder's loop (fluxjob_writer.py), against the API emulator
with the product's CRD (daemonset/workloads/fluxjob-crd.yaml) through the binder's own writer
(HttpWriter over the official client's connection settings) and a real thread pool.

Oracles: the record as the emulator stores it (its status after the writes settle), the
emulator's request log (which writes were made), the CRD's absence seen as a 404."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from fluxnode.agent.kube import raw as kube_raw
from fluxnode.scheduler.binder.binding import PodWriter
from fluxnode.scheduler.binder.fluxjob import FluxJob, PriorityClasses
from fluxnode.scheduler.binder.fluxjob_writer import (
    BATCH,
    GROUP,
    PLURAL,
    SETTLE,
    VERSION,
    FluxJobWriter,
)
from fluxnode.scheduler.binder.http_writer import writer_for
from kubernetes import client
from support.paths import REPO

from fluxnode.testing.waiting import wait_for

FLUXJOBS = "fluxjobs.fluxnode.io"


def job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "labels": {"fluxnode.io/queue": "batch"}},
            "spec": {"completions": 3, "parallelism": 3, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [{
                         "name": "c", "image": "x",
                         "resources": {"requests": {"cpu": "1"}}}]}}}}


@pytest.fixture
def parts(kube):
    api = kube.api_client()
    pool = ThreadPoolExecutor(4)
    custom = client.CustomObjectsApi(api)
    no_crd: list[int] = []

    def delete(namespace: str, name: str) -> None:
        kube_raw.call(custom.delete_namespaced_custom_object, GROUP, VERSION, namespace,
                      PLURAL, name)

    writer = FluxJobWriter(PodWriter(writer_for(api, 4)), pool, delete,
                           lambda: no_crd.append(1))
    yield kube, api, writer, no_crd
    pool.shutdown(wait=True)


def install_crd(api) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(yaml.safe_load(
        (REPO / "daemonset" / "workloads" / "fluxjob-crd.yaml").read_text()))


def record(name: str, phase: str, **status) -> FluxJob:
    r = FluxJob.from_job(job(name), PriorityClasses())
    r.status.phase = phase
    for k, v in status.items():
        setattr(r.status, k, v)
    return r


def stored_status(kube, name: str) -> dict | None:
    try:
        return kube.get(FLUXJOBS, name, "default").get("status")
    except Exception:
        return None


def test_a_record_is_created_then_has_the_newest_status_with_unset_fields_gone(parts):
    kube, api, writer, no_crd = parts
    install_crd(api)
    key = ("default", "a")
    first = record("a", "Queued", position=2, reason="busy: not enough free resources now")
    writer.create(key, first.to_object())
    writer.status(key, first.status_patch())
    last = record("a", "Running", bound=3, nodes="node[0-2]", allocation=7)
    writer.status(key, record("a", "Admitted", nodes="node[0-2]", allocation=7).status_patch())
    writer.status(key, last.status_patch())
    wait_for(lambda: (stored_status(kube, "a") or {}).get("phase") == "Running", 10,
             what="the newest status written")
    status = stored_status(kube, "a")
    assert status == last.status_patch()["status"]
    assert "position" not in status and "reason" not in status  # written as null: gone
    assert no_crd == []


def test_without_the_crd_nothing_more_is_written_and_the_caller_is_told(parts):
    kube, api, writer, no_crd = parts
    key = ("default", "b")
    writer.create(key, record("b", "Queued").to_object())
    wait_for(lambda: no_crd, 10, what="the missing CRD reported")
    before = kube.count_requests("patch", FLUXJOBS)
    writer.status(key, record("b", "Admitted").status_patch())
    writer.retry()
    assert kube.count_requests("patch", FLUXJOBS) == before == 0


def test_a_deleted_record_goes_and_a_job_of_the_same_name_gets_a_new_one(parts):
    kube, api, writer, no_crd = parts
    install_crd(api)
    key = ("default", "c")
    writer.create(key, record("c", "Queued").to_object())
    wait_for(lambda: _exists(kube, "c"), 10, what="the record stored")
    gone = threading.Event()
    kube.store.listeners.append(
        lambda ch: gone.set() if ch.ref == FLUXJOBS and ch.type == "DELETED" else None)
    writer.delete(key)
    writer.create(key, record("c", "Queued", position=1).to_object())  # the Job came back
    writer.status(key, record("c", "Queued", position=1).status_patch())
    assert gone.wait(10)
    wait_for(lambda: (stored_status(kube, "c") or {}).get("position") == 1, 10,
             what="the new record's status")
    assert kube.count_requests("create", FLUXJOBS) == 2


def test_a_create_never_sent_is_dropped_with_its_delete(parts):
    kube, api, writer, no_crd = parts
    install_crd(api)
    gate = threading.Event()
    writer.pool.submit(gate.wait, 10)  # hold every worker: nothing is written yet
    for _ in range(3):
        writer.pool.submit(gate.wait, 10)
    key = ("default", "d")
    writer.create(key, record("d", "Queued").to_object())
    writer.delete(key)
    gate.set()
    writer.pool.shutdown(wait=True)  # every write asked for is done
    assert not _exists(kube, "d")
    assert kube.count_requests("create", FLUXJOBS) == 0
    assert kube.count_requests("delete", FLUXJOBS) == 0


def _exists(kube, name: str) -> bool:
    try:
        kube.get(FLUXJOBS, name, "default")
        return True
    except Exception:
        return False


def test_bound_counts_settle_only_the_last_status_is_written(parts):
    """While a Job's pods are being bound (Admitted 1 of 3, 2 of 3), the counts wait SETTLE
    seconds: Running, asked before that, replaces them and is the only write after Admitted."""
    kube, api, writer, no_crd = parts
    install_crd(api)
    key = ("default", "e")
    writer.create(key, record("e", "Queued").to_object())
    admitted = record("e", "Admitted", nodes="node[0-2]", allocation=7)
    writer.status(key, admitted.status_patch())
    wait_for(lambda: (stored_status(kube, "e") or {}).get("phase") == "Admitted", 10,
             what="Admitted written")
    patches = kube.count_requests("patch", FLUXJOBS)
    for bound in (1, 2):
        writer.status(key, record("e", "Admitted", bound=bound, nodes="node[0-2]",
                                  allocation=7).status_patch(), settle=True)
        writer.retry()  # the loop's pass: not due yet
    last = record("e", "Running", bound=3, nodes="node[0-2]", allocation=7)
    writer.status(key, last.status_patch())
    wait_for(lambda: (stored_status(kube, "e") or {}).get("phase") == "Running", 10,
             what="Running written")
    writer.pool.shutdown(wait=True)
    assert stored_status(kube, "e") == last.status_patch()["status"]
    assert kube.count_requests("patch", FLUXJOBS) == patches + 1  # Running only


def test_a_count_nothing_replaces_is_written_once_due(parts):
    """A binding that stalls: its count is written by the first `retry` after SETTLE."""
    kube, api, writer, no_crd = parts
    install_crd(api)
    key = ("default", "f")
    writer.create(key, record("f", "Queued").to_object())
    wait_for(lambda: _exists(kube, "f"), 10, what="the record stored")
    count = record("f", "Admitted", bound=1, nodes="node0", allocation=3)
    writer.status(key, count.status_patch(), settle=True)
    writer.retry()
    assert stored_status(kube, "f") is None  # not due: nothing written yet
    time.sleep(SETTLE)
    writer.retry()
    wait_for(lambda: stored_status(kube, "f") == count.status_patch()["status"], 10,
             what="the count written once due")


def test_admitted_settles_and_running_asked_before_it_is_due_is_the_only_status(parts):
    """The loop asks Admitted with settle (fluxjob_loop.py): a Job whose pods are all bound
    before SETTLE gets one status write, Running; the record never says Admitted. Another
    record's status, asked after Admitted and stored, shows the writer had its turn at it."""
    kube, api, writer, no_crd = parts
    install_crd(api)
    key, other = ("default", "g"), ("default", "h")
    phases: list[str] = []
    kube.store.listeners.append(
        lambda ch: phases.append((ch.obj.get("status") or {}).get("phase"))
        if ch.ref == FLUXJOBS and ch.type == "MODIFIED" and ch.obj["metadata"]["name"] == "g"
        else None)
    for k in (key, other):
        writer.create(k, record(k[1], "Queued").to_object())
    wait_for(lambda: _exists(kube, "g") and _exists(kube, "h"), 10, what="the records stored")
    writer.status(key, record("g", "Admitted", nodes="node[0-2]", allocation=7).status_patch(),
                  settle=True)
    writer.status(other, record("h", "Queued", position=1).status_patch())
    writer.retry()  # the loop's pass: not due yet
    wait_for(lambda: (stored_status(kube, "h") or {}).get("position") == 1, 10,
             what="the other record's status")
    last = record("g", "Running", bound=3, nodes="node[0-2]", allocation=7)
    writer.status(key, last.status_patch())
    wait_for(lambda: (stored_status(kube, "g") or {}).get("phase") == "Running", 10,
             what="Running written")
    writer.pool.shutdown(wait=True)
    assert phases == ["Running"]
    assert kube.count_requests("patch", FLUXJOBS) == 2  # g's Running, h's Queued


def test_many_records_are_written_in_batches_each_create_before_its_status(parts):
    """More records than one batch (BATCH) at once: every record stored with its status, one
    create and one status patch each (a patch sent before its record's create would be a 404,
    written again: more patches than records)."""
    kube, api, writer, no_crd = parts
    install_crd(api)
    names = [f"m{i:03d}" for i in range(2 * BATCH + 5)]
    for i, name in enumerate(names):
        writer.create(("default", name), record(name, "Queued").to_object())
        writer.status(("default", name), record(name, "Queued", position=i).status_patch())
    wait_for(lambda: all((stored_status(kube, n) or {}).get("position") == i
                         for i, n in enumerate(names)), 30, what="every record's status")
    writer.pool.shutdown(wait=True)
    assert kube.count_requests("create", FLUXJOBS) == len(names)
    assert kube.count_requests("patch", FLUXJOBS) == len(names)
    assert no_crd == []
