"""Queue limits as the ConfigMap says them (queue_limits.py): parsed, checked, worded.
Expectations are sums of the declared sizes, computed here."""

import pytest
from fluxnode.scheduler.binder.queue_limits import (
    Ask,
    QueueLimits,
    QueueLimitsError,
)

GI = 1024**3


def limits(text: str) -> QueueLimits:
    return QueueLimits.from_configmap({"data": {"queues.yaml": text}})


def test_a_job_past_a_limit_is_held_saying_the_numbers():
    q = limits("batch: {cores: 16, gpus: 2, memory: 64Gi}\n")
    used = Ask(cores=4 * 3, gpus=0, memory=0)  # three admitted Jobs of 4 cores
    assert q.held("batch", used, Ask(cores=4)) is None  # 16 of 16: allowed
    assert q.held("batch", used, Ask(cores=8)) == (
        "queue 'batch' limit: 12 of 16 cores in use, this Job asks 8")
    assert q.held("batch", Ask(gpus=2), Ask(gpus=1)) == (
        "queue 'batch' limit: 2 of 2 GPUs in use, this Job asks 1")
    assert q.held("batch", Ask(memory=60 * GI), Ask(memory=8 * GI)) == (
        "queue 'batch' limit: 60Gi of 64Gi memory in use, this Job asks 8Gi")


def test_an_unnamed_queue_and_an_unnamed_resource_have_no_limit():
    q = limits("batch: {cores: 1}\n")
    assert q.held("other", Ask(1000, 1000, 1000 * GI), Ask(1000, 1000, 1000 * GI)) is None
    assert q.held("batch", Ask(0, 1000, 1000 * GI), Ask(1, 1000, 1000 * GI)) is None
    assert QueueLimits.from_configmap(None).held("batch", Ask(), Ask(10**6)) is None


@pytest.mark.parametrize("text, message", [
    ("batch: {cpus: 4}", "unknown limit 'cpus'"),
    ("batch: {cores: -1}", "batch'.cores: must be a whole number >= 0"),
    ("batch: {cores: 2.5}", "must be a whole number"),
    ("batch: {memory: lots}", "memory"),
    ("- batch", "must map queue names to limits"),
    ("batch: [1]", "must be a mapping"),
])
def test_a_bad_configmap_is_refused_whole(text, message):
    with pytest.raises(QueueLimitsError) as exc:
        limits(text)
    assert message in str(exc.value)
