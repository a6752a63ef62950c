"""A Job's walltime (walltime.py): what Kubernetes enforces, nothing else."""

import pytest
from fluxnode.scheduler.binder.walltime import job_walltime, pods_walltime


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
