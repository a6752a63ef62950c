"""Test doubles that tests and benchmarks share: a Kubernetes API server on loopback.

`fluxnode.testing.kube_emulator.KubeEmulator` serves the Kubernetes API (an aiohttp
server with resourceVersions, watches, selectors, patches, RBAC from the manifests) to the
official client, so the node agent and the binder are tested, and benchmarked, against
real HTTP. It is installed with the package so that `bench/` imports it like any other
module instead of reaching into `tests/`; it needs the `test` extra
(`pip install -e '.[test]'`: aiohttp), and no product code imports it.
"""
