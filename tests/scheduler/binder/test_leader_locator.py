import json

import pytest
from fluxnode.scheduler.binder.leader_locator import LeaderLocator, LeaderNotFound
from kubernetes.client import CoreV1Api

from fluxnode.testing.kube_emulator import KubeEmulator


def test_rank_0_address_from_the_rank_map():
    with KubeEmulator(namespaces=("default", "fluxnode")) as kube:
        core = CoreV1Api(kube.api_client())
        locate = LeaderLocator(core)
        with pytest.raises(LeaderNotFound, match="fluxnode/fluxnode-ranks"):
            locate()
        kube.add_node("w1", address="10.0.0.7")
        kube.add_node("w2", address="10.0.0.8")
        kube.create("configmaps", {"metadata": {"name": "fluxnode-ranks", "namespace": "fluxnode"},
                                   "data": {"ranks.json": json.dumps({"hosts": ["w2", "w1"], "vacant": []})}}, "fluxnode")
        assert locate() == "tcp://10.0.0.8:8050"
        kube.patch("nodes", "w2", {"metadata": {"annotations": {"fluxnode.io/broker-port": "9000"}}})
        assert locate() == "tcp://10.0.0.8:9000"
