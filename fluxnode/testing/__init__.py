"""What tests and benchmarks share: a Kubernetes API server on loopback, and test instances.

`fluxnode.testing.kube_emulator.KubeEmulator` serves the Kubernetes API (an aiohttp
server with resourceVersions, watches, selectors, patches, RBAC from the manifests) to the
official client, so the node agent and the binder are tested, and benchmarked, against
real HTTP. It is installed with the package so that `bench/` imports it like any other
module instead of reaching into `tests/`; it needs the `test` extra
(`pip install -e '.[test]'`: aiohttp), and no product code imports it.

`instance.Instance` runs a real N-broker instance (`fluxnode start`) for a test or a
benchmark, and at teardown fails when a broker did not stop by itself; `exits` watches
process exits through pidfds; `waiting.wait_for` waits on a condition with a timeout
(no fixed sleeps).
"""
