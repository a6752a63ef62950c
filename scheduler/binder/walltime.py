"""A workload's walltime: how long the graph scheduler books its resources for.

Fluxion books every job for its duration and finds a reservation's start from the ends of
what runs; a job without one gets the default (until the graph's end), so nothing can be
said about when what waits behind it starts. Kubernetes has one field that is a real
walltime, because the system enforces it: ``activeDeadlineSeconds``. A Job's
(spec.activeDeadlineSeconds) bounds the whole Job from its start (the Job controller
fails it with DeadlineExceeded and deletes its pods; the clock restarts when a suspended
Job is resumed, which is when fluxnode admits it). A pod's
(spec.template.spec.activeDeadlineSeconds, enforced by the kubelet) bounds each pod from
its start, so it bounds the Job only when every pod runs once: completions set and no more
than parallelism. A group of pods (the scheduling cycle's) is bounded by its pods' own
deadlines when every pod has one: the longest. Anything else has no walltime (None), and
the service books it until it is cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable

from fluxnode.scheduler.binder.job_shape import JobShapeError, integer_field
from fluxnode.scheduler.binder.queue import epoch_seconds


def job_walltime(spec: dict) -> int | None:
    """Seconds a Job (its spec as stored) may run, or None when nothing bounds it."""
    try:
        own = spec.get("activeDeadlineSeconds")
        if own is not None:
            return integer_field(own, "spec.activeDeadlineSeconds", minimum=1)
        pod = ((spec.get("template") or {}).get("spec") or {}).get("activeDeadlineSeconds")
        completions, parallelism = spec.get("completions"), spec.get("parallelism", 1)
        if pod is None or completions is None or completions > parallelism:
            return None
        return integer_field(pod, "spec.template.spec.activeDeadlineSeconds", minimum=1)
    except (JobShapeError, TypeError):
        return None  # the API server refuses such a Job; nothing to book by


def walltime_left(job: dict, now: float) -> int | None:
    """Seconds the pods a running Job makes from `now` on may run (its growth's booking:
    fluxjob_loop.py), or None when nothing bounds them. The Job's own deadline counts from
    its status.startTime (the Job controller fails the Job at startTime + deadline), so
    what is left of it, at least 1; a pod's (the template's) counts from each pod's own
    start, so a new pod has all of it."""
    spec = job.get("spec") or {}
    total = job_walltime(spec)
    started = (job.get("status") or {}).get("startTime")
    if total is None or spec.get("activeDeadlineSeconds") is None or not started:
        return total
    try:
        return max(1, int(total - (now - epoch_seconds(started))))
    except ValueError:  # not a time the API server writes: the whole deadline, as unstarted
        return total


def pods_walltime(pods: Iterable[dict]) -> int | None:
    """Seconds a group of pods may run: the longest spec.activeDeadlineSeconds when every pod
    has one, else None."""
    longest = None
    for pod in pods:
        value = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        try:
            seconds = integer_field(value, "spec.activeDeadlineSeconds", minimum=1)
        except JobShapeError:
            return None
        longest = seconds if longest is None else max(longest, seconds)
    return longest
