"""Kubernetes plumbing shared by the node agent and the binder, one of each.

`api_client` (which credentials, which errors are fatal), `informer` (list+watch
caches), `backoff`, `leader_election` (a Lease), `raw` (calls without model objects),
`quantity` (resource quantities), `health` (probes and /metrics), `http1` (HTTP/1.1
answers parsed from bytes, for the binder's writer and the emulator's webhook client).
"""
