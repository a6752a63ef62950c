"""A Job's walltime (walltime.py): what Kubernetes enforces, nothing else."""

import pytest
from fluxnode.scheduler.binder.walltime import job_walltime, pods_walltime, walltime_left


def job(own=None, pod=None, completions=None, parallelism=None) -> dict:
    spec: dict = {"template": {"spec": {}}}
    if own is not None:
        spec["activeDeadlineSeconds"] = own
    if pod is not None:
        spec["template"]["spec"]["activeDeadlineSeconds"] = pod
    if completions is not None:
        spec["completions"] = completions
    if parallelism is not None:
        spec["parallelism"] = parallelism
    return spec


@pytest.mark.parametrize("spec, expected", [
    (job(), None),
    (job(own=600), 600),
    (job(own=600, pod=60, completions=2, parallelism=2), 600),  # the Job's bounds it all
    (job(pod=60, completions=2, parallelism=2), 60),  # each pod once: its own bounds it
    (job(pod=60, completions=4, parallelism=2), None),  # pods in waves: no bound
    (job(pod=60), None),  # no completions: pods until one succeeds
    (job(own=0), None),  # the API server refuses it; nothing to book by
])
def test_walltime(spec, expected):
    assert job_walltime(spec) == expected


@pytest.mark.parametrize("deadlines, expected", [
    ([30, 90, 60], 90),  # the group ends when its last pod must
    ([30, None], None),  # one pod without a deadline: the group has none
    ([], None),
])
def test_a_groups_walltime(deadlines, expected):
    pods = [{"spec": {} if d is None else {"activeDeadlineSeconds": d}} for d in deadlines]
    assert pods_walltime(pods) == expected


START = "2026-11-29T12:00:00Z"


def running(spec: dict, started: str | None = START) -> dict:
    return {"spec": spec, "status": {"startTime": started} if started else {}}


# 2026-11-29T12:00:00Z in seconds after the Unix epoch (calendar arithmetic:
# 20,786 days to 2026-11-29, times 86,400, plus 12 hours)
STARTED = 20_786 * 86_400 + 12 * 3_600


@pytest.mark.parametrize("spec, started, now, expected", [
    # the Job's own deadline counts from its startTime: 600 s, 500 gone, 100 left
    (job(own=600), START, STARTED + 500, 100),
    (job(own=600), START, STARTED + 599.5, 1),  # at least a second
    (job(own=600), START, STARTED + 900, 1),  # past it (the Job controller fails it)
    (job(own=600), None, STARTED + 500, 600),  # not started: all of it
    (job(own=600), "not a time", STARTED + 500, 600),
    # a pod's deadline counts from each pod's start: a new pod has all of it
    (job(pod=60, completions=4, parallelism=4), START, STARTED + 500, 60),
    (job(own=600, pod=60, completions=2, parallelism=2), START, STARTED + 500, 100),
    (job(), START, STARTED + 500, None),  # nothing bounds it
])
def test_what_a_running_jobs_new_pods_have_left(spec, started, now, expected):
    assert walltime_left(running(spec, started), now) == expected
