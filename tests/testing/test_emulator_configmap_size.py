"""The API emulator refuses a ConfigMap past 1 MiB of values, as the API server does
(pkg/apis/core/validation ValidateConfigMap: the values of data plus binaryData, the latter
counted decoded, at most core.MaxSecretSize = 1,048,576 bytes, reported on the whole object
as a 422), on create and on patch."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fluxnode.testing.kube_emulator import KubeEmulator

MIB = 1024 * 1024


@pytest.fixture
def core():
    kube = KubeEmulator(namespaces=("default",)).start()
    try:
        yield client.CoreV1Api(kube.api_client())
    finally:
        kube.stop()


def cm(name: str, data: dict | None = None, binary: dict | None = None) -> dict:
    return {"metadata": {"name": name}, "data": data or {}, "binaryData": binary or {}}


def test_one_mebibyte_of_values_is_the_limit(core):
    core.create_namespaced_config_map("default", cm("full", {"a": "x" * (MIB - 10),
                                                              "b": "y" * 10}))
    # binaryData counts decoded: 1 MiB of bytes is ~1.4 MB of base64 and still fits
    core.create_namespaced_config_map("default", cm("bin", binary={
        "z": base64.b64encode(b"\0" * MIB).decode()}))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_config_map("default", cm("over", {"a": "x" * MIB},
                                                        {"b": "AA=="}))
    assert exc.value.status == 422
    assert "Too long: may not be more than 1048576 bytes" in exc.value.body
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_config_map("full", "default", {"data": {"c": "z"}})
    assert exc.value.status == 422
    # a patch that removes as much as it adds is fine
    core.patch_namespaced_config_map("full", "default", {"data": {"b": None, "c": "z"}})
