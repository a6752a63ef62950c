"""`kubectl fluxnode why JOB|POD`: why a workload or a pod is where it is, in words.

Design: everything comes from the API server, as the binder left it for users: for a Job,
its FluxJob record (phase, position, reason, start; scheduler/binder/fluxjob.py) and the
pods its Job controller made (label ``batch.kubernetes.io/job-name``); for a pod, its
phase and node, its conditions, its scheduling gates (``fluxnode.io/admission`` is
fluxnode's: it holds the pod until its whole group is admitted) and the message of the last
Event fluxnode wrote about it (source component ``fluxnode``, scheduler/binder/binding.py).

A pod of a declared group (a group label, Volcano's annotation) points to its group's
FluxJob record (scheduler/binder/podgroup_records.py), named as podgroup.py `record_name`
names it: the group's phase, position and reason are there, not on one pod.

The functions here take objects as the API returns them and give lines; the reading is in
kubectl_plugin.py. A bare NAME is looked up as a Job first, then as a pod; ``job/NAME`` and
``pod/NAME`` say which.
"""

from __future__ import annotations

ADMISSION_GATE = "fluxnode.io/admission"  # scheduler/binder/admission.py ADMISSION_GATE
EVENT_SOURCE = "fluxnode"  # the binder's Events (its scheduler name)
PHASE_WORDS = {
    "Queued": "waiting in its queue: its Job stays suspended (no pods) until all its pods "
              "fit at once",
    "Reserved": ("at the head of its queue with a reservation: it starts when the resources "
                 "booked for it free up, by START when one is known"),
    "Admitted": "admitted: its Job runs and fluxnode binds each pod into its allocation",
    "Running": "running: every pod is bound",
    # Running with a POSITION: its parallelism was raised (fluxjob_loop.py, its growth)
    "Growing": ("running, and grown: its parallelism was raised, so the slots for its new "
                "pods wait in the queue at that position; the pods it runs keep theirs"),
    "Finished": "finished: its allocation is given back",
    "Failed": "failed: its allocation is given back",
}


def parse_target(target: str) -> tuple[str | None, str]:
    """``job/NAME``, ``pod/NAME`` or ``NAME`` -> (kind or None, name); bad input raises
    ValueError naming it."""
    kind, sep, name = target.partition("/")
    if not sep:
        kind, name = None, target
    elif kind.lower() in ("job", "jobs", "job.batch", "jobs.batch"):
        kind = "job"
    elif kind.lower() in ("pod", "pods", "po"):
        kind = "pod"
    else:
        raise ValueError(f"{target!r}: expected JOB, job/NAME or pod/NAME, not kind {kind!r}")
    if not name or "/" in name:
        raise ValueError(f"{target!r}: expected JOB, job/NAME or pod/NAME")
    return kind, name


def job_lines(namespace: str, name: str, fluxjob: dict | None, job: dict,
              pods: list[dict]) -> list[str]:
    """Why Job ``namespace/name`` is where it is."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    lines = []
    if fluxjob is None:
        if "fluxnode.io/queue" not in labels:
            lines.append(f"Job {namespace}/{name} is not queued by fluxnode: it has no "
                         "fluxnode.io/queue label (add one when creating it to opt in).")
        else:
            lines.append(f"Job {namespace}/{name} has no FluxJob record yet: is the binder "
                         "running and the FluxJob CRD installed (kubectl apply -k "
                         "daemonset/workloads/)?")
    else:
        spec, status = fluxjob.get("spec") or {}, fluxjob.get("status") or {}
        phase = status.get("phase") or "Queued"
        where = f" (position {status['position']})" if isinstance(status.get("position"),
                                                                   int) else ""
        lines.append(f"Job {namespace}/{name}: {phase}{where} in queue "
                     f"{spec.get('queue', '?')!r}, priority {spec.get('priority', 'unknown')}.")
        growing = phase == "Running" and where
        lines.append(f"  {PHASE_WORDS.get('Growing' if growing else phase, phase)}.")
        if status.get("reason"):
            lines.append(f"  reason: {status['reason']}")
        if status.get("start"):
            lines.append(f"  starts: {status['start']}")
        if status.get("nodes"):
            lines.append(f"  nodes: {status['nodes']}")
        lines.append(f"  pods bound: {status.get('pods') or '0/' + str(spec.get('pods', '?'))}")
    if not pods:
        suspended = (job.get("spec") or {}).get("suspend")
        lines.append("  no pods yet" + (" (the Job is suspended)" if suspended else ""))
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        lines.append(f"  pod {pod['metadata']['name']}: {_pod_state(pod)}")
    return lines


def _pod_state(pod: dict) -> str:
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    node = spec.get("nodeName")
    return f"{status.get('phase') or 'Pending'}" + (f" on {node}" if node else ", not bound")


def group_lines(group: str, record: str, fluxjob: dict | None) -> list[str]:
    """Where a pod's group stands, from its FluxJob record (or that there is none yet)."""
    if fluxjob is None:
        return [f"  in pod group {group}: no FluxJob {record} yet (the binder writes one for "
                "a gated group once it leads, with the FluxJob CRD installed)."]
    status = fluxjob.get("status") or {}
    phase = status.get("phase") or "Queued"
    where = f", position {status['position']}" if isinstance(status.get("position"),
                                                              int) else ""
    lines = [f"  in pod group {group}: FluxJob {record} is {phase}{where}, pods bound "
             f"{status.get('pods') or '?'} (kubectl get fluxjob {record} -o yaml)."]
    if status.get("reason"):
        lines.append(f"  group reason: {status['reason']}")
    return lines


def pod_lines(namespace: str, name: str, pod: dict, events: list[dict],
              group: list[str] | None = None) -> list[str]:
    """Why pod ``namespace/name`` is where it is: state, gates, its group's record
    (`group_lines`, when it has one), conditions, last event."""
    spec = pod.get("spec") or {}
    lines = [f"Pod {namespace}/{name}: {_pod_state(pod)} (scheduler "
             f"{spec.get('schedulerName') or 'default-scheduler'})."]
    gates = [g.get("name") for g in spec.get("schedulingGates") or [] if isinstance(g, dict)]
    for gate in gates:
        if gate == ADMISSION_GATE:
            lines.append(f"  gated by {gate}: fluxnode holds it until its whole group is "
                         "admitted (see `kubectl fluxnode queue`).")
        else:
            lines.append(f"  gated by {gate}: not fluxnode's gate; whoever set it removes it.")
    lines.extend(group or [])
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and not c.get("message"):
            continue  # a condition met says nothing a user acts on
        words = ": ".join(x for x in (c.get("reason"), c.get("message")) if x)
        lines.append(f"  condition {c.get('type')}={c.get('status')}"
                     + (f" ({words})" if words else ""))
    ours = [e for e in events if _about(e, name) and _from_fluxnode(e)]
    if ours:
        last = max(ours, key=_event_time)
        lines.append(f"  last fluxnode event: {last.get('reason', '')}: "
                     f"{last.get('message') or last.get('note') or ''}".rstrip())
    else:
        lines.append("  no event from fluxnode about it")
    return lines


def _about(event: dict, name: str) -> bool:
    obj = event.get("involvedObject") or event.get("regarding") or {}
    return obj.get("kind") == "Pod" and obj.get("name") == name


def _from_fluxnode(event: dict) -> bool:
    source = (event.get("source") or {}).get("component") or ""
    return EVENT_SOURCE in (source, event.get("reportingComponent") or "",
                            event.get("reportingController") or "")


def _event_time(event: dict) -> str:
    return (event.get("lastTimestamp") or event.get("eventTime") or
            event.get("firstTimestamp") or (event.get("metadata") or {}).get(
                "creationTimestamp") or "")
