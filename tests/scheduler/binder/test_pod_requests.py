import pytest
from fluxnode.scheduler.binder.pod_requests import PodRequestError, PodRequests, pod_requests
from fluxnode.scheduler.jobspec.builder import SlotKind


def pod(containers=(), init=(), overhead=None):
    spec = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def c(requests=None, limits=None, **extra):
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


def test_containers_are_summed_and_rounded_to_whole_cores():
    req = pod_requests(
        pod([c({"cpu": "500m", "memory": "100Mi"}), c({"cpu": "1", "memory": "1Gi"})])
    )
    assert req == PodRequests(1500, (100 + 1024) * 1024 * 1024, 0)
    assert req.cores == 2
    assert req.memory_mib == 1124


def test_init_containers_count_as_max_not_sum():
    req = pod_requests(
        pod([c({"cpu": "1"})], init=[c({"cpu": "3", "memory": "1Mi"}), c({"cpu": "2"})])
    )
    assert req.millicpu == 3000
    assert req.memory_bytes == 1024 * 1024


def test_sidecar_init_containers_add_to_the_app():
    sidecar = c({"cpu": "1"}, restartPolicy="Always")
    req = pod_requests(pod([c({"cpu": "2"})], init=[sidecar, c({"cpu": "2"})]))
    # app 2 + sidecar 1 = 3; init peak = 2 + 1 = 3
    assert req.millicpu == 3000


def test_overhead_is_added_and_limits_default_requests():
    req = pod_requests(
        pod([c(limits={"cpu": "2", "nvidia.com/gpu": "1"})], overhead={"cpu": "250m"})
    )
    assert req == PodRequests(2250, 0, 1)


def test_pod_without_requests_asks_for_nothing():
    assert pod_requests(pod([{"name": "c"}])) == PodRequests()


def test_bad_quantity_names_the_container():
    with pytest.raises(PodRequestError, match=r"pod ns/p spec.containers\[1\].resources.cpu"):
        pod_requests(pod([c({"cpu": "1"}), c({"cpu": "lots"})]))


def test_a_pods_slot_is_whole_cores_at_least_one_and_memory_in_mib_rounded_up():
    assert pod_requests(pod([c({"cpu": "1500m", "memory": "1Mi"}),
                             c({"memory": "1"})])).slot() == SlotKind(2, 0, 2)
    assert pod_requests(pod([{"name": "c"}])).slot() == SlotKind(1, 0, 0)
    assert pod_requests(pod([c(limits={"nvidia.com/gpu": "2"})])).slot() == SlotKind(1, 2, 0)


def test_a_quantity_read_again_reads_the_same_and_a_bad_one_is_refused_every_time():
    """ResourceLists are remembered by value (pod_requests.py): the second read of the same
    quantities gives what the first did, a bad value is refused each time with its field
    named, and the memory of them stays bounded."""
    from fluxnode.scheduler.binder import pod_requests as module

    first = pod_requests(pod([c({"cpu": "250m", "memory": "3Gi"})]))
    assert pod_requests(pod([c({"cpu": "250m", "memory": "3Gi"})])) == first \
        == PodRequests(250, 3 * 1024 ** 3, 0)
    for _ in range(2):
        with pytest.raises(PodRequestError, match=r"spec.containers\[0\].resources.cpu"):
            pod_requests(pod([c({"cpu": "1.5.5"})]))
    for i in range(module._READ_MAX + 10):
        pod_requests(pod([c({"cpu": f"{i}m"})]))
    assert len(module._READ) <= module._READ_MAX
    assert pod_requests(pod([c({"cpu": "7m"})])) == PodRequests(7, 0, 0)
